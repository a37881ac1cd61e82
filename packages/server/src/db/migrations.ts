import { type Kysely, type Migration, type MigrationProvider, sql } from "kysely";
import type { Dialect } from "./schema.js";
import { types } from "./column-types.js";
import { destroyGuard, destroyGuardOutcome } from "./migrations-destroy-guard.js";
import { runPlanOptions } from "./migrations-plan-options.js";
import { runCreator, runListIndexes, webSessions } from "./migrations-web.js";
import { variableHcl, workspaceAllowDestroyAll } from "./migrations-workspace-options.js";
import { linkApplyOnMerge, runPullRequest, vcs, vcsApiAndReports, vcsWebhookSecret } from "./migrations-vcs.js";
import { workspaceExecutionMode, workspaceRemoteStateConsumers, workspaceTfeTags } from "./migrations-tfe.js";
import { vcsDeliveries, vcsDeliveryClaims } from "./migrations-vcs-deliveries.js";
import { tfeRuns } from "./migrations-tfe-runs.js";
import { vcsAgents } from "./migrations-vcs-agents.js";
import { savedPlanSchemas } from "./migrations-saved-plans.js";

/*
 * The one migration history, applied at server start on either database. Column types
 * that differ between SQLite and PostgreSQL come from `types(dialect)`; everything else is
 * written once.
 */

function initial(dialect: Dialect): Migration {
  const t = types(dialect);
  return {
    async up(db: Kysely<unknown>) {
      await db.schema
        .createTable("pools")
        .addColumn("id", "text", (c) => c.primaryKey())
        .addColumn("name", "text", (c) => c.notNull().unique())
        .addColumn("created_at", t.time, (c) => c.notNull())
        .execute();
      await db.schema
        .createTable("pool_tokens")
        .addColumn("id", "text", (c) => c.primaryKey())
        .addColumn("pool_id", "text", (c) => c.notNull().references("pools.id").onDelete("cascade"))
        .addColumn("description", "text", (c) => c.notNull())
        .addColumn("token_hash", "text", (c) => c.notNull().unique())
        .addColumn("created_at", t.time, (c) => c.notNull())
        .addColumn("last_used_at", t.time)
        .addColumn("revoked_at", t.time)
        .execute();
      await db.schema
        .createTable("user_tokens")
        .addColumn("id", "text", (c) => c.primaryKey())
        .addColumn("description", "text", (c) => c.notNull())
        .addColumn("token_hash", "text", (c) => c.notNull().unique())
        .addColumn("created_at", t.time, (c) => c.notNull())
        .execute();
      await db.schema
        .createTable("agents")
        .addColumn("id", "text", (c) => c.primaryKey())
        .addColumn("pool_id", "text", (c) => c.notNull().references("pools.id").onDelete("cascade"))
        .addColumn("pool_token_id", "text", (c) => c.notNull())
        .addColumn("name", "text", (c) => c.notNull())
        .addColumn("version", "text", (c) => c.notNull())
        .addColumn("driver", "text", (c) => c.notNull())
        .addColumn("capacity", "integer", (c) => c.notNull())
        .addColumn("running_jobs", "integer", (c) => c.notNull().defaultTo(0))
        .addColumn("session_hash", "text", (c) => c.notNull())
        .addColumn("state", "text", (c) => c.notNull())
        .addColumn("registered_at", t.time, (c) => c.notNull())
        .addColumn("last_seen_at", t.time, (c) => c.notNull())
        .execute();
      await db.schema.createIndex("agents_pool_name").on("agents").columns(["pool_id", "name"]).execute();
      await db.schema
        .createTable("workspaces")
        .addColumn("id", "text", (c) => c.primaryKey())
        .addColumn("name", "text", (c) => c.notNull().unique())
        .addColumn("pool_id", "text", (c) => c.notNull().references("pools.id"))
        .addColumn("engine", "text", (c) => c.notNull())
        .addColumn("engine_version", "text")
        .addColumn("working_directory", "text", (c) => c.notNull())
        .addColumn("auto_apply", "integer", (c) => c.notNull())
        .addColumn("current_run_id", "text")
        .addColumn("created_at", t.time, (c) => c.notNull())
        .execute();
      await db.schema
        .createTable("variables")
        .addColumn("workspace_id", "text", (c) => c.notNull().references("workspaces.id").onDelete("cascade"))
        .addColumn("kind", "text", (c) => c.notNull())
        .addColumn("key", "text", (c) => c.notNull())
        .addColumn("value", "text", (c) => c.notNull())
        .addColumn("sensitive", "integer", (c) => c.notNull())
        .addColumn("updated_at", t.time, (c) => c.notNull())
        .addPrimaryKeyConstraint("variables_pk", ["workspace_id", "kind", "key"])
        .execute();
      await db.schema
        .createTable("configuration_versions")
        .addColumn("id", "text", (c) => c.primaryKey())
        .addColumn("workspace_id", "text", (c) => c.notNull().references("workspaces.id").onDelete("cascade"))
        .addColumn("size", "integer", (c) => c.notNull())
        .addColumn("sha256", "text", (c) => c.notNull())
        .addColumn("archive", t.blob, (c) => c.notNull())
        .addColumn("created_at", t.time, (c) => c.notNull())
        .execute();
      await db.schema
        .createTable("runs")
        .addColumn("id", "text", (c) => c.primaryKey())
        .addColumn("workspace_id", "text", (c) => c.notNull().references("workspaces.id").onDelete("cascade"))
        .addColumn("configuration_version_id", "text", (c) => c.notNull())
        .addColumn("status", "text", (c) => c.notNull())
        .addColumn("plan_only", "integer", (c) => c.notNull())
        .addColumn("is_destroy", "integer", (c) => c.notNull())
        .addColumn("auto_apply", "integer", (c) => c.notNull())
        .addColumn("message", "text", (c) => c.notNull())
        .addColumn("error_message", "text")
        .addColumn("cancel_requested", "integer", (c) => c.notNull().defaultTo(0))
        .addColumn("plan_add", "integer")
        .addColumn("plan_change", "integer")
        .addColumn("plan_destroy", "integer")
        .addColumn("has_changes", "integer")
        .addColumn("plan_job_id", "text")
        .addColumn("apply_job_id", "text")
        .addColumn("outputs_json", "text")
        .addColumn("created_at", t.time, (c) => c.notNull())
        .addColumn("updated_at", t.time, (c) => c.notNull())
        .execute();
      await db.schema
        .createIndex("runs_workspace_status")
        .on("runs")
        .columns(["workspace_id", "status", "created_at"])
        .execute();
      await db.schema
        .createTable("jobs")
        .addColumn("id", "text", (c) => c.primaryKey())
        .addColumn("run_id", "text", (c) => c.notNull().references("runs.id").onDelete("cascade"))
        .addColumn("workspace_id", "text", (c) => c.notNull())
        .addColumn("pool_id", "text", (c) => c.notNull())
        .addColumn("phase", "text", (c) => c.notNull())
        .addColumn("status", "text", (c) => c.notNull())
        .addColumn("attempt", "integer", (c) => c.notNull())
        .addColumn("agent_id", "text")
        .addColumn("token_hash", "text")
        .addColumn("lease_expires_at", t.time)
        .addColumn("cancel_requested", "integer", (c) => c.notNull().defaultTo(0))
        .addColumn("message", "text")
        .addColumn("log_size", "integer", (c) => c.notNull().defaultTo(0))
        .addColumn("queued_at", t.time, (c) => c.notNull())
        .addColumn("created_at", t.time, (c) => c.notNull())
        .addColumn("started_at", t.time)
        .addColumn("finished_at", t.time)
        .execute();
      await db.schema.createIndex("jobs_queue").on("jobs").columns(["pool_id", "status", "queued_at"]).execute();
      await db.schema.createIndex("jobs_lease").on("jobs").columns(["status", "lease_expires_at"]).execute();
      await db.schema
        .createTable("log_chunks")
        .addColumn("job_id", "text", (c) => c.notNull().references("jobs.id").onDelete("cascade"))
        .addColumn("offset", "integer", (c) => c.notNull())
        .addColumn("end_offset", "integer", (c) => c.notNull())
        .addColumn("data", t.blob, (c) => c.notNull())
        .addPrimaryKeyConstraint("log_chunks_pk", ["job_id", "offset"])
        .execute();
      await db.schema
        .createTable("plans")
        .addColumn("run_id", "text", (c) => c.primaryKey().references("runs.id").onDelete("cascade"))
        .addColumn("plan_file", t.blob)
        .addColumn("plan_json", t.blob)
        .addColumn("created_at", t.time, (c) => c.notNull())
        .execute();
      await db.schema
        .createTable("state_versions")
        .addColumn("seq", t.serial, (c) => (dialect === "postgres" ? c.primaryKey() : c.primaryKey().autoIncrement()))
        .addColumn("id", "text", (c) => c.notNull().unique())
        .addColumn("workspace_id", "text", (c) => c.notNull().references("workspaces.id").onDelete("cascade"))
        .addColumn("serial", "integer")
        .addColumn("lineage", "text")
        .addColumn("md5", "text", (c) => c.notNull())
        .addColumn("size", "integer", (c) => c.notNull())
        .addColumn("body", t.blob, (c) => c.notNull())
        .addColumn("run_id", "text")
        .addColumn("created_at", t.time, (c) => c.notNull())
        .execute();
      await db.schema
        .createIndex("state_versions_workspace")
        .on("state_versions")
        .columns(["workspace_id", "seq"])
        .execute();
      await db.schema
        .createTable("state_locks")
        .addColumn("workspace_id", "text", (c) => c.primaryKey().references("workspaces.id").onDelete("cascade"))
        .addColumn("lock_id", "text", (c) => c.notNull())
        .addColumn("info", "text", (c) => c.notNull())
        .addColumn("job_id", "text")
        .addColumn("created_at", t.time, (c) => c.notNull())
        .execute();
    },
  };
}

/**
 * Decision 0010: every token a job was ever given (hashed), so that a genuine token of an
 * earlier attempt can be told "stale" while a forged one gets 401; state versions that a
 * DELETE hides rather than erases.
 */
function security(dialect: Dialect): Migration {
  const t = types(dialect);
  return {
    async up(db: Kysely<unknown>) {
      await db.schema
        .createTable("job_tokens")
        .addColumn("token_hash", "text", (c) => c.primaryKey())
        .addColumn("job_id", "text", (c) => c.notNull().references("jobs.id").onDelete("cascade"))
        .addColumn("attempt", "integer", (c) => c.notNull())
        .addColumn("created_at", t.time, (c) => c.notNull())
        .execute();
      await db.schema.createIndex("job_tokens_job").on("job_tokens").columns(["job_id"]).execute();
      // A DELETE of the state hides its versions instead of erasing them.
      await db.schema.alterTable("state_versions").addColumn("deleted_at", t.time).execute();
    },
  };
}

/** Decision 0010: when a cancel was first requested, so an unhonoured one becomes a force-cancel. */
function forceCancel(dialect: Dialect): Migration {
  const t = types(dialect);
  return {
    async up(db: Kysely<unknown>) {
      await db.schema.alterTable("jobs").addColumn("cancel_requested_at", t.time).execute();
    },
  };
}

/**
 * Decision 0010: user tokens get an expiry and a revocation time; `bootstrap` marks the one
 * DROVER_ADMIN_TOKEN installed, so that a new value revokes the previous one.
 */
function userTokens(dialect: Dialect): Migration {
  const t = types(dialect);
  return {
    async up(db: Kysely<unknown>) {
      await db.schema.alterTable("user_tokens").addColumn("expires_at", t.time).execute();
      await db.schema.alterTable("user_tokens").addColumn("revoked_at", t.time).execute();
      await db.schema
        .alterTable("user_tokens")
        .addColumn("bootstrap", "integer", (c) => c.notNull().defaultTo(0))
        .execute();
      await sql`update user_tokens set bootstrap = 1 where description = 'DROVER_ADMIN_TOKEN'`.execute(db);
    },
  };
}

/**
 * Decision 0012: bodies move from one blob column per row to numbered chunks in a table per
 * owner, so they are written and read a chunk at a time. Existing bodies become one chunk each.
 */
function chunkedBodies(dialect: Dialect): Migration {
  const t = types(dialect);
  return {
    async up(db: Kysely<unknown>) {
      const owners: Array<[string, string, string, string]> = [
        ["state_version_chunks", "state_versions", "id", "body"],
        ["configuration_version_chunks", "configuration_versions", "id", "archive"],
        ["plan_file_chunks", "plans", "run_id", "plan_file"],
        ["plan_json_chunks", "plans", "run_id", "plan_json"],
      ];
      await db.schema.alterTable("plans").addColumn("plan_file_size", "integer").execute();
      await db.schema.alterTable("plans").addColumn("plan_json_size", "integer").execute();
      await sql`update plans set plan_file_size = length(plan_file) where plan_file is not null`.execute(db);
      await sql`update plans set plan_json_size = length(plan_json) where plan_json is not null`.execute(db);
      for (const [chunks, owner, key, column] of owners) {
        await db.schema
          .createTable(chunks)
          .addColumn("owner_id", "text", (c) => c.notNull().references(`${owner}.${key}`).onDelete("cascade"))
          .addColumn("seq", "integer", (c) => c.notNull())
          .addColumn("data", t.blob, (c) => c.notNull())
          .addPrimaryKeyConstraint(`${chunks}_pk`, ["owner_id", "seq"])
          .execute();
        await sql`insert into ${sql.table(chunks)} (owner_id, seq, data) select ${sql.ref(key)}, 0, ${sql.ref(column)} from ${sql.table(owner)} where ${sql.ref(column)} is not null and length(${sql.ref(column)}) > 0`.execute(
          db,
        );
      }
      for (const [, owner, , column] of owners) await db.schema.alterTable(owner).dropColumn(column).execute();
    },
  };
}

/** Decision 0026: a workspace may name the runner image its runs' containers start from (docker driver). */
function runnerImage(): Migration {
  return {
    async up(db: Kysely<unknown>) {
      await db.schema.alterTable("workspaces").addColumn("runner_image", "text").execute();
    },
  };
}

/**
 * Decision 0022: a job token is retired when its job stops being leased (requeued or finished)
 * and deleted a retention period later. Tokens issued before this migration whose job has moved
 * on since are retired as of the job's end, or of their issue when the job was requeued.
 */
function jobTokenRetirement(dialect: Dialect): Migration {
  const t = types(dialect);
  return {
    async up(db: Kysely<unknown>) {
      await db.schema.alterTable("job_tokens").addColumn("retired_at", t.time).execute();
      await sql`update job_tokens set retired_at = coalesce((select finished_at from jobs where jobs.id = job_tokens.job_id), created_at)
        where token_hash not in (select token_hash from jobs where token_hash is not null)`.execute(db);
      await db.schema.createIndex("job_tokens_retired").on("job_tokens").columns(["retired_at"]).execute();
    },
  };
}

/**
 * Decision 0028: the identity of the process that started a job, so a second process (a
 * re-created pod) is refused instead of running the job's steps again.
 */
function jobStarter(): Migration {
  return {
    async up(db: Kysely<unknown>) {
      await db.schema.alterTable("jobs").addColumn("started_by", "text").execute();
    },
  };
}

/**
 * Indexes for the queue at scale (decision 0033): the claim's `order by queued_at, id` read in
 * index order (it sorted the pool's queued jobs that share a millisecond), a run's jobs by run
 * (every `run show`, follow and finished run read scanned the whole jobs table), an agent's jobs
 * by agent (a stopping agent's release, the busy check of the demand figures), and the next
 * pending run of a workspace in order.
 *
 * SQLite's DDL here is not in one transaction (Kysely's SQLite adapter has none for DDL), so a
 * crash between the drop and the creates leaves some of them done; every step tolerates that,
 * and the next start finishes the migration instead of failing on "no such index" or "already
 * exists". PostgreSQL runs it in a transaction, where the index builds on a large jobs table
 * can take longer than any request deadline: migrations run on a connection without one
 * (migrationConnectionSettings), and this transaction also lifts a statement_timeout an operator
 * set on the role or database, or the server could never start on such a database.
 */
function queueIndexes(dialect: Dialect): Migration {
  return {
    async up(db: Kysely<unknown>) {
      if (dialect === "postgres") await sql`set local statement_timeout = 0`.execute(db);
      await db.schema.dropIndex("jobs_queue").ifExists().execute();
      await db.schema
        .createIndex("jobs_queue")
        .ifNotExists()
        .on("jobs")
        .columns(["pool_id", "status", "queued_at", "id"])
        .execute();
      await db.schema
        .createIndex("jobs_run")
        .ifNotExists()
        .on("jobs")
        .columns(["run_id", "created_at", "id"])
        .execute();
      await db.schema.createIndex("jobs_agent").ifNotExists().on("jobs").columns(["agent_id", "status"]).execute();
      await db.schema.dropIndex("runs_workspace_status").ifExists().execute();
      await db.schema
        .createIndex("runs_workspace_status")
        .ifNotExists()
        .on("runs")
        .columns(["workspace_id", "status", "created_at", "id"])
        .execute();
    },
  };
}

/**
 * Decision 0041: what each agent declared it can do, so the plan JSON is left to the apply job
 * only in a pool whose every live agent renders it there.
 */
function agentCapabilities(): Migration {
  return {
    async up(db: Kysely<unknown>) {
      await db.schema.alterTable("agents").addColumn("capabilities", "text").execute();
    },
  };
}

/** Decision 0041: an apply job's failure to render the plan JSON, so readers stop waiting for it. */
function planJsonError(): Migration {
  return {
    async up(db: Kysely<unknown>) {
      await db.schema.alterTable("plans").addColumn("plan_json_error", "text").execute();
    },
  };
}

/**
 * Issue 25 (decision 0046): who stored a run's plan JSON, so an apply job's upload is refused
 * before its body is read; and whether a job's log was cut at DROVER_MAX_JOB_LOG_MB.
 */
function uploadLimits(): Migration {
  return {
    async up(db: Kysely<unknown>) {
      await db.schema.alterTable("plans").addColumn("plan_json_phase", "text").execute();
      await db.schema
        .alterTable("jobs")
        .addColumn("log_truncated", "integer", (c) => c.notNull().defaultTo(0))
        .execute();
    },
  };
}

/**
 * Decision 0050: the plan job always stores the plan JSON, so what served leaving it to the apply
 * job goes. One column per migration: a migration is one statement, so a crash between two drops
 * (SQLite runs DDL outside a transaction here) never leaves one that fails at the next start.
 */
function dropColumn(table: string, column: string): Migration {
  return {
    async up(db: Kysely<unknown>) {
      await db.schema.alterTable(table).dropColumn(column).execute();
    },
  };
}

/** All migrations in order; names sort lexically, which is the order Kysely applies them. */
export function migrationProvider(dialect: Dialect): MigrationProvider {
  return {
    getMigrations: async () => ({
      "0001_initial": initial(dialect),
      "0010a_security": security(dialect),
      "0010b_force_cancel": forceCancel(dialect),
      "0010c_user_tokens": userTokens(dialect),
      "0012_chunked_bodies": chunkedBodies(dialect),
      "0026_runner_image": runnerImage(),
      "0026b_job_token_retirement": jobTokenRetirement(dialect),
      "0028_job_starter": jobStarter(),
      "0033_queue_indexes": queueIndexes(dialect),
      "0041_agent_capabilities": agentCapabilities(),
      "0041b_plan_json_error": planJsonError(),
      "0046_upload_limits": uploadLimits(),
      "0050a_drop_agent_capabilities": dropColumn("agents", "capabilities"),
      "0050b_drop_plan_json_error": dropColumn("plans", "plan_json_error"),
      "0050c_drop_plan_json_phase": dropColumn("plans", "plan_json_phase"),
      "0058_web_sessions": webSessions(dialect),
      "0059_run_list_indexes": runListIndexes(),
      "0060_run_creator": runCreator(),
      "0061_destroy_guard": destroyGuard(),
      "0062_run_plan_options": runPlanOptions(),
      "0063a_variable_hcl": variableHcl(),
      "0063b_workspace_allow_destroy_all": workspaceAllowDestroyAll(),
      "0064_vcs": vcs(dialect),
      "0064b_run_pull_request": runPullRequest(),
      "0064c_vcs_webhook_secret": vcsWebhookSecret(),
      "0065_vcs_deliveries": vcsDeliveries(dialect),
      "0066_vcs_api_and_reports": vcsApiAndReports(dialect),
      "0067_vcs_agents": vcsAgents(dialect),
      "0068a_workspace_tfe_tags": workspaceTfeTags(),
      "0068b_workspace_execution_mode": workspaceExecutionMode(),
      "0069_tfe_runs": tfeRuns(dialect),
      "0070_link_apply_on_merge": linkApplyOnMerge(),
      "0071_workspace_remote_state_consumers": workspaceRemoteStateConsumers(),
      "0073_run_guard_outcome": destroyGuardOutcome(),
      "0074_vcs_delivery_claims": vcsDeliveryClaims(dialect),
      "0075_saved_plan_schemas": savedPlanSchemas(dialect),
    }),
  };
}
