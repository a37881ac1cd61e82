import type { Kysely, Migration } from "kysely";

/*
 * Decision 0068: what terraform's `cloud` block keeps on a workspace. One column per migration,
 * as in migrations-workspace-options.ts.
 */

/** The workspace's tags, a JSON array of names: the cloud block picks workspaces by them. */
export function workspaceTfeTags(): Migration {
  return {
    async up(db: Kysely<unknown>) {
      await db.schema
        .alterTable("workspaces")
        .addColumn("tfe_tags", "text", (c) => c.notNull().defaultTo("[]"))
        .execute();
    },
  };
}

/** `remote` (runs on agents) or `local` (terraform runs where it is started; Drover keeps the state). */
export function workspaceExecutionMode(): Migration {
  return {
    async up(db: Kysely<unknown>) {
      await db.schema
        .alterTable("workspaces")
        .addColumn("execution_mode", "text", (c) => c.notNull().defaultTo("remote"))
        .execute();
    },
  };
}

/**
 * Who may read the workspace's state from inside their runs (decision 0072): a JSON array of
 * workspace ids, `"*"` standing for every workspace. One column, so one DDL statement.
 */
export function workspaceRemoteStateConsumers(): Migration {
  return {
    async up(db: Kysely<unknown>) {
      await db.schema
        .alterTable("workspaces")
        .addColumn("remote_state_consumers", "text", (c) => c.notNull().defaultTo("[]"))
        .execute();
    },
  };
}
