import { inTransaction } from "./transaction.js";
import type { StoreContext } from "./context.js";
import { moveLockedJob } from "./job-moves.js";
import { endRun, lockedRun } from "./runs.js";

/*
 * A newer commit of a branch (or of a pull request) makes the runs still waiting for the older
 * one pointless: they are canceled before they start, as a user's cancel of an unstarted run
 * ends it. A run whose plan has started is left to finish.
 */

export interface SupersedeInput {
  workspaceId: string;
  repository: string;
  /** The newer run, which stays. */
  keepRunId: string;
  /** A branch's commits: its runs with no pull request; a pull request's: its speculative runs. */
  branch: string;
  pullRequest: number | null;
  /** Why, as the canceled runs' error message says. */
  reason: string;
}

/** Cancels the workspace's not yet started runs of the same branch or pull request; returns their ids. */
export async function supersedeQueuedRuns(ctx: StoreContext, input: SupersedeInput): Promise<string[]> {
  let q = ctx.db
    .selectFrom("runs")
    .select("id")
    .where("workspace_id", "=", input.workspaceId)
    .where("status", "in", ["pending", "queued"])
    .where("source_repository", "=", input.repository)
    .where("id", "!=", input.keepRunId);
  q =
    input.pullRequest === null
      ? q.where("source_branch", "=", input.branch).where("source_pull_request_number", "is", null)
      : q.where("source_pull_request_number", "=", input.pullRequest).where("plan_only", "=", 1);
  const candidates = await q.execute();
  const superseded: string[] = [];
  for (const { id } of candidates) {
    const done = await inTransaction(ctx, async (trx, effects) => {
      const run = await lockedRun(ctx, trx, id);
      // Started meanwhile (its plan job began): it finishes.
      if (run.status !== "pending" && run.status !== "queued") return false;
      if (run.plan_job_id !== null) {
        let jq = trx.selectFrom("jobs").selectAll().where("id", "=", run.plan_job_id);
        if (ctx.dialect === "postgres") jq = jq.forUpdate();
        const job = await jq.executeTakeFirst();
        if (job && job.status !== "queued" && job.status !== "assigned") return false;
        if (job) {
          await moveLockedJob(ctx, trx, job, "canceled", {
            cancel_requested: 1,
            finished_at: ctx.now(),
            message: `superseded before it started: ${input.reason}`,
          });
          effects.push(["job-cancel", job.id], ["job-finished", job.id], ["log", job.id]);
        }
      }
      await endRun(ctx, trx, effects, run, "canceled", `superseded: ${input.reason}`);
      return true;
    });
    if (done) superseded.push(id);
  }
  return superseded;
}
