import type { Kysely, Migration } from "kysely";

/** A run's plan options (targets, replacements, refresh-only) as JSON; null is a full plan. */
export function runPlanOptions(): Migration {
  return {
    async up(db: Kysely<unknown>) {
      await db.schema.alterTable("runs").addColumn("plan_options", "text").execute();
    },
  };
}
