import type { Kysely, Migration } from "kysely";
import type { Dialect } from "./schema.js";
import { types } from "./column-types.js";

/*
 * Remote runs of stock terraform/tofu through the TFE-compatible API: the key capability URLs
 * are signed with, the spent nonces of upload URLs, configuration versions that exist before
 * their archive (and whether they only plan), and what a run keeps of the client that started it.
 */

export function tfeRuns(dialect: Dialect): Migration {
  const t = types(dialect);
  return {
    async up(db: Kysely<unknown>) {
      await db.schema
        .createTable("server_keys")
        .addColumn("name", "text", (c) => c.primaryKey())
        .addColumn("key", t.blob, (c) => c.notNull())
        .addColumn("created_at", t.time, (c) => c.notNull())
        .execute();
      await db.schema
        .createTable("capability_uses")
        .addColumn("nonce", "text", (c) => c.primaryKey())
        .addColumn("expires_at", t.time, (c) => c.notNull())
        .execute();
      await db.schema
        .createTable("tfe_configuration_versions")
        .addColumn("id", "text", (c) => c.primaryKey())
        .addColumn("workspace_id", "text", (c) => c.notNull().references("workspaces.id").onDelete("cascade"))
        .addColumn("speculative", "integer", (c) => c.notNull())
        .addColumn("status", "text", (c) => c.notNull())
        .addColumn("error_message", "text")
        .addColumn("created_at", t.time, (c) => c.notNull())
        .execute();
      await db.schema.alterTable("runs").addColumn("engine", "text").execute();
      await db.schema.alterTable("runs").addColumn("run_variables", "text").execute();
    },
  };
}
