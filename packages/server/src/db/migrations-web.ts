import type { Kysely, Migration } from "kysely";
import { types } from "./column-types.js";
import type { Dialect } from "./schema.js";

/* Migrations of what the web UI brought: browser sessions, the indexes of its paged lists, run creators. */

/** Browser sign-in (the web UI): sessions made from a user token, ended by it too. */
export function webSessions(dialect: Dialect): Migration {
  const t = types(dialect);
  return {
    async up(db: Kysely<unknown>) {
      await db.schema
        .createTable("web_sessions")
        .addColumn("id", "text", (c) => c.primaryKey())
        .addColumn("user_token_id", "text", (c) => c.notNull().references("user_tokens.id").onDelete("cascade"))
        .addColumn("token_hash", "text", (c) => c.notNull().unique())
        .addColumn("created_at", t.time, (c) => c.notNull())
        .addColumn("expires_at", t.time, (c) => c.notNull())
        .addColumn("revoked_at", t.time)
        .execute();
      await db.schema.createIndex("web_sessions_expires_at").on("web_sessions").column("expires_at").execute();
    },
  };
}

/** Indexes of the paged run lists: a workspace's runs, all runs, runs by status, newest first. */
export function runListIndexes(): Migration {
  return {
    async up(db: Kysely<unknown>) {
      const index = (name: string, columns: string[]) =>
        db.schema.createIndex(name).ifNotExists().on("runs").columns(columns).execute();
      await index("runs_workspace_created", ["workspace_id", "created_at", "id"]);
      await index("runs_created", ["created_at", "id"]);
      await index("runs_status_created", ["status", "created_at", "id"]);
    },
  };
}

/** Who started a run: the description of its user token, kept with the run. */
export function runCreator(): Migration {
  return {
    async up(db: Kysely<unknown>) {
      await db.schema.alterTable("runs").addColumn("created_by", "text").execute();
    },
  };
}
