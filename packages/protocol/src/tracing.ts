import { createHash } from "node:crypto";
import type { Telemetry, TelemetryOptions } from "./telemetry.js";

export type { Telemetry, TelemetryOptions } from "./telemetry.js";

/*
 * The tracing interface every process codes against. It is tiny on purpose: the OpenTelemetry
 * SDK behind it (./telemetry.ts) is imported only when an OTLP endpoint is set, so a process
 * without one loads no exporter code and its memory does not grow (SPEC §8).
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
  start(name: string, parent?: SpanHandle | string, options?: { startTime?: number; attributes?: SpanAttributes; ids?: { traceId: string; spanId: string } }): SpanHandle;
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
