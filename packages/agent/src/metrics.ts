import { Counter, Gauge, Histogram, Registry } from "prom-client";
import type { CacheCounters } from "./cache/store.js";

/*
 * Every drover process keeps its series in a prom-client registry: /metrics serves it and the
 * OTLP export (packages/runtime/src/telemetry.ts) reads it, so both always say the same thing.
 */

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

/** How a series is declared: its label names, a histogram's buckets, or a gauge read at each scrape. */
interface SeriesOptions {
  /** Label names; a series with labels shows no sample until one is recorded. */
  labels?: string[];
  /** A histogram's bucket bounds. */
  buckets?: number[];
  /** A gauge's value, read at each scrape and export. */
  read?: () => number;
}

type Series = Counter<string> | Gauge<string> | Histogram<string>;

/** A process's gauges, counters and histograms by name, in one prom-client registry. */
export class MetricSet {
  /** What /metrics serves and the OTLP export reads. */
  readonly registry = new Registry();
  private readonly series = new Map<string, Series>();
  private readonly caches = new Map<string, CacheCounters>();

  /** Declares a series; an unlabelled gauge or counter shows 0 until it is recorded. */
  define(name: string, type: "gauge" | "counter" | "histogram", help: string, options: SeriesOptions = {}): this {
    const common = { name, help, labelNames: options.labels ?? [], registers: [this.registry] };
    if (type === "histogram") {
      if (!options.buckets?.length) throw new Error(`histogram ${name} needs buckets`);
      this.series.set(name, new Histogram({ ...common, buckets: options.buckets }));
    } else if (type === "counter") {
      this.series.set(name, new Counter(common));
    } else {
      const read = options.read;
      this.series.set(
        name,
        new Gauge({
          ...common,
          ...(read
            ? {
                collect(this: Gauge) {
                  this.set(read());
                },
              }
            : {}),
        }),
      );
    }
    return this;
  }

  /** Sets a gauge. */
  set(name: string, value: number, labels: Record<string, string> = {}): void {
    this.of(name, Gauge).set(labels, value);
  }

  /** Adds 1 to a counter. */
  inc(name: string, labels: Record<string, string> = {}): void {
    this.add(name, 1, labels);
  }

  /** Adds `n` to a counter. */
  add(name: string, n: number, labels: Record<string, string> = {}): void {
    this.of(name, Counter).inc(labels, n);
  }

  /** Records one value in a histogram. */
  observe(name: string, value: number, labels: Record<string, string> = {}): void {
    this.of(name, Histogram).observe(labels, value);
  }

  /** Exposes a cache's live counters as drover_agent_cache_* series with `cache="<name>"`. */
  addCache(name: string, counters: CacheCounters): this {
    if (this.caches.size === 0) this.defineCacheSeries();
    this.caches.set(name, counters);
    return this;
  }

  /** The exposition /metrics serves. */
  render(): Promise<string> {
    return this.registry.metrics();
  }

  private of<T extends Series>(name: string, kind: abstract new (...args: never[]) => T): T {
    const s = this.series.get(name);
    if (!(s instanceof kind)) throw new Error(`metric ${name} is not defined as a ${kind.name.toLowerCase()}`);
    return s;
  }

  /** The cache series read the caches' own counters at each scrape: the caches keep counting without us. */
  private defineCacheSeries(): void {
    const caches = this.caches;
    const series = (
      name: string,
      Kind: typeof Counter | typeof Gauge,
      help: string,
      pick: (c: CacheCounters) => number,
    ) =>
      new Kind({
        name,
        help,
        labelNames: ["cache"],
        registers: [this.registry],
        collect(this: Counter<"cache"> | Gauge<"cache">) {
          this.reset();
          for (const [cache, c] of caches) {
            if (this instanceof Gauge) this.set({ cache }, pick(c));
            else this.inc({ cache }, pick(c));
          }
        },
      });
    series("drover_agent_cache_hits_total", Counter, "Cache entries used without a download", (c) => c.hits);
    series("drover_agent_cache_misses_total", Counter, "Cache entries downloaded", (c) => c.misses);
    series(
      "drover_agent_cache_evictions_total",
      Counter,
      "Cache entries evicted under the size limit",
      (c) => c.evictions,
    );
    series("drover_agent_cache_bytes", Gauge, "Bytes the cache holds", (c) => c.bytes);
  }
}

/** The local/docker agent's series. */
export class AgentMetrics {
  private running = 0;
  private readonly set = new MetricSet()
    .define("drover_agent_jobs_running", "gauge", "Jobs running on this agent", { read: () => this.running })
    .define("drover_agent_jobs_finished_total", "counter", "Jobs this agent finished", { labels: ["phase"] })
    .define("drover_agent_poll_errors_total", "counter", "Failed long-polls")
    .define("drover_agent_log_bytes_shipped_total", "counter", "Log bytes of jobs the server acknowledged")
    .define(
      "drover_agent_heartbeat_duration_seconds",
      "histogram",
      "Round trip of the agent's heartbeats to the server",
      { buckets: requestSecondsBuckets },
    )
    .define("drover_agent_errors_total", "counter", "Errors of this agent by kind (each retried or handled)", {
      labels: ["kind"],
    });

  /** What /metrics serves and the OTLP export reads. */
  readonly registry = this.set.registry;
  readonly jobsRunning = { set: (n: number) => void (this.running = n) };
  readonly jobsFinished = {
    inc: (labels: { phase: string }) => this.set.inc("drover_agent_jobs_finished_total", labels),
  };
  readonly pollErrors = { inc: () => this.set.inc("drover_agent_poll_errors_total") };
  /** Counts `n` log bytes the server acknowledged. */
  readonly logBytesShipped = (n: number): void => this.set.add("drover_agent_log_bytes_shipped_total", n);
  /** Records one heartbeat's round trip. */
  readonly heartbeatSeconds = (seconds: number): void =>
    this.set.observe("drover_agent_heartbeat_duration_seconds", seconds);
  /** Counts one error of `kind`. */
  readonly error = (kind: ErrorKind): void => this.set.inc("drover_agent_errors_total", { kind });

  /** Exposes a cache's counters as drover_agent_cache_* series with `cache="<name>"`. */
  addCache(name: string, counters: CacheCounters): void {
    this.set.addCache(name, counters);
  }

  /** The exposition `/metrics` serves. */
  render(): Promise<string> {
    return this.set.render();
  }
}
