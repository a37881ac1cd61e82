import { sql } from "kysely";
import type { Dialect } from "./schema.js";

/** Column types that differ between the two databases. */
export function types(dialect: Dialect) {
  return {
    time: dialect === "postgres" ? ("bigint" as const) : ("integer" as const),
    blob: dialect === "postgres" ? sql`bytea` : sql`blob`,
    serial: dialect === "postgres" ? ("bigserial" as const) : ("integer" as const),
  };
}
