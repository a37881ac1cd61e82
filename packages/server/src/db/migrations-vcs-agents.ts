import { type Kysely, type Migration } from "kysely";
import type { Dialect } from "./schema.js";
import { types } from "./column-types.js";

/*
 * VCS agents: pools get a kind, a connection may be reached through a pool of VCS agents (its
 * token then optional on the server), and the tasks those agents lease.
 */
export function vcsAgents(dialect: Dialect): Migration {
  const t = types(dialect);
  return {
    async up(db: Kysely<unknown>) {
      await db.schema
        .alterTable("pools")
        .addColumn("kind", "text", (c) => c.notNull().defaultTo("runs"))
        .execute();
      await db.schema
        .alterTable("vcs_connections")
        .addColumn("via_pool_id", "text", (c) => c.references("pools.id"))
        .execute();
      await db.schema
        .createTable("vcs_tasks")
        .addColumn("id", "text", (c) => c.primaryKey())
        .addColumn("pool_id", "text", (c) => c.notNull().references("pools.id").onDelete("cascade"))
        .addColumn("connection_id", "text", (c) => c.notNull().references("vcs_connections.id").onDelete("cascade"))
        .addColumn("kind", "text", (c) => c.notNull())
        .addColumn("payload", "text", (c) => c.notNull())
        .addColumn("workspace_id", "text", (c) => c.references("workspaces.id").onDelete("cascade"))
        .addColumn("status", "text", (c) => c.notNull())
        .addColumn("attempt", "integer", (c) => c.notNull().defaultTo(0))
        .addColumn("agent_id", "text")
        .addColumn("lease_expires_at", t.time)
        .addColumn("deadline_at", t.time, (c) => c.notNull())
        .addColumn("result", "text")
        .addColumn("error", "text")
        .addColumn("configuration_version_id", "text")
        .addColumn("created_at", t.time, (c) => c.notNull())
        .addColumn("finished_at", t.time)
        .execute();
      await db.schema
        .createIndex("vcs_tasks_pool_status")
        .on("vcs_tasks")
        .columns(["pool_id", "status", "created_at"])
        .execute();
    },
  };
}
