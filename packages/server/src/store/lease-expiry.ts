import { leasedJobStatuses } from "@drover/protocol";
import type { StoreContext } from "./context.js";
import { moveJob } from "./job-moves.js";
import { appendAtEnd } from "./logs.js";
import { applyJobOutcome } from "./runs.js";
import { inTransaction } from "./transaction.js";

/* The sweep of expired leases: the jobs whose agent stopped renewing them. */

/**
 * Handles expired leases: an assigned job never started is requeued (its attempt is fenced
 * off); a started one ends errored, "agent lost", releasing its workspace and state lock.
 * Safe to run in every server process at once: each change is conditional on the row as read.
 */
export async function expireLeases(ctx: StoreContext): Promise<{ requeued: number; lost: number }> {
  const now = ctx.now();
  const expired = await ctx.db
    .selectFrom("jobs")
    .selectAll()
    .where("status", "in", leasedJobStatuses)
    .where("lease_expires_at", "<", now)
    .limit(500)
    .execute();
  let requeued = 0;
  let lost = 0;
  for (const job of expired) {
    // Counted from what the committed transaction returns: a retried one must not count twice.
    const outcome = await inTransaction(ctx, async (trx, effects): Promise<"requeued" | "lost" | "kept"> => {
      // Read again in the transaction (and held, on PostgreSQL): a heartbeat may have renewed
      // the lease since the list was read, and a job whose lease holds is not lost.
      let again = trx
        .selectFrom("jobs")
        .select("lease_expires_at")
        .where("id", "=", job.id)
        .where("status", "=", job.status)
        .where("attempt", "=", job.attempt);
      if (ctx.dialect === "postgres") again = again.forUpdate();
      const lease = (await again.executeTakeFirst())?.lease_expires_at;
      if (lease === undefined || lease === null || lease >= now) return "kept";
      if (job.status === "assigned") {
        if (!(await moveJob(ctx, trx, job, "queued", { agent_id: null }))) return "kept";
        effects.push(["job-queued", job.pool_id]);
        return "requeued";
      }
      const agent = job.agent_id
        ? await trx.selectFrom("agents").select("name").where("id", "=", job.agent_id).executeTakeFirst()
        : undefined;
      const reason = `agent lost: no heartbeat from agent ${agent?.name ?? job.agent_id ?? "?"} for ${ctx.settings.leaseTtlMs / 1000} s`;
      if (!(await moveJob(ctx, trx, job, "errored", { message: reason, finished_at: now }))) return "kept";
      await appendAtEnd(trx, job.id, Buffer.from(`\n[drover] ${reason}; the run is errored\n`, "utf8"));
      effects.push(["job-finished", job.id], ["log", job.id]);
      await applyJobOutcome(ctx, trx, effects, job, "errored", reason);
      return "lost";
    });
    if (outcome === "requeued") requeued++;
    if (outcome === "lost") lost++;
  }
  return { requeued, lost };
}
