import {
  ROOT_CONTEXT,
  SpanStatusCode,
  trace,
  TraceFlags,
  ValueType,
  type Attributes,
  type Context,
  type Span,
} from "@opentelemetry/api";
import { emptyResource, resourceFromAttributes } from "@opentelemetry/resources";
import {
  AggregationTemporality,
  DataPointType,
  MeterProvider,
  PeriodicExportingMetricReader,
  type CollectionResult,
  type MetricData,
  type MetricProducer,
  type PushMetricExporter,
} from "@opentelemetry/sdk-metrics";
import {
  AlwaysOffSampler,
  AlwaysOnSampler,
  BasicTracerProvider,
  BatchSpanProcessor,
  ParentBasedSampler,
  RandomIdGenerator,
  TraceIdRatioBasedSampler,
  type IdGenerator,
  type Sampler,
  type SpanExporter,
} from "@opentelemetry/sdk-trace-base";
import type { Registry } from "prom-client";
import type { RunTracer, SpanAttributes, SpanHandle, Telemetry, TelemetryOptions } from "./tracing.js";

/*
 * OpenTelemetry export of one process: traces through the RunTracer interface, and the
 * process's prom-client series (gauges, counters, histograms) read from its registry at each
 * export, so OTLP carries the same names as /metrics. Imported (dynamically) only when an OTLP endpoint is set.
 */

export { otlpProtocols, type OtlpProtocol, type Telemetry, type TelemetryOptions } from "./tracing.js";

/** Ids the next span takes when primed; random otherwise. */
class PrimedIds implements IdGenerator {
  private readonly random = new RandomIdGenerator();
  next: { traceId: string; spanId: string } | undefined;
  generateTraceId(): string {
    return this.next?.traceId ?? this.random.generateTraceId();
  }
  generateSpanId(): string {
    return this.next?.spanId ?? this.random.generateSpanId();
  }
}

function parentContext(parent: SpanHandle | string | undefined): Context {
  if (parent === undefined) return ROOT_CONTEXT;
  if (typeof parent !== "string") return (parent as OtelSpanHandle).context ?? ROOT_CONTEXT;
  const m = /^00-([0-9a-f]{32})-([0-9a-f]{16})-([0-9a-f]{2})$/.exec(parent);
  if (!m) return ROOT_CONTEXT;
  return trace.setSpanContext(ROOT_CONTEXT, {
    traceId: m[1]!,
    spanId: m[2]!,
    traceFlags: parseInt(m[3]!, 16) & TraceFlags.SAMPLED,
    isRemote: true,
  });
}

/*
 * One clock per trace in this process: the wall time at the trace's first span here, advanced by
 * the monotonic clock. The SDK anchors each span on its own Date.now(), so a wall clock stepped or
 * slewed (NTP) between a parent's start and a child's put the child outside its parent.
 */
interface SpanClock {
  epochMs: number;
  monotonicMs: number;
}

function newClock(): SpanClock {
  return { epochMs: Date.now(), monotonicMs: performance.now() };
}

/** Milliseconds since the epoch on `clock`, to the microsecond. */
function clockNow(clock: SpanClock): number {
  return clock.epochMs + (performance.now() - clock.monotonicMs);
}

interface OtelSpanHandle extends SpanHandle {
  context: Context;
  clock: SpanClock;
}

function handleOf(span: Span, clock: SpanClock): OtelSpanHandle {
  let ended = false;
  return {
    context: trace.setSpan(ROOT_CONTEXT, span),
    clock,
    end(attributes?: SpanAttributes, error?: string, endTime?: number) {
      if (ended) return;
      ended = true;
      if (attributes) span.setAttributes(attributes);
      if (error !== undefined) span.setStatus({ code: SpanStatusCode.ERROR, message: error });
      span.end(endTime ?? clockNow(clock));
    },
    traceparent() {
      const c = span.spanContext();
      return `00-${c.traceId}-${c.spanId}-0${c.traceFlags & TraceFlags.SAMPLED}`;
    },
  };
}

async function traceExporter(o: TelemetryOptions): Promise<SpanExporter> {
  const base = o.endpoint.replace(/\/+$/, "");
  if (o.protocol === "grpc") {
    const { OTLPTraceExporter } = await import("@opentelemetry/exporter-trace-otlp-grpc");
    return new OTLPTraceExporter({ url: base });
  }
  const { OTLPTraceExporter } = await import("@opentelemetry/exporter-trace-otlp-proto");
  return new OTLPTraceExporter({ url: `${base}/v1/traces`, headers: o.headers ?? {} });
}

async function metricExporter(o: TelemetryOptions): Promise<PushMetricExporter> {
  const base = o.endpoint.replace(/\/+$/, "");
  if (o.protocol === "grpc") {
    const { OTLPMetricExporter } = await import("@opentelemetry/exporter-metrics-otlp-grpc");
    return new OTLPMetricExporter({ url: base });
  }
  const { OTLPMetricExporter } = await import("@opentelemetry/exporter-metrics-otlp-proto");
  return new OTLPMetricExporter({ url: `${base}/v1/metrics`, headers: o.headers ?? {} });
}

const hrTime = (ms: number): [number, number] => [Math.floor(ms / 1000), Math.round((ms % 1000) * 1e6)];

/** Labels of one prom-client value. */
type Labels = Partial<Record<string, string | number>>;

/** Labels of a prom-client value as OTLP attributes. */
function attributesOf(labels: Labels): Attributes {
  return Object.fromEntries(
    Object.entries(labels)
      .filter((e): e is [string, string | number] => e[1] !== undefined)
      .map(([k, v]) => [k, String(v)]),
  );
}

/**
 * Turns the process's prom-client series into OTLP metric data at each export: gauges as
 * gauges, counters as cumulative monotonic sums, histograms as cumulative explicit-bucket
 * histograms (prom-client's cumulative bucket counts made per-bucket) — the names /metrics shows.
 */
class RegistryProducer implements MetricProducer {
  private readonly started = hrTime(Date.now());
  constructor(private readonly registry: Registry) {}

  async collect(): Promise<CollectionResult> {
    const now = hrTime(Date.now());
    const metrics: MetricData[] = [];
    for (const m of await this.registry.getMetricsAsJSON()) {
      const base = {
        descriptor: { name: m.name, description: m.help, unit: "", valueType: ValueType.DOUBLE },
        aggregationTemporality: AggregationTemporality.CUMULATIVE,
      };
      const point = (labels: Labels) => ({
        startTime: this.started,
        endTime: now,
        attributes: attributesOf(labels),
      });
      const type = String(m.type);
      if (type === "gauge")
        metrics.push({
          ...base,
          dataPointType: DataPointType.GAUGE,
          dataPoints: m.values.map((v) => ({ ...point(v.labels), value: v.value })),
        });
      else if (type === "counter")
        metrics.push({
          ...base,
          dataPointType: DataPointType.SUM,
          isMonotonic: true,
          dataPoints: m.values.map((v) => ({ ...point(v.labels), value: v.value })),
        });
      else if (type === "histogram") metrics.push({ ...base, ...histogramPoints(m.name, m.values, point) });
    }
    return {
      resourceMetrics: { resource: emptyResource(), scopeMetrics: [{ scope: { name: "drover" }, metrics }] },
      errors: [],
    };
  }
}

/** A histogram's prom-client values (`_bucket` per `le`, `_sum`, `_count`) grouped by label set. */
function histogramPoints(
  name: string,
  values: { value: number; labels: Labels; metricName?: string }[],
  point: (labels: Labels) => { startTime: [number, number]; endTime: [number, number]; attributes: Attributes },
) {
  const sets = new Map<string, { labels: Labels; buckets: Map<number, number>; sum: number; count: number }>();
  for (const v of values) {
    const { le, ...labels } = v.labels;
    const key = JSON.stringify(labels);
    const set = sets.get(key) ?? { labels, buckets: new Map<number, number>(), sum: 0, count: 0 };
    sets.set(key, set);
    if (v.metricName === `${name}_sum`) set.sum = v.value;
    else if (v.metricName === `${name}_count`) set.count = v.value;
    else if (le !== undefined && le !== "+Inf") set.buckets.set(Number(le), v.value);
  }
  const dataPoints = [...sets.values()].map((h) => {
    const boundaries = [...h.buckets.keys()].sort((x, y) => x - y);
    const cumulative = boundaries.map((b) => h.buckets.get(b)!);
    const counts = [...cumulative, h.count].map((c, i) => c - (i === 0 ? 0 : cumulative[i - 1]!));
    return { ...point(h.labels), value: { buckets: { boundaries, counts }, sum: h.sum, count: h.count } };
  });
  return { dataPointType: DataPointType.HISTOGRAM as const, dataPoints };
}

/** OTEL_TRACES_SAMPLER's sampler. */
function sampler(o: TelemetryOptions): Sampler {
  const ratio = new TraceIdRatioBasedSampler(o.samplerRatio ?? 1);
  switch (o.sampler ?? "parentbased_always_on") {
    case "always_on":
      return new AlwaysOnSampler();
    case "always_off":
      return new AlwaysOffSampler();
    case "traceidratio":
      return ratio;
    case "parentbased_always_off":
      return new ParentBasedSampler({ root: new AlwaysOffSampler() });
    case "parentbased_traceidratio":
      return new ParentBasedSampler({ root: ratio });
    default:
      return new ParentBasedSampler({ root: new AlwaysOnSampler() });
  }
}

/**
 * The process's own attributes, then the operator's (OTEL_RESOURCE_ATTRIBUTES; they may correct
 * `k8s.pod.name` and the like, not the `drover.*` ones that say which pool or agent this is),
 * then OTEL_SERVICE_NAME. Empty values are dropped.
 */
export function resourceAttributes(
  o: Pick<TelemetryOptions, "resource" | "resourceAttributes" | "serviceName">,
): Record<string, string> {
  const own = Object.entries(o.resource).filter((e): e is [string, string] => typeof e[1] === "string" && e[1] !== "");
  const operator = Object.entries(o.resourceAttributes ?? {}).filter(([k, v]) => v !== "" && !k.startsWith("drover."));
  const merged: Record<string, string> = Object.fromEntries([
    ...own,
    ...operator,
    ...own.filter(([k]) => k.startsWith("drover.")),
  ]);
  if (o.serviceName) merged["service.name"] = o.serviceName;
  return merged;
}

/** Starts exporting; resolves once the exporters are loaded. */
export async function startTelemetry(o: TelemetryOptions): Promise<Telemetry> {
  const resource = resourceFromAttributes(resourceAttributes(o));
  const stops: Array<() => Promise<void>> = [];
  let tracer: RunTracer = { start: () => ({ end: () => undefined, traceparent: () => "" }) };
  if (o.traces) {
    const ids = new PrimedIds();
    const provider = new BasicTracerProvider({
      resource,
      idGenerator: ids,
      sampler: sampler(o),
      spanProcessors: [new BatchSpanProcessor(await traceExporter(o), { scheduledDelayMillis: 1000 })],
    });
    const t = provider.getTracer("drover");
    tracer = {
      start(name, parent, options = {}) {
        // Priming and starting happen in one synchronous stretch: no other span can take the ids.
        const clock = typeof parent === "object" ? ((parent as OtelSpanHandle).clock ?? newClock()) : newClock();
        ids.next = options.ids;
        const span = t.startSpan(
          name,
          {
            startTime: options.startTime ?? clockNow(clock),
            ...(options.attributes ? { attributes: options.attributes } : {}),
          },
          parentContext(parent),
        );
        ids.next = undefined;
        return handleOf(span, clock);
      },
    };
    stops.push(() => provider.shutdown());
  }
  if (o.metrics && o.registry) {
    // No instruments of its own: everything comes from the process's registry, read at each export.
    const reader = new PeriodicExportingMetricReader({
      exporter: await metricExporter(o),
      exportIntervalMillis: o.metricsIntervalMs ?? 60_000,
      metricProducers: [new RegistryProducer(o.registry)],
    });
    const provider = new MeterProvider({ resource, readers: [reader] });
    stops.push(() => provider.shutdown());
  }
  return {
    tracer,
    async shutdown() {
      await Promise.allSettled(stops.map((s) => s()));
    },
  };
}
