import type { Logger } from "pino";
import { markSilentAgentsLost, pruneOfflineAgents } from "./store/agents.js";
import type { StoreContext } from "./store/context.js";
import { expireLeases } from "./store/queue.js";

const offlineRetentionMs = 24 * 60 * 60 * 1000;

/**
 * Periodically expires job leases and declares silent agents lost. Every server process runs
 * one; each change is conditional, so several sweeping at once do no harm.
 */
export function startSweeper(ctx: StoreContext, log: Logger, intervalMs: number): { stop(): Promise<void> } {
  let running: Promise<void> | undefined;
  let stopped = false;
  const sweep = async () => {
    try {
      const { requeued, lost } = await expireLeases(ctx);
      if (requeued > 0) log.info({ requeued }, "requeued jobs whose agent never started them");
      if (lost > 0) log.warn({ lost }, "jobs errored: agent lost");
      const silent = await markSilentAgentsLost(ctx);
      if (silent > 0) log.warn({ agents: silent }, "agents declared offline after missing heartbeats");
      await pruneOfflineAgents(ctx, offlineRetentionMs);
    } catch (err) {
      if (!stopped) log.error({ err }, "sweep failed");
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
