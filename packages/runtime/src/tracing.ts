import { createHash } from "node:crypto";
import type { OtelSampler } from "@drover/protocol";
import type { Registry } from "prom-client";

/*
 * The tracing interface every process codes against. It is tiny on purpose: the OpenTelemetry
 * SDK behind it (./telemetry.ts) is imported only when an OTLP endpoint is set, so a process
 * without one loads no exporter code and its memory does not grow.
 */

/** Span attribute values. */
export type SpanAttributes = Record<string, string | number | boolean>;

/** A started span. */
export interface SpanHandle {
  /** Ends the span (at `endTime`, ms since the epoch, or now); `error` marks it failed. */
  end(attributes?: SpanAttributes, error?: string, endTime?: number): void;
  /** W3C traceparent of this span, for a child in another process. */
  traceparent(): string;
}

/** Starts spans; the no-op one when tracing is off. */
export interface RunTracer {
  /**
   * Starts span `name` under `parent` (a handle, or a traceparent from another process).
   * `ids` fixes the span's (and, without a parent, the trace's) id: the server's job span is
   * named by the job so that every process can parent on it without asking.
   */
  start(
    name: string,
    parent?: SpanHandle | string,
    options?: { startTime?: number; attributes?: SpanAttributes; ids?: { traceId: string; spanId: string } },
  ): SpanHandle;
}

const noopSpan: SpanHandle = { end: () => undefined, traceparent: () => "" };
/** The tracer of a process that exports no traces. */
export const noopTracer: RunTracer = { start: () => noopSpan };

/** Trace and root-span ids of one job attempt: derived from it, so no process has to store them. */
export function jobTraceIds(jobId: string, attempt: number): { traceId: string; spanId: string } {
  const h = createHash("sha256").update(`drover-job:${jobId}:${attempt}`).digest("hex");
  return { traceId: h.slice(0, 32), spanId: h.slice(32, 48) };
}

/** The W3C traceparent naming the job attempt's root span (sampled). */
export function jobTraceparent(jobId: string, attempt: number): string {
  const { traceId, spanId } = jobTraceIds(jobId, attempt);
  return `00-${traceId}-${spanId}-01`;
}

/** A process's telemetry: the no-op one without an endpoint (nothing of the SDK is loaded). */
export async function startTelemetryIfSet(options: TelemetryOptions | undefined): Promise<Telemetry> {
  if (!options || (!options.traces && !options.metrics)) return { tracer: noopTracer, shutdown: async () => undefined };
  const { startTelemetry } = await import("./telemetry.js");
  return startTelemetry(options);
}

// What ./telemetry.ts implements; declared here so that this module never imports it statically.

/** The OTLP wire protocols offered (the names of OTEL_EXPORTER_OTLP_PROTOCOL). */
export const otlpProtocols = ["http/protobuf", "grpc"] as const;
export type OtlpProtocol = (typeof otlpProtocols)[number];

/** What to export, where, and as whom. */
export interface TelemetryOptions {
  /** Collector base URL: `http(s)://host:4318` for http/protobuf (paths /v1/traces and /v1/metrics are added), `http(s)://host:4317` for grpc. */
  endpoint: string;
  protocol: OtlpProtocol;
  traces: boolean;
  metrics: boolean;
  /** Resource attributes: service.name, drover.pool, drover.agent, k8s.pod.name, … (empty values dropped). */
  resource: Record<string, string | undefined>;
  /** The process's prom-client registry (what /metrics serves), read at each metrics export. */
  registry?: Registry;
  metricsIntervalMs?: number;
  /** Sent with every http/protobuf export (grpc exporters read OTEL_EXPORTER_OTLP_HEADERS themselves). */
  headers?: Record<string, string>;
  /** Beats `resource`'s and `resourceAttributes`' service.name. */
  serviceName?: string | undefined;
  /** The operator's attributes: beat `resource`'s, except `drover.*`. */
  resourceAttributes?: Record<string, string>;
  sampler?: OtelSampler;
  samplerRatio?: number;
}

/** A running export; `shutdown` flushes what is buffered and stops. */
export interface Telemetry {
  tracer: RunTracer;
  shutdown(): Promise<void>;
}
