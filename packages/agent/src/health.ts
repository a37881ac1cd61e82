import { createServer, type Server } from "node:http";
import type { CacheCounters } from "./providers/cache.js";

/**
 * The agent's three series in Prometheus' text format, written directly: prom-client costs an
 * idle agent ~12 MB for them (docs/decisions/0004-agent-metrics-without-prom-client.md).
 */
export class AgentMetrics {
  static readonly contentType = "text/plain; version=0.0.4; charset=utf-8";
  private running = 0;
  private readonly finished = new Map<string, number>();
  private pollErrorCount = 0;

  readonly jobsRunning = { set: (n: number) => void (this.running = n) };
  readonly jobsFinished = { inc: (labels: { phase: string }) => void this.finished.set(labels.phase, (this.finished.get(labels.phase) ?? 0) + 1) };
  readonly pollErrors = { inc: () => void this.pollErrorCount++ };
  private readonly caches = new Map<string, CacheCounters>();

  /** Exposes a cache's counters as drover_agent_cache_* series with `cache="<name>"`. */
  addCache(name: string, counters: CacheCounters): void {
    this.caches.set(name, counters);
  }

  /** The exposition `/metrics` serves. */
  render(): string {
    const finished = [...this.finished].map(([phase, n]) => `drover_agent_jobs_finished_total{phase="${phase}"} ${n}\n`).join("");
    return (
      "# HELP drover_agent_jobs_running Jobs running on this agent\n# TYPE drover_agent_jobs_running gauge\n" +
      `drover_agent_jobs_running ${this.running}\n` +
      "# HELP drover_agent_jobs_finished_total Jobs this agent finished\n# TYPE drover_agent_jobs_finished_total counter\n" +
      finished +
      "# HELP drover_agent_poll_errors_total Failed long-polls\n# TYPE drover_agent_poll_errors_total counter\n" +
      `drover_agent_poll_errors_total ${this.pollErrorCount}\n` +
      this.renderCaches()
    );
  }

  private renderCaches(): string {
    if (this.caches.size === 0) return "";
    const series = (name: string, type: string, help: string, pick: (c: CacheCounters) => number): string =>
      `# HELP ${name} ${help}\n# TYPE ${name} ${type}\n` + [...this.caches].map(([cache, c]) => `${name}{cache="${cache}"} ${pick(c)}\n`).join("");
    return (
      series("drover_agent_cache_hits_total", "counter", "Cache entries used without a download", (c) => c.hits) +
      series("drover_agent_cache_misses_total", "counter", "Cache entries downloaded", (c) => c.misses) +
      series("drover_agent_cache_evictions_total", "counter", "Cache entries evicted under the size limit", (c) => c.evictions) +
      series("drover_agent_cache_bytes", "gauge", "Bytes the cache holds", (c) => c.bytes)
    );
  }
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
 * long-running drover process (agent, controller, pod worker, node worker).
 */
export async function startHealthServer(port: number, source: HealthSource): Promise<Server> {
  const server = createServer((req, res) => {
    const path = (req.url ?? "").split("?")[0];
    if (path === "/healthz" || path === "/readyz") {
      const h = source.health();
      const ok = path === "/healthz" ? h.live : h.ready;
      const status = path === "/healthz" ? (h.live ? "ok" : "down") : h.ready ? "ready" : "not ready";
      res.writeHead(ok ? 200 : 503, { "content-type": "application/json" });
      res.end(JSON.stringify({ status, live: h.live, ready: h.ready, currentTime: new Date().toISOString(), ...h.details }));
    } else if (path === "/metrics") {
      res.writeHead(200, { "content-type": AgentMetrics.contentType });
      res.end(source.metrics());
    } else {
      res.writeHead(404).end();
    }
  });
  await new Promise<void>((resolve, reject) => {
    server.once("error", reject);
    server.listen(port, "0.0.0.0", () => {
      server.off("error", reject);
      resolve();
    });
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
 * Runs `work` with the health server of `source` on `port` (none when `port` is 0), closing it
 * once `work` settles; resolves or rejects as `work` does.
 */
export async function servingHealth<T>(port: number, source: HealthSource, work: () => Promise<T>): Promise<T> {
  const server = port > 0 ? await startHealthServer(port, source) : undefined;
  try {
    return await work();
  } finally {
    await closeHealthServer(server);
  }
}

/** Gauges and counters in Prometheus' text format, for processes with a handful of series. */
export class MetricSet {
  private readonly series = new Map<string, { help: string; type: "gauge" | "counter"; values: Map<string, number> }>();

  /** Declares a series; its unlabelled value starts at 0 so scrapers see it at once. */
  define(name: string, type: "gauge" | "counter", help: string, initial = true): this {
    this.series.set(name, { help, type, values: new Map(initial ? [["", 0]] : []) });
    return this;
  }

  set(name: string, value: number, labels: Record<string, string> = {}): void {
    this.entry(name).values.set(labelText(labels), value);
  }

  inc(name: string, labels: Record<string, string> = {}): void {
    const e = this.entry(name);
    const key = labelText(labels);
    e.values.set(key, (e.values.get(key) ?? 0) + 1);
  }

  render(): string {
    let out = "";
    for (const [name, s] of this.series) {
      out += `# HELP ${name} ${s.help}\n# TYPE ${name} ${s.type}\n`;
      for (const [labels, v] of s.values) out += `${name}${labels} ${v}\n`;
    }
    return out;
  }

  private entry(name: string) {
    const e = this.series.get(name);
    if (!e) throw new Error(`metric ${name} is not defined`);
    return e;
  }
}

function labelText(labels: Record<string, string>): string {
  const parts = Object.entries(labels).map(([k, v]) => `${k}="${v.replace(/["\\\n]/g, (c) => (c === "\n" ? "\\n" : `\\${c}`))}"`);
  return parts.length ? `{${parts.join(",")}}` : "";
}
