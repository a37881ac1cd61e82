import type { Kysely, Migration } from "kysely";

/* The destroy-all guard: what a run's plan would destroy, and whether the run may apply that by itself. */

/** Runs learn whether their plan destroys everything, and whether they may auto-apply such a plan. */
export function destroyGuard(): Migration {
  return {
    async up(db: Kysely<unknown>) {
      await db.schema.alterTable("runs").addColumn("destroys_all", "integer").execute();
      await db.schema
        .alterTable("runs")
        .addColumn("allow_destroy_all", "integer", (c) => c.notNull().defaultTo(0))
        .execute();
    },
  };
}

/** Runs learn what the guard makes of them: `wait` as planned, or `fail` (the cloud block's -auto-approve). */
export function destroyGuardOutcome(): Migration {
  return {
    async up(db: Kysely<unknown>) {
      await db.schema
        .alterTable("runs")
        .addColumn("guard_outcome", "text", (c) => c.notNull().defaultTo("wait"))
        .execute();
    },
  };
}
