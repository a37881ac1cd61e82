import { assertJobTransition, isLeasedJob, type JobStatus } from "@drover/protocol";
import type { Transaction, Updateable } from "kysely";
import type { Database, JobRow, JobsTable } from "../db/schema.js";
import type { StoreContext } from "./context.js";

/*
 * Job status changes. Every one goes through moveJob, which refuses a change the lifecycle
 * table (packages/protocol/src/lifecycle.ts) does not allow with invalid_transition, and makes
 * the write conditional on the row as it was read (status and attempt), so two server
 * processes racing on one job (a sweeper and a finishing agent) cannot both move it.
 *
 * A job that stops being leased (requeued, or finished) loses its lease and its current token
 * in the same write, and the tokens it was given are retired: kept a while so a late caller
 * still learns `stale_attempt`/`job_finished` instead of a bare 401, then deleted by
 * deleteRetiredJobTokens.
 */

type Trx = Transaction<Database>;

/** Columns a move may set besides the status (the lease and token columns follow from it). */
export type JobMoveFields = Omit<Updateable<JobsTable>, "id" | "status">;

/**
 * Moves `job` (the row as read) to `to` with `fields`. Throws invalid_transition when the table
 * forbids it; returns false when the row is no longer in the status and attempt read (another
 * process moved it first), true when it moved.
 */
export async function moveJob(
  ctx: StoreContext,
  trx: Trx,
  job: Pick<JobRow, "id" | "status" | "attempt">,
  to: JobStatus,
  fields: JobMoveFields = {},
): Promise<boolean> {
  assertJobTransition(job.id, job.status, to);
  const releases = isLeasedJob(job.status) && !isLeasedJob(to);
  const moved = await trx
    .updateTable("jobs")
    .set({ ...fields, ...(releases ? { token_hash: null, lease_expires_at: null } : {}), status: to })
    .where("id", "=", job.id)
    .where("status", "=", job.status)
    .where("attempt", "=", job.attempt)
    .executeTakeFirst();
  if (Number(moved.numUpdatedRows) !== 1) return false;
  if (releases)
    await trx
      .updateTable("job_tokens")
      .set({ retired_at: ctx.now() })
      .where("job_id", "=", job.id)
      .where("retired_at", "is", null)
      .execute();
  return true;
}

/** Like moveJob, for a row locked in this transaction: it not moving is a bug, not a race. */
export async function moveLockedJob(
  ctx: StoreContext,
  trx: Trx,
  job: Pick<JobRow, "id" | "status" | "attempt">,
  to: JobStatus,
  fields: JobMoveFields = {},
): Promise<void> {
  if (!(await moveJob(ctx, trx, job, to, fields)))
    throw new Error(`job ${job.id} was no longer ${job.status} (attempt ${job.attempt}) when it was moved to ${to}`);
}

/** Job ids per statement when retiring tokens of many jobs: far below either database's parameter limit. */
const retireBatch = 500;

/**
 * Moves every job of `agentId` that is `from` to `to` in one statement (the table is checked
 * once for the pair), retiring their tokens when they stop being leased. Returns the jobs moved.
 */
export async function moveAgentJobs(
  ctx: StoreContext,
  trx: Trx,
  agentId: string,
  from: JobStatus,
  to: JobStatus,
  fields: JobMoveFields = {},
): Promise<Array<Pick<JobRow, "id" | "pool_id">>> {
  assertJobTransition(`(every ${from} job of agent ${agentId})`, from, to);
  const releases = isLeasedJob(from) && !isLeasedJob(to);
  const moved = await trx
    .updateTable("jobs")
    .set({ ...fields, ...(releases ? { token_hash: null, lease_expires_at: null } : {}), status: to })
    .where("agent_id", "=", agentId)
    .where("status", "=", from)
    .returning(["id", "pool_id"])
    .execute();
  if (releases) {
    for (let i = 0; i < moved.length; i += retireBatch) {
      const ids = moved.slice(i, i + retireBatch).map((j) => j.id);
      await trx
        .updateTable("job_tokens")
        .set({ retired_at: ctx.now() })
        .where("job_id", "in", ids)
        .where("retired_at", "is", null)
        .execute();
    }
  }
  return moved;
}

/**
 * Deletes job tokens retired more than `retentionMs` ago, a batch at a time, until none is left
 * or `deadlineMs` (on the store's clock) has passed, so a large backlog never holds the sweeper
 * for long; the rest goes on the next call. Returns how many were deleted.
 */
export async function deleteRetiredJobTokens(
  ctx: StoreContext,
  retentionMs: number,
  options: { batch?: number; deadlineMs?: number } = {},
): Promise<number> {
  const batch = options.batch ?? 500;
  const deadline = ctx.now() + (options.deadlineMs ?? 5_000);
  let deleted = 0;
  for (;;) {
    const before = ctx.now() - retentionMs;
    // One statement per batch: the subquery picks the batch, so no hashes travel to the server
    // and back (PostgreSQL has no DELETE … LIMIT; SQLite's is a compile-time option).
    const res = await ctx.db
      .deleteFrom("job_tokens")
      .where("token_hash", "in", (eb) =>
        eb.selectFrom("job_tokens").select("token_hash").where("retired_at", "<", before).limit(batch),
      )
      .executeTakeFirst();
    const n = Number(res.numDeletedRows);
    deleted += n;
    if (n < batch || ctx.now() >= deadline) return deleted;
  }
}
