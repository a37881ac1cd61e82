import type { PoolDemand } from "@drover/protocol";
import { Counter, Gauge, Histogram, Registry } from "prom-client";
import type { StoreContext } from "./store/context.js";
import { allPoolDemands } from "./store/demand.js";

/** Prometheus metrics of one server process (its own registry, so tests can run several). */
export interface ServerMetrics {
  registry: Registry;
  httpDuration: Histogram<"method" | "route" | "status">;
  /** Queued → claimed by an agent, per phase. */
  queueWait: Histogram<"phase">;
  /** Started → finished on the agent, per phase and outcome. */
  jobDuration: Histogram<"phase" | "outcome">;
  /** Log bytes stored from agents (a resent byte counts once), per phase. */
  logBytes: Counter<"phase">;
}

export function createMetrics(ctx: StoreContext): ServerMetrics {
  const registry = new Registry();
  const httpDuration = new Histogram({
    name: "drover_http_request_duration_seconds",
    help: "HTTP request latency by route (long-polls included)",
    labelNames: ["method", "route", "status"] as const,
    buckets: [0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 5, 30, 60],
    registers: [registry],
  });
  new Gauge({
    name: "drover_queue_depth",
    help: "Jobs queued and waiting for an agent, per pool",
    labelNames: ["pool"] as const,
    registers: [registry],
    async collect() {
      this.reset();
      const rows = await ctx.db
        .selectFrom("pools")
        .leftJoin("jobs", (j) => j.onRef("jobs.pool_id", "=", "pools.id").on("jobs.status", "=", "queued"))
        .select(["pools.name", (eb) => eb.fn.count<number>("jobs.id").as("n")])
        .groupBy("pools.name")
        .execute();
      for (const r of rows) this.set({ pool: r.name }, Number(r.n));
    },
  });
  new Gauge({
    name: "drover_pending_runs",
    help: "Runs waiting behind another run of their workspace, per pool",
    labelNames: ["pool"] as const,
    registers: [registry],
    async collect() {
      this.reset();
      const rows = await ctx.db
        .selectFrom("pools")
        .leftJoin("workspaces", "workspaces.pool_id", "pools.id")
        .leftJoin("runs", (j) => j.onRef("runs.workspace_id", "=", "workspaces.id").on("runs.status", "=", "pending"))
        .select(["pools.name", (eb) => eb.fn.count<number>("runs.id").as("n")])
        .groupBy("pools.name")
        .execute();
      for (const r of rows) this.set({ pool: r.name }, Number(r.n));
    },
  });
  new Gauge({
    name: "drover_agents",
    help: "Registered agents by status",
    labelNames: ["status"] as const,
    registers: [registry],
    async collect() {
      this.reset();
      const rows = await ctx.db.selectFrom("agents").select(["state", "running_jobs"]).execute();
      const counts = { idle: 0, busy: 0, offline: 0 };
      for (const r of rows) counts[r.state !== "online" ? "offline" : r.running_jobs > 0 ? "busy" : "idle"]++;
      for (const [status, n] of Object.entries(counts)) this.set({ status }, n);
    },
  });
  new Gauge({
    name: "drover_runs",
    help: "Runs by state",
    labelNames: ["state"] as const,
    registers: [registry],
    async collect() {
      this.reset();
      const rows = await ctx.db.selectFrom("runs").select(["status", (eb) => eb.fn.countAll<number>().as("n")]).groupBy("status").execute();
      for (const r of rows) this.set({ state: r.status }, Number(r.n));
    },
  });
  // Demand signals for autoscalers, one collection for all four series per scrape.
  const demand = {
    drover_pool_jobs_pending: ["Jobs that need an agent and have not started (queued + claimed-not-started), per pool", (d: PoolDemand) => d.pending],
    drover_pool_jobs_running: ["Jobs executing on an agent, per pool", (d: PoolDemand) => d.running],
    drover_pool_runs_awaiting_confirmation: ["Runs with a plan waiting for confirmation (need no agent), per pool", (d: PoolDemand) => d.awaitingConfirmation],
    drover_pool_desired_agents: ["Agents needed for the pending and running jobs, per pool (at the largest online agent's concurrency, else 1)", (d: PoolDemand) => d.desiredAgents],
  } as const;
  let scrape: Promise<PoolDemand[]> | undefined;
  for (const [name, [help, value]] of Object.entries(demand)) {
    new Gauge({
      name,
      help,
      labelNames: ["pool"] as const,
      registers: [registry],
      async collect() {
        // The first gauge of a scrape queries; the other three reuse its answer.
        scrape ??= allPoolDemands(ctx).finally(() => (scrape = undefined));
        const demands = await scrape;
        this.reset();
        for (const d of demands) this.set({ pool: d.pool.name }, value(d));
      },
    });
  }
  const queueWait = new Histogram({
    name: "drover_job_queue_wait_seconds",
    help: "Time from a job being queued to an agent claiming it, per phase",
    labelNames: ["phase"] as const,
    buckets: [0.005, 0.02, 0.1, 0.5, 1, 5, 15, 60, 300, 1800],
    registers: [registry],
  });
  const jobDuration = new Histogram({
    name: "drover_job_duration_seconds",
    help: "Time from an agent starting a job to its finish, per phase and outcome",
    labelNames: ["phase", "outcome"] as const,
    buckets: [1, 5, 15, 30, 60, 120, 300, 900, 1800, 3600, 14_400],
    registers: [registry],
  });
  const logBytes = new Counter({
    name: "drover_log_bytes_received_total",
    help: "Log bytes received from agents and stored (a resent byte counts once), per phase",
    labelNames: ["phase"] as const,
    registers: [registry],
  });
  return { registry, httpDuration, queueWait, jobDuration, logBytes };
}
