import { randomBytes } from "node:crypto";
import type { Kysely, Migration } from "kysely";
import type { Dialect } from "./schema.js";
import { types } from "./column-types.js";

/* VCS connections, workspaces linked to a repository branch, and where a run's configuration came from. */

/** Connections by token, the one link per workspace, and the commit a run was started for. */
export function vcs(dialect: Dialect): Migration {
  const t = types(dialect);
  return {
    async up(db: Kysely<unknown>) {
      await db.schema
        .createTable("vcs_connections")
        .addColumn("id", "text", (c) => c.primaryKey())
        .addColumn("name", "text", (c) => c.notNull().unique())
        .addColumn("provider", "text", (c) => c.notNull())
        .addColumn("url", "text", (c) => c.notNull())
        .addColumn("auth_kind", "text", (c) => c.notNull())
        .addColumn("token", "text", (c) => c.notNull())
        .addColumn("created_at", t.time, (c) => c.notNull())
        .execute();
      await db.schema
        .createTable("workspace_vcs")
        .addColumn("workspace_id", "text", (c) => c.primaryKey().references("workspaces.id").onDelete("cascade"))
        .addColumn("connection_id", "text", (c) => c.notNull().references("vcs_connections.id"))
        .addColumn("repository", "text", (c) => c.notNull())
        .addColumn("branch", "text", (c) => c.notNull())
        .addColumn("trigger_paths", "text", (c) => c.notNull())
        .addColumn("last_commit_sha", "text")
        .addColumn("last_error", "text")
        .addColumn("last_error_sha", "text")
        .addColumn("created_at", t.time, (c) => c.notNull())
        .execute();
      await db.schema.createIndex("workspace_vcs_connection").on("workspace_vcs").column("connection_id").execute();
      for (const column of [
        "source_repository",
        "source_branch",
        "source_commit_sha",
        "source_message",
        "source_author",
      ])
        await db.schema.alterTable("runs").addColumn(column, "text").execute();
    },
  };
}

/** The pull or merge request a speculative run was started for. */
export function runPullRequest(): Migration {
  return {
    async up(db: Kysely<unknown>) {
      await db.schema.alterTable("runs").addColumn("source_pull_request_number", "integer").execute();
      await db.schema.alterTable("runs").addColumn("source_pull_request_url", "text").execute();
    },
  };
}

/** A webhook secret of each connection, made by the server (existing connections get theirs here). */
export function vcsWebhookSecret(): Migration {
  return {
    async up(db: Kysely<unknown>) {
      await db.schema.alterTable("vcs_connections").addColumn("webhook_secret", "text").execute();
      const untyped = db as Kysely<{ vcs_connections: { id: string; webhook_secret: string | null } }>;
      for (const { id } of await untyped.selectFrom("vcs_connections").select("id").execute())
        await untyped
          .updateTable("vcs_connections")
          .set({ webhook_secret: newWebhookSecret() })
          .where("id", "=", id)
          .execute();
    },
  };
}

/** A fresh webhook secret: 32 random bytes, hex. */
export function newWebhookSecret(): string {
  return randomBytes(32).toString("hex");
}

/**
 * Each connection's REST API base and GitHub App credentials; the provider's id of a link's
 * webhook; and the reports to a VCS (commit statuses, the one pull-request comment) as an outbox.
 */
export function vcsApiAndReports(dialect: Dialect): Migration {
  const t = types(dialect);
  return {
    async up(db: Kysely<unknown>) {
      await db.schema.alterTable("vcs_connections").addColumn("api_url", "text").execute();
      await db.schema.alterTable("vcs_connections").addColumn("app_id", "text").execute();
      await db.schema.alterTable("vcs_connections").addColumn("installation_id", "bigint").execute();
      await db.schema.alterTable("vcs_connections").addColumn("private_key", "text").execute();
      const untyped = db as Kysely<{
        vcs_connections: { id: string; provider: "github" | "gitlab"; url: string; api_url: string | null };
      }>;
      for (const c of await untyped.selectFrom("vcs_connections").select(["id", "provider", "url"]).execute())
        await untyped
          .updateTable("vcs_connections")
          .set({ api_url: defaultApiUrl(c.provider, c.url) })
          .where("id", "=", c.id)
          .execute();
      await db.schema.alterTable("workspace_vcs").addColumn("webhook_id", "bigint").execute();
      await db.schema
        .createTable("vcs_reports")
        .addColumn("id", "text", (c) => c.primaryKey())
        // `status:<run>` or `comment:<workspace>:<repository>#<number>`: one row per thing on the VCS.
        .addColumn("key", "text", (c) => c.notNull().unique())
        .addColumn("kind", "text", (c) => c.notNull())
        .addColumn("workspace_id", "text", (c) => c.notNull().references("workspaces.id").onDelete("cascade"))
        .addColumn("run_id", "text", (c) => c.notNull())
        .addColumn("connection_id", "text", (c) => c.notNull())
        .addColumn("repository", "text", (c) => c.notNull())
        .addColumn("commit_sha", "text", (c) => c.notNull())
        .addColumn("pull_request_number", "integer")
        .addColumn("comment_id", "bigint")
        .addColumn("version", "integer", (c) => c.notNull())
        .addColumn("due_at", t.time)
        .addColumn("attempts", "integer", (c) => c.notNull())
        .addColumn("last_error", "text")
        .addColumn("updated_at", t.time, (c) => c.notNull())
        .execute();
      await db.schema.createIndex("vcs_reports_due").on("vcs_reports").column("due_at").execute();
    },
  };
}

/** The REST API base of a connection made before connections had one. */
function defaultApiUrl(provider: "github" | "gitlab", url: string): string {
  const base = url.replace(/\/+$/, "");
  if (provider === "github") return /^https:\/\/github\.com$/i.test(base) ? "https://api.github.com" : `${base}/api/v3`;
  return `${base}/api/v4`;
}

/** Whether a linked branch's new commits (merges) apply without confirmation, per link. */
export function linkApplyOnMerge(): Migration {
  return {
    async up(db: Kysely<unknown>) {
      await db.schema.alterTable("workspace_vcs").addColumn("apply_on_merge", "integer").execute();
    },
  };
}
