import { ROOT_CONTEXT, SpanStatusCode, trace, TraceFlags, type Attributes, type Context, type Span } from "@opentelemetry/api";
import { resourceFromAttributes } from "@opentelemetry/resources";
import { MeterProvider, PeriodicExportingMetricReader, type PushMetricExporter } from "@opentelemetry/sdk-metrics";
import { BasicTracerProvider, BatchSpanProcessor, RandomIdGenerator, type IdGenerator, type SpanExporter } from "@opentelemetry/sdk-trace-base";
import type { RunTracer, SpanAttributes, SpanHandle, Telemetry, TelemetryOptions } from "./tracing.js";

/*
 * OpenTelemetry export of one process: traces through the RunTracer interface, and the
 * process's Prometheus series re-read from its exposition text at each export, so OTLP carries
 * the same names as /metrics. Imported (dynamically) only when an OTLP endpoint is set.
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
  return trace.setSpanContext(ROOT_CONTEXT, { traceId: m[1]!, spanId: m[2]!, traceFlags: parseInt(m[3]!, 16) & TraceFlags.SAMPLED, isRemote: true });
}

interface OtelSpanHandle extends SpanHandle {
  context: Context;
}

function handleOf(span: Span): OtelSpanHandle {
  let ended = false;
  return {
    context: trace.setSpan(ROOT_CONTEXT, span),
    end(attributes?: SpanAttributes, error?: string, endTime?: number) {
      if (ended) return;
      ended = true;
      if (attributes) span.setAttributes(attributes);
      if (error !== undefined) span.setStatus({ code: SpanStatusCode.ERROR, message: error });
      span.end(endTime);
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
  return new OTLPTraceExporter({ url: `${base}/v1/traces` });
}

async function metricExporter(o: TelemetryOptions): Promise<PushMetricExporter> {
  const base = o.endpoint.replace(/\/+$/, "");
  if (o.protocol === "grpc") {
    const { OTLPMetricExporter } = await import("@opentelemetry/exporter-metrics-otlp-grpc");
    return new OTLPMetricExporter({ url: base });
  }
  const { OTLPMetricExporter } = await import("@opentelemetry/exporter-metrics-otlp-proto");
  return new OTLPMetricExporter({ url: `${base}/v1/metrics` });
}

/** One sample of a Prometheus exposition. */
interface Sample {
  name: string;
  labels: Attributes;
  value: number;
}

/** Gauges and counters of a Prometheus text exposition (histograms are left to /metrics). */
export function parseExposition(text: string): { types: Map<string, { type: "gauge" | "counter"; help: string }>; samples: Sample[] } {
  const types = new Map<string, { type: "gauge" | "counter"; help: string }>();
  const help = new Map<string, string>();
  const samples: Sample[] = [];
  for (const line of text.split("\n")) {
    const h = /^# HELP (\S+) (.*)$/.exec(line);
    if (h) help.set(h[1]!, h[2]!);
    const t = /^# TYPE (\S+) (\S+)$/.exec(line);
    if (t && (t[2] === "gauge" || t[2] === "counter")) types.set(t[1]!, { type: t[2], help: help.get(t[1]!) ?? "" });
    if (line === "" || line.startsWith("#")) continue;
    const s = /^([a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{(.*)\})? (\S+)/.exec(line);
    if (!s || !types.has(s[1]!)) continue;
    const labels: Attributes = {};
    for (const l of (s[2] ?? "").matchAll(/([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\]|\\.)*)"/g)) labels[l[1]!] = l[2]!.replace(/\\(.)/g, (_, c: string) => (c === "n" ? "\n" : c));
    samples.push({ name: s[1]!, labels, value: Number(s[3]) });
  }
  return { types, samples };
}

/** Starts exporting; resolves once the exporters are loaded. */
export async function startTelemetry(o: TelemetryOptions): Promise<Telemetry> {
  const resource = resourceFromAttributes(Object.fromEntries(Object.entries(o.resource).filter((e): e is [string, string] => typeof e[1] === "string" && e[1] !== "")));
  const stops: Array<() => Promise<void>> = [];
  let tracer: RunTracer = { start: () => ({ end: () => undefined, traceparent: () => "" }) };
  if (o.traces) {
    const ids = new PrimedIds();
    const provider = new BasicTracerProvider({ resource, idGenerator: ids, spanProcessors: [new BatchSpanProcessor(await traceExporter(o), { scheduledDelayMillis: 1000 })] });
    const t = provider.getTracer("drover");
    tracer = {
      start(name, parent, options = {}) {
        // Priming and starting happen in one synchronous stretch: no other span can take the ids.
        ids.next = options.ids;
        const span = t.startSpan(name, { ...(options.startTime === undefined ? {} : { startTime: options.startTime }), ...(options.attributes ? { attributes: options.attributes } : {}) }, parentContext(parent));
        ids.next = undefined;
        return handleOf(span);
      },
    };
    stops.push(() => provider.shutdown());
  }
  if (o.metrics && o.exposition) {
    const exposition = o.exposition;
    const reader = new PeriodicExportingMetricReader({ exporter: await metricExporter(o), exportIntervalMillis: o.metricsIntervalMs ?? 60_000 });
    const provider = new MeterProvider({ resource, readers: [reader] });
    const meter = provider.getMeter("drover");
    const { types } = parseExposition(await exposition());
    const instruments = new Map(
      [...types].map(([name, t]) => [name, t.type === "counter" ? meter.createObservableCounter(name, { description: t.help }) : meter.createObservableGauge(name, { description: t.help })]),
    );
    meter.addBatchObservableCallback(async (result) => {
      for (const s of parseExposition(await exposition()).samples) {
        const instrument = instruments.get(s.name);
        if (instrument) result.observe(instrument, s.value, s.labels);
      }
    }, [...instruments.values()]);
    stops.push(() => provider.shutdown());
  }
  return {
    tracer,
    async shutdown() {
      await Promise.allSettled(stops.map((s) => s()));
    },
  };
}
