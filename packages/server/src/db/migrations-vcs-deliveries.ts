import type { Kysely, Migration } from "kysely";
import { types } from "./column-types.js";
import type { Dialect } from "./schema.js";

/**
 * Webhook deliveries of VCS connections, one row per provider delivery id (a replay is the same
 * row), and what each did for each linked workspace.
 */
export function vcsDeliveries(dialect: Dialect): Migration {
  const t = types(dialect);
  return {
    async up(db: Kysely<unknown>) {
      await db.schema
        .createTable("vcs_deliveries")
        .addColumn("id", "text", (c) => c.primaryKey())
        .addColumn("connection_id", "text", (c) => c.notNull().references("vcs_connections.id").onDelete("cascade"))
        .addColumn("delivery_id", "text", (c) => c.notNull())
        .addColumn("event", "text", (c) => c.notNull())
        .addColumn("received_at", t.time, (c) => c.notNull())
        .addColumn("status", "text", (c) => c.notNull())
        .addColumn("summary", "text")
        .addColumn("work", "text", (c) => c.notNull())
        .addUniqueConstraint("vcs_deliveries_connection_delivery", ["connection_id", "delivery_id"])
        .execute();
      await db.schema
        .createIndex("vcs_deliveries_received")
        .on("vcs_deliveries")
        .columns(["connection_id", "received_at"])
        .execute();
      await db.schema
        .createTable("vcs_delivery_outcomes")
        .addColumn("delivery_id", "text", (c) => c.notNull().references("vcs_deliveries.id").onDelete("cascade"))
        .addColumn("workspace_id", "text", (c) => c.notNull())
        .addColumn("workspace_name", "text", (c) => c.notNull())
        .addColumn("outcome", "text", (c) => c.notNull())
        .addColumn("run_id", "text")
        .addColumn("detail", "text")
        .addPrimaryKeyConstraint("vcs_delivery_outcomes_pk", ["delivery_id", "workspace_id"])
        .execute();
      await db.schema.createIndex("vcs_delivery_outcomes_run").on("vcs_delivery_outcomes").column("run_id").execute();
    },
  };
}

/**
 * A claim on a delivery's work lasts until `claimed_until`, renewed while the work goes on: a
 * delivery whose server died (not stopped) goes back to `received` once its claim lapses, where
 * an unexpired claim is the work of another live server sharing the database. Deliveries already
 * `processing` have no claim time and are taken back at once.
 */
export function vcsDeliveryClaims(dialect: Dialect): Migration {
  const t = types(dialect);
  return {
    async up(db: Kysely<unknown>) {
      await db.schema.alterTable("vcs_deliveries").addColumn("claimed_until", t.time).execute();
    },
  };
}
