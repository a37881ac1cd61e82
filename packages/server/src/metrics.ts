import type { PoolDemand } from "@drover/protocol";
import { Counter, Gauge, Histogram, Registry } from "prom-client";
import type { StoreContext } from "./store/context.js";
import { allPoolDemands } from "./store/demand.js";

/** Prometheus metrics of one server process (its own registry, so tests can run several). */
export interface ServerMetrics {
  /** Every series, pools by name. */
  registry: Registry;
  /** The same series, pools by id: what `/metrics` shows a caller without a token. */
  anonymousRegistry: Registry;
  httpDuration: Histogram<"method" | "route" | "status">;
  /** Queued → claimed by an agent, per phase. */
  queueWait: Histogram<"phase">;
  /** Started → finished on the agent, per phase and outcome. */
  jobDuration: Histogram<"phase" | "outcome">;
  /** Log bytes stored from agents (a resent byte counts once), per phase. */
  logBytes: Counter<"phase">;
}

/** How the database-derived gauges are computed (tests inject the clock). */
export interface MetricsOptions {
  /** The gauges are recomputed at most this often, however often `/metrics` is scraped; 0: every scrape. */
  cacheMs: number;
  now?: () => number;
}

/** The counts behind every database-derived gauge, read together. */
interface Aggregates {
  queueDepth: PoolCount[];
  pendingRuns: PoolCount[];
  agents: Record<"idle" | "busy" | "offline", number>;
  runs: { status: string; n: number }[];
  demand: PoolDemand[];
}

interface PoolCount {
  pool: { id: string; name: string };
  n: number;
}

/** The statements behind the gauges: each a scan of its table, hence cached (review N12). */
async function readAggregates(ctx: StoreContext): Promise<Aggregates> {
  const queued = await ctx.db
    .selectFrom("pools")
    .leftJoin("jobs", (j) => j.onRef("jobs.pool_id", "=", "pools.id").on("jobs.status", "=", "queued"))
    .select(["pools.id", "pools.name", (eb) => eb.fn.count<number>("jobs.id").as("n")])
    .groupBy(["pools.id", "pools.name"])
    .execute();
  const pending = await ctx.db
    .selectFrom("pools")
    .leftJoin("workspaces", "workspaces.pool_id", "pools.id")
    .leftJoin("runs", (j) => j.onRef("runs.workspace_id", "=", "workspaces.id").on("runs.status", "=", "pending"))
    .select(["pools.id", "pools.name", (eb) => eb.fn.count<number>("runs.id").as("n")])
    .groupBy(["pools.id", "pools.name"])
    .execute();
  const agentRows = await ctx.db.selectFrom("agents").select(["state", "running_jobs"]).execute();
  const agents = { idle: 0, busy: 0, offline: 0 };
  for (const r of agentRows) agents[r.state !== "online" ? "offline" : r.running_jobs > 0 ? "busy" : "idle"]++;
  const runs = await ctx.db
    .selectFrom("runs")
    .select(["status", (eb) => eb.fn.countAll<number>().as("n")])
    .groupBy("status")
    .execute();
  const byPool = (rows: { id: string; name: string; n: number | string | bigint }[]) =>
    rows.map((r) => ({ pool: { id: r.id, name: r.name }, n: Number(r.n) }));
  return {
    queueDepth: byPool(queued),
    pendingRuns: byPool(pending),
    agents,
    runs: runs.map((r) => ({ status: r.status, n: Number(r.n) })),
    demand: await allPoolDemands(ctx),
  };
}

/** `load`'s answer, shared by every caller for `periodMs` after it started (a failed one is not kept). */
function cachedFor<T>(load: () => Promise<T>, periodMs: number, now: () => number): () => Promise<T> {
  let cached: { at: number; value: Promise<T> } | undefined;
  return () => {
    if (cached === undefined || now() - cached.at >= periodMs) {
      const value = load();
      const entry = { at: now(), value };
      cached = entry;
      value.catch(() => {
        if (cached === entry) cached = undefined;
      });
    }
    return cached.value;
  };
}

/**
 * The server's series in two registries that differ only in the `pool` label of the pool
 * gauges: `registry` names pools (OTLP export, `/metrics` with a user token or with
 * DROVER_METRICS_PUBLIC_NAMES); `anonymousRegistry` gives their ids, so a scrape without a
 * token does not list the pools. Both read one cached set of aggregates.
 */
export function createMetrics(ctx: StoreContext, options: MetricsOptions = { cacheMs: 5_000 }): ServerMetrics {
  const registry = new Registry();
  const anonymousRegistry = new Registry();
  const both = [registry, anonymousRegistry];
  const aggregates = cachedFor(() => readAggregates(ctx), options.cacheMs, options.now ?? Date.now);
  const httpDuration = new Histogram({
    name: "drover_http_request_duration_seconds",
    help: "HTTP request latency by route (long-polls included)",
    labelNames: ["method", "route", "status"] as const,
    buckets: [0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 5, 30, 60],
    registers: both,
  });
  const poolGauges = (name: string, help: string, values: (a: Aggregates) => PoolCount[]) => {
    for (const [target, label] of [
      [registry, "name"],
      [anonymousRegistry, "id"],
    ] as const) {
      new Gauge({
        name,
        help,
        labelNames: ["pool"] as const,
        registers: [target],
        async collect() {
          const rows = values(await aggregates());
          this.reset();
          for (const r of rows) this.set({ pool: r.pool[label] }, r.n);
        },
      });
    }
  };
  poolGauges("drover_queue_depth", "Jobs queued and waiting for an agent, per pool", (a) => a.queueDepth);
  poolGauges(
    "drover_pending_runs",
    "Runs waiting behind another run of their workspace, per pool",
    (a) => a.pendingRuns,
  );
  new Gauge({
    name: "drover_agents",
    help: "Registered agents by status",
    labelNames: ["status"] as const,
    registers: both,
    async collect() {
      const { agents } = await aggregates();
      this.reset();
      for (const [status, n] of Object.entries(agents)) this.set({ status }, n);
    },
  });
  new Gauge({
    name: "drover_runs",
    help: "Runs by state",
    labelNames: ["state"] as const,
    registers: both,
    async collect() {
      const { runs } = await aggregates();
      this.reset();
      for (const r of runs) this.set({ state: r.status }, r.n);
    },
  });
  // Demand signals for autoscalers.
  const demand = {
    drover_pool_jobs_pending: [
      "Jobs that need an agent and have not started (queued + claimed-not-started), per pool",
      (d: PoolDemand) => d.pending,
    ],
    drover_pool_jobs_running: ["Jobs executing on an agent, per pool", (d: PoolDemand) => d.running],
    drover_pool_runs_awaiting_confirmation: [
      "Runs with a plan waiting for confirmation (need no agent), per pool",
      (d: PoolDemand) => d.awaitingConfirmation,
    ],
    drover_pool_desired_agents: [
      "Agents needed for the pending and running jobs, per pool (at the largest online agent's concurrency, else 1)",
      (d: PoolDemand) => d.desiredAgents,
    ],
  } as const;
  for (const [name, [help, value]] of Object.entries(demand)) {
    poolGauges(name, help, (a) => a.demand.map((d) => ({ pool: d.pool, n: value(d) })));
  }
  const queueWait = new Histogram({
    name: "drover_job_queue_wait_seconds",
    help: "Time from a job being queued to an agent claiming it, per phase",
    labelNames: ["phase"] as const,
    buckets: [0.005, 0.02, 0.1, 0.5, 1, 5, 15, 60, 300, 1800],
    registers: both,
  });
  const jobDuration = new Histogram({
    name: "drover_job_duration_seconds",
    help: "Time from an agent starting a job to its finish, per phase and outcome",
    labelNames: ["phase", "outcome"] as const,
    buckets: [1, 5, 15, 30, 60, 120, 300, 900, 1800, 3600, 14_400],
    registers: both,
  });
  const logBytes = new Counter({
    name: "drover_log_bytes_received_total",
    help: "Log bytes received from agents and stored (a resent byte counts once), per phase",
    labelNames: ["phase"] as const,
    registers: both,
  });
  return { registry, anonymousRegistry, httpDuration, queueWait, jobDuration, logBytes };
}
