import type { Kysely, Migration } from "kysely";

/*
 * Decision 0063. One column per migration: SQLite runs DDL outside a transaction here, so a crash
 * between two statements never leaves a migration that fails at the next start.
 */

/** A terraform variable whose value is an HCL expression (a list, map, object…), not a string. */
export function variableHcl(): Migration {
  return {
    async up(db: Kysely<unknown>) {
      await db.schema
        .alterTable("variables")
        .addColumn("hcl", "integer", (c) => c.notNull().defaultTo(0))
        .execute();
    },
  };
}

/** The workspace's default for runs that do not say whether they may auto-apply a destroy-everything plan. */
export function workspaceAllowDestroyAll(): Migration {
  return {
    async up(db: Kysely<unknown>) {
      await db.schema
        .alterTable("workspaces")
        .addColumn("allow_destroy_all", "integer", (c) => c.notNull().defaultTo(0))
        .execute();
    },
  };
}
