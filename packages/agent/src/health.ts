import { createServer, type Server } from "node:http";
import type { CacheCounters } from "./providers/cache.js";

/** Bucket bounds (seconds) of request round trips: heartbeats. */
export const requestSecondsBuckets = [0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10];

/** Kinds of agent and controller errors (the `kind` label of drover_*_errors_total): a closed set, so the label stays low-cardinality. */
export type ErrorKind =
  | "register"
  | "poll"
  | "heartbeat"
  | "session_lost"
  | "log_upload"
  | "server"
  | "watch"
  | "job_create"
  | "pod_failure_report"
  | "template_check";

/**
 * The agent's series in Prometheus' text format, written directly: prom-client costs an
 * idle agent ~12 MB for them (docs/decisions/0004-agent-metrics-without-prom-client.md).
 */
export class AgentMetrics {
  static readonly contentType = "text/plain; version=0.0.4; charset=utf-8";
  private running = 0;
  private readonly finished = new Map<string, number>();
  private pollErrorCount = 0;
  private readonly series = new MetricSet()
    .define("drover_agent_log_bytes_shipped_total", "counter", "Log bytes of jobs the server acknowledged")
    .define(
      "drover_agent_heartbeat_duration_seconds",
      "histogram",
      "Round trip of the agent's heartbeats to the server",
      { buckets: requestSecondsBuckets },
    )
    .define("drover_agent_errors_total", "counter", "Errors of this agent by kind (each retried or handled)", {
      initial: false,
    });

  readonly jobsRunning = { set: (n: number) => void (this.running = n) };
  readonly jobsFinished = {
    inc: (labels: { phase: string }) =>
      void this.finished.set(labels.phase, (this.finished.get(labels.phase) ?? 0) + 1),
  };
  readonly pollErrors = { inc: () => void this.pollErrorCount++ };
  /** Counts `n` log bytes the server acknowledged. */
  readonly logBytesShipped = (n: number): void => this.series.add("drover_agent_log_bytes_shipped_total", n);
  /** Records one heartbeat's round trip. */
  readonly heartbeatSeconds = (seconds: number): void =>
    this.series.observe("drover_agent_heartbeat_duration_seconds", seconds);
  /** Counts one error of `kind`. */
  readonly error = (kind: ErrorKind): void => this.series.inc("drover_agent_errors_total", { kind });

  /** Exposes a cache's counters as drover_agent_cache_* series with `cache="<name>"`. */
  addCache(name: string, counters: CacheCounters): void {
    this.series.addCache(name, counters);
  }

  /** The exposition `/metrics` serves. */
  render(): string {
    const finished = [...this.finished]
      .map(([phase, n]) => `drover_agent_jobs_finished_total{phase="${phase}"} ${n}\n`)
      .join("");
    return (
      "# HELP drover_agent_jobs_running Jobs running on this agent\n# TYPE drover_agent_jobs_running gauge\n" +
      `drover_agent_jobs_running ${this.running}\n` +
      "# HELP drover_agent_jobs_finished_total Jobs this agent finished\n# TYPE drover_agent_jobs_finished_total counter\n" +
      finished +
      "# HELP drover_agent_poll_errors_total Failed long-polls\n# TYPE drover_agent_poll_errors_total counter\n" +
      `drover_agent_poll_errors_total ${this.pollErrorCount}\n` +
      this.series.render()
    );
  }
}

/** The drover_agent_cache_* series of some caches, by name (empty without caches). */
function renderCacheSeries(caches: Map<string, CacheCounters>): string {
  if (caches.size === 0) return "";
  const series = (name: string, type: string, help: string, pick: (c: CacheCounters) => number): string =>
    `# HELP ${name} ${help}\n# TYPE ${name} ${type}\n` +
    [...caches].map(([cache, c]) => `${name}{cache="${cache}"} ${pick(c)}\n`).join("");
  return (
    series("drover_agent_cache_hits_total", "counter", "Cache entries used without a download", (c) => c.hits) +
    series("drover_agent_cache_misses_total", "counter", "Cache entries downloaded", (c) => c.misses) +
    series(
      "drover_agent_cache_evictions_total",
      "counter",
      "Cache entries evicted under the size limit",
      (c) => c.evictions,
    ) +
    series("drover_agent_cache_bytes", "gauge", "Bytes the cache holds", (c) => c.bytes)
  );
}

/** What a long-running drover process says about itself on its health port. */
export interface HealthReport {
  /**
   * False only when the process cannot do its work any more (stopped, fatal). An unreachable
   * Drover server or API server is not that: restarting would not help, so liveness holds.
   */
  live: boolean;
  /** Registered (where the process registers) and its watches synced: it can take work. */
  ready: boolean;
  /** Extra fields of the /healthz and /readyz bodies. */
  details?: Record<string, unknown>;
}

/** The process behind a health server: its state and its metrics exposition. */
export interface HealthSource {
  health(): HealthReport;
  metrics(): string;
}

/**
 * `/healthz` (liveness), `/readyz` (readiness) and `/metrics` on `port`, for every
 * long-running drover process (agent, controller, pod worker, node worker). Without an
 * `address` it listens on every interface of both families (`::` with IPv4-mapped
 * addresses, or 0.0.0.0 where the kernel has no IPv6): the kubelet probes the pod's IP,
 * which is an IPv6 address on single-stack IPv6 clusters.
 */
export async function startHealthServer(port: number, source: HealthSource, address?: string): Promise<Server> {
  const server = createServer((req, res) => {
    const path = (req.url ?? "").split("?")[0];
    if (path === "/healthz" || path === "/readyz") {
      const h = source.health();
      const ok = path === "/healthz" ? h.live : h.ready;
      const status = path === "/healthz" ? (h.live ? "ok" : "down") : h.ready ? "ready" : "not ready";
      res.writeHead(ok ? 200 : 503, { "content-type": "application/json" });
      res.end(
        JSON.stringify({ status, live: h.live, ready: h.ready, currentTime: new Date().toISOString(), ...h.details }),
      );
    } else if (path === "/metrics") {
      res.writeHead(200, { "content-type": AgentMetrics.contentType });
      res.end(source.metrics());
    } else {
      res.writeHead(404).end();
    }
  });
  await new Promise<void>((resolve, reject) => {
    server.once("error", reject);
    const listening = () => {
      server.off("error", reject);
      resolve();
    };
    if (address === undefined) server.listen(port, listening);
    else server.listen(port, address, listening);
  });
  return server;
}

/** Closes a health server; resolves once it has stopped listening. */
export function closeHealthServer(server: Server | undefined): Promise<void> {
  if (!server) return Promise.resolve();
  server.closeAllConnections();
  return new Promise((resolve) => server.close(() => resolve()));
}

/**
 * Runs `work` with the health server of `source` on `port` (none when `port` is 0) and
 * `address` (see startHealthServer), closing it once `work` settles; resolves or rejects as `work` does.
 */
export async function servingHealth<T>(
  port: number,
  address: string | undefined,
  source: HealthSource,
  work: () => Promise<T>,
): Promise<T> {
  const server = port > 0 ? await startHealthServer(port, source, address) : undefined;
  try {
    return await work();
  } finally {
    await closeHealthServer(server);
  }
}

type Series =
  | { help: string; type: "gauge" | "counter"; values: Map<string, number> }
  | {
      help: string;
      type: "histogram";
      buckets: number[];
      values: Map<string, { counts: number[]; sum: number; count: number }>;
    };

/** Gauges, counters and histograms in Prometheus' text format, for processes with a handful of series. */
export class MetricSet {
  private readonly series = new Map<string, Series>();
  private readonly caches = new Map<string, CacheCounters>();

  /** Exposes a cache's counters as drover_agent_cache_* series with `cache="<name>"`. */
  addCache(name: string, counters: CacheCounters): this {
    this.caches.set(name, counters);
    return this;
  }

  /**
   * Declares a series. A gauge's or counter's unlabelled value starts at 0 so scrapers see it
   * at once (`initial: false` for series that only exist with labels); a histogram needs `buckets`.
   */
  define(
    name: string,
    type: "gauge" | "counter" | "histogram",
    help: string,
    options: { initial?: boolean; buckets?: number[] } = {},
  ): this {
    if (type === "histogram") {
      if (!options.buckets?.length) throw new Error(`histogram ${name} needs buckets`);
      this.series.set(name, { help, type, buckets: [...options.buckets].sort((a, b) => a - b), values: new Map() });
    } else {
      this.series.set(name, { help, type, values: new Map(options.initial === false ? [] : [["", 0]]) });
    }
    return this;
  }

  set(name: string, value: number, labels: Record<string, string> = {}): void {
    this.scalar(name).values.set(labelText(labels), value);
  }

  inc(name: string, labels: Record<string, string> = {}): void {
    this.add(name, 1, labels);
  }

  /** Adds `n` to a counter. */
  add(name: string, n: number, labels: Record<string, string> = {}): void {
    const e = this.scalar(name);
    const key = labelText(labels);
    e.values.set(key, (e.values.get(key) ?? 0) + n);
  }

  /** Records one value in a histogram. */
  observe(name: string, value: number, labels: Record<string, string> = {}): void {
    const e = this.series.get(name);
    if (e?.type !== "histogram") throw new Error(`histogram ${name} is not defined`);
    const key = JSON.stringify(labels);
    let h = e.values.get(key);
    if (!h) e.values.set(key, (h = { counts: e.buckets.map(() => 0), sum: 0, count: 0 }));
    e.buckets.forEach((le, i) => {
      if (value <= le) h.counts[i]!++;
    });
    h.sum += value;
    h.count++;
  }

  render(): string {
    let out = "";
    for (const [name, s] of this.series) {
      out += `# HELP ${name} ${s.help}\n# TYPE ${name} ${s.type}\n`;
      if (s.type !== "histogram") {
        for (const [labels, v] of s.values) out += `${name}${labels} ${v}\n`;
        continue;
      }
      for (const [key, h] of s.values) {
        const labels = JSON.parse(key) as Record<string, string>;
        s.buckets.forEach(
          (le, i) => (out += `${name}_bucket${labelText({ ...labels, le: String(le) })} ${h.counts[i]}\n`),
        );
        out += `${name}_bucket${labelText({ ...labels, le: "+Inf" })} ${h.count}\n${name}_sum${labelText(labels)} ${h.sum}\n${name}_count${labelText(labels)} ${h.count}\n`;
      }
    }
    return out + renderCacheSeries(this.caches);
  }

  private scalar(name: string) {
    const e = this.series.get(name);
    if (!e || e.type === "histogram") throw new Error(`metric ${name} is not defined as a gauge or counter`);
    return e;
  }
}
function labelText(labels: Record<string, string>): string {
  const parts = Object.entries(labels).map(
    ([k, v]) => `${k}="${v.replace(/["\\\n]/g, (c) => (c === "\n" ? "\\n" : `\\${c}`))}"`,
  );
  return parts.length ? `{${parts.join(",")}}` : "";
}
