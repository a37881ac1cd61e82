import { DroverError, isFinishedJob } from "@drover/protocol";
import type { Transaction } from "kysely";
import type { Database, JobRow } from "../db/schema.js";
import type { StoreContext } from "./context.js";

/**
 * Re-reads a job inside a transaction and checks the caller still holds its attempt (on
 * PostgreSQL the row stays locked until the transaction ends, so calls of one job take turns).
 */
export async function currentAttempt(ctx: StoreContext, trx: Transaction<Database>, job: JobRow): Promise<JobRow> {
  let q = trx.selectFrom("jobs").selectAll().where("id", "=", job.id);
  if (ctx.dialect === "postgres") q = q.forUpdate();
  const row = await q.executeTakeFirstOrThrow();
  if (row.attempt !== job.attempt)
    throw new DroverError("stale_attempt", `job ${job.id} was reassigned (attempt ${row.attempt})`, {
      details: { attempt: row.attempt },
    });
  if (isFinishedJob(row.status))
    throw new DroverError("job_finished", `job ${job.id} has ended (${row.status})`, {
      details: { status: row.status },
    });
  return row;
}
