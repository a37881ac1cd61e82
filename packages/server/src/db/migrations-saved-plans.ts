import type { Kysely, Migration } from "kysely";
import type { Dialect } from "./schema.js";
import { types } from "./column-types.js";

/*
 * Saved cloud plans (`terraform plan -out`, decision 0077) shown by the human `terraform show`:
 * terraform renders them with the providers' schemas, which the plan job of such a run uploads.
 */

/** Runs know they are saved plans; a plan keeps its providers' schemas in chunks, like its JSON. */
export function savedPlanSchemas(dialect: Dialect): Migration {
  const t = types(dialect);
  return {
    async up(db: Kysely<unknown>) {
      await db.schema
        .alterTable("runs")
        .addColumn("save_plan", "integer", (c) => c.notNull().defaultTo(0))
        .execute();
      await db.schema.alterTable("plans").addColumn("provider_schemas_size", "integer").execute();
      await db.schema
        .createTable("provider_schema_chunks")
        .addColumn("owner_id", "text", (c) => c.notNull().references("plans.run_id").onDelete("cascade"))
        .addColumn("seq", "integer", (c) => c.notNull())
        .addColumn("data", t.blob, (c) => c.notNull())
        .addPrimaryKeyConstraint("provider_schema_chunks_pk", ["owner_id", "seq"])
        .execute();
    },
  };
}
