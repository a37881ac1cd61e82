import { sql } from "kysely";
import { leasedJobStatuses } from "@drover/protocol";
import type { Logger } from "pino";
import type { DatabaseHealth } from "./db/health.js";
import { markSilentAgentsLost, pruneOfflineAgents } from "./store/agents.js";
import type { StoreContext } from "./store/context.js";
import { deleteRetiredJobTokens } from "./store/job-moves.js";
import { expireLeases } from "./store/lease-expiry.js";
import { forceOverdueCancels } from "./store/cancels.js";
import { pruneVcsDeliveries } from "./store/vcs-deliveries.js";

const offlineRetentionMs = 24 * 60 * 60 * 1000;

async function countLeasedJobs(ctx: StoreContext): Promise<number> {
  const row = await ctx.db
    .selectFrom("jobs")
    .select((eb) => eb.fn.countAll<number | string>().as("n"))
    .where("status", "in", leasedJobStatuses)
    .executeTakeFirst();
  return Number(row?.n ?? 0);
}

/**
 * Periodically expires job leases and declares silent agents lost. Every server process runs
 * one; each change is conditional, so several sweeping at once do no harm.
 *
 * While the database is unavailable the sweeper does nothing. Leases expire only once the
 * database has been reachable by this process for a whole lease TTL (after the server starts,
 * and again after an outage ends), and agents are declared lost only after an agent TTL: a
 * lease that lapsed while no server could record heartbeats says nothing about the agent, and
 * every healthy agent renews within that time.
 */
export function startSweeper(
  ctx: StoreContext,
  log: Logger,
  intervalMs: number,
  health: DatabaseHealth,
  forceCancelAfterMs: number,
  tokenRetentionMs: number,
): { stop(): Promise<void> } {
  let running: Promise<void> | undefined;
  let stopped = false;
  let announcedGraceOf = -1;
  const sweep = async () => {
    if (health.state !== "available") return;
    try {
      // A round trip every tick, grace or not: on PostgreSQL the tracker measures the gaps
      // between successful round trips (a stall restarts the grace), so an idle server needs one.
      await sql`select 1`.execute(ctx.db);
      // After the round trip: a stall it ended has just moved `since`.
      const upFor = ctx.now() - health.since;
      if (upFor < ctx.settings.leaseTtlMs) {
        if (announcedGraceOf !== health.since) {
          // The wait matters to jobs whose lease was taken before it: at a start with none (the
          // usual start) the line says nothing an operator needs, so it is debug only.
          const atStart = announcedGraceOf === -1;
          announcedGraceOf = health.since;
          const leased = await countLeasedJobs(ctx);
          (atStart && leased === 0 ? log.debug.bind(log) : log.info.bind(log))(
            { graceMs: ctx.settings.leaseTtlMs - upFor, leasedJobs: leased },
            "lease expiry waits one lease TTL for agents to heartbeat (server start or database recovery)",
          );
        }
        return;
      }
      const { requeued, lost } = await expireLeases(ctx);
      if (requeued > 0) log.info({ requeued }, "requeued jobs whose agent never started them");
      if (lost > 0) log.warn({ lost }, "jobs errored: agent lost");
      const forced = await forceOverdueCancels(ctx, forceCancelAfterMs);
      if (forced > 0) log.warn({ forced }, "jobs force-canceled: their agent did not honour the cancel");
      if (upFor >= ctx.settings.agentTtlMs) {
        const silent = await markSilentAgentsLost(ctx);
        if (silent > 0) log.warn({ agents: silent }, "agents declared offline after missing heartbeats");
      }
      await pruneOfflineAgents(ctx, offlineRetentionMs);
      const tokens = await deleteRetiredJobTokens(ctx, tokenRetentionMs, { deadlineMs: intervalMs });
      if (tokens > 0) log.debug({ tokens }, "deleted retired job tokens");
      const deliveries = await pruneVcsDeliveries(ctx);
      if (deliveries > 0) log.debug({ deliveries }, "deleted webhook deliveries past their retention");
    } catch (err) {
      // A database outage is reported once by the health tracker, not on every sweep.
      if (!stopped && health.state === "available") log.error({ err }, "sweep failed");
    }
  };
  const timer = setInterval(() => {
    if (running || stopped) return;
    running = sweep().finally(() => (running = undefined));
  }, intervalMs);
  timer.unref();
  return {
    async stop() {
      stopped = true;
      clearInterval(timer);
      await running;
    },
  };
}
