import { DroverError, isLeasedJob, isTerminalRun, leasedJobStatuses, type Run } from "@drover/protocol";
import type { Selectable, Transaction } from "kysely";
import type { Database, JobsTable } from "../db/schema.js";
import type { StoreContext } from "./context.js";
import { inTransaction, type Effects } from "./transaction.js";
import { appendAtEnd } from "./logs.js";
import { moveJob, moveLockedJob } from "./job-moves.js";
import { applyJobOutcome, endRun, getRun, lockedRun } from "./runs.js";

/*
 * Runs and jobs ended before their agent ends them: a user's cancel (asked of the agent, or
 * forced), a cancel the agent does not honour in time, and the jobs of a revoked pool token.
 */

type Trx = Transaction<Database>;

/**
 * Cancels a run. Not yet started: ends at once (a claimed-but-unstarted job is refused when its
 * agent tries to start it). Running: asks the agent, which interrupts terraform and reports
 * the run canceled.
 */
export async function cancelRun(ctx: StoreContext, runId: string, options: { force?: boolean } = {}): Promise<Run> {
  await inTransaction(ctx, async (trx, effects) => {
    const run = await lockedRun(ctx, trx, runId);
    if (isTerminalRun(run.status))
      throw new DroverError("invalid_transition", `run ${run.id} is already ${run.status}`);
    const activeJobId = run.status === "confirmed" || run.status === "applying" ? run.apply_job_id : run.plan_job_id;
    let jobQuery = trx
      .selectFrom("jobs")
      .selectAll()
      .where("id", "=", activeJobId ?? "");
    if (ctx.dialect === "postgres") jobQuery = jobQuery.forUpdate();
    const job = activeJobId ? await jobQuery.executeTakeFirst() : undefined;
    if (job && job.status === "running" && options.force) {
      // The row was read and locked just above: no second read.
      await endLockedJobNow(
        ctx,
        trx,
        effects,
        job,
        "canceled",
        "force-canceled by request: the job ended on the server, its token no longer works and its state lock is released",
      );
      return;
    }
    if (job && job.status === "running") {
      // The first request starts the clock after which the sweeper force-cancels (decision 0010).
      await trx
        .updateTable("jobs")
        .set({ cancel_requested: 1, cancel_requested_at: job.cancel_requested_at ?? ctx.now() })
        .where("id", "=", job.id)
        .execute();
      await trx
        .updateTable("runs")
        .set({ cancel_requested: 1, updated_at: ctx.now() })
        .where("id", "=", run.id)
        .execute();
      effects.push(["job-cancel", job.id], ["run-changed", run.id]);
      return;
    }
    if (job && (job.status === "queued" || job.status === "assigned")) {
      await moveLockedJob(ctx, trx, job, "canceled", {
        cancel_requested: 1,
        finished_at: ctx.now(),
        message: "canceled before it started",
      });
      effects.push(["job-cancel", job.id], ["job-finished", job.id], ["log", job.id]);
    }
    await trx.updateTable("runs").set({ cancel_requested: 1 }).where("id", "=", run.id).execute();
    await endRun(ctx, trx, effects, run, "canceled", null);
  });
  return getRun(ctx, runId);
}

/**
 * Ends a leased job on the server without the agent: its token stops working (the holder is
 * told job_finished and kills terraform), its state lock is released, its run ends. For
 * force-cancel and revoked pool tokens. `job` is the row as listed outside this transaction;
 * false when the job was no longer leased by that attempt.
 */
export async function endJobNow(
  ctx: StoreContext,
  trx: Trx,
  effects: Effects,
  job: Selectable<JobsTable>,
  outcome: "canceled" | "errored",
  reason: string,
): Promise<boolean> {
  // Re-read in this transaction: the job may have started (or ended) since it was listed.
  let q = trx.selectFrom("jobs").selectAll().where("id", "=", job.id);
  if (ctx.dialect === "postgres") q = q.forUpdate();
  const current = await q.executeTakeFirst();
  if (!current || current.attempt !== job.attempt || !isLeasedJob(current.status)) return false;
  return endLockedJobNow(ctx, trx, effects, current, outcome, reason);
}

/** endJobNow for a leased row already read (and, on PostgreSQL, locked) in this transaction. */
async function endLockedJobNow(
  ctx: StoreContext,
  trx: Trx,
  effects: Effects,
  job: Selectable<JobsTable>,
  outcome: "canceled" | "errored",
  reason: string,
): Promise<boolean> {
  if (!(await moveJob(ctx, trx, job, outcome, { message: reason, finished_at: ctx.now(), cancel_requested: 1 })))
    return false;
  await appendAtEnd(trx, job.id, Buffer.from(`\n[drover] ${reason}\n`, "utf8"));
  effects.push(["job-cancel", job.id], ["job-finished", job.id], ["log", job.id]);
  await applyJobOutcome(ctx, trx, effects, job, outcome, reason);
  // A run already over (e.g. canceled) still must not leave this job's lock behind.
  await trx.deleteFrom("state_locks").where("job_id", "=", job.id).execute();
  return true;
}

/** Force-cancels running jobs whose cancel the agent has not honoured within `afterMs`. Returns how many. */
export async function forceOverdueCancels(ctx: StoreContext, afterMs: number): Promise<number> {
  const overdue = await ctx.db
    .selectFrom("jobs")
    .selectAll()
    .where("status", "=", "running")
    .where("cancel_requested", "=", 1)
    .where("cancel_requested_at", "<", ctx.now() - afterMs)
    .limit(100)
    .execute();
  let ended = 0;
  for (const job of overdue) {
    const reason = `the agent did not stop within ${Math.round(afterMs / 1000)} s of the cancel: force-canceled; the job's token no longer works and its state lock is released`;
    if (await inTransaction(ctx, (trx, effects) => endJobNow(ctx, trx, effects, job, "canceled", reason))) ended++;
  }
  return ended;
}

/** Ends every job held by agents that registered with pool token `tokenId` (it was revoked). */
export async function endJobsOfPoolToken(ctx: StoreContext, tokenId: string): Promise<number> {
  const jobs = await ctx.db
    .selectFrom("jobs")
    .innerJoin("agents", "agents.id", "jobs.agent_id")
    .selectAll("jobs")
    .select("agents.name as agentName")
    .where("agents.pool_token_id", "=", tokenId)
    .where("jobs.status", "in", leasedJobStatuses)
    .execute();
  let ended = 0;
  for (const { agentName, ...job } of jobs) {
    const reason = `the pool token of agent ${agentName} was revoked: the job ended and its token no longer works`;
    if (await inTransaction(ctx, (trx, effects) => endJobNow(ctx, trx, effects, job, "errored", reason))) ended++;
  }
  return ended;
}
