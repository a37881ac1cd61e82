import type { OtelSampler, SettingsSource } from "@drover/protocol";
import type { OtlpProtocol } from "./tracing.js";

/** A process's OTLP export, from its own DROVER_…_OTLP_* settings and OpenTelemetry's standard OTEL_* ones. */
export interface OtlpSettings {
  endpoint: string;
  protocol: OtlpProtocol;
  traces: boolean;
  metrics: boolean;
  /** Sent with every export (OTEL_EXPORTER_OTLP_HEADERS). */
  headers: Record<string, string>;
  /** OTEL_SERVICE_NAME; the process's own name when unset. */
  serviceName: string | undefined;
  /** OTEL_RESOURCE_ATTRIBUTES. */
  resourceAttributes: Record<string, string>;
  metricsIntervalMs: number;
  sampler: OtelSampler;
  /** The ratio of the `traceidratio` samplers. */
  samplerRatio: number;
}

/**
 * The OTLP export of the server (`DROVER_OTLP_*`) or of an agent process (`DROVER_AGENT_OTLP_*`);
 * undefined when neither its own endpoint nor OTEL_EXPORTER_OTLP_ENDPOINT is set (no exporter
 * is loaded). Drover's own endpoint and protocol beat the standard variables: an operator who
 * set them chose them for Drover, while OTEL_* may be set for every process of a host or pod.
 */
export function otlpSettings(src: SettingsSource, of: "server" | "agent"): OtlpSettings | undefined {
  const own =
    of === "server"
      ? {
          endpoint: src.get("DROVER_OTLP_ENDPOINT"),
          protocol: src.origin("DROVER_OTLP_PROTOCOL") ? src.get("DROVER_OTLP_PROTOCOL") : undefined,
          traces: src.get("DROVER_OTLP_TRACES_ENABLED"),
          metrics: src.get("DROVER_OTLP_METRICS_ENABLED"),
        }
      : {
          endpoint: src.get("DROVER_AGENT_OTLP_ENDPOINT"),
          protocol: src.origin("DROVER_AGENT_OTLP_PROTOCOL") ? src.get("DROVER_AGENT_OTLP_PROTOCOL") : undefined,
          traces: src.get("DROVER_AGENT_OTLP_TRACES_ENABLED"),
          metrics: src.get("DROVER_AGENT_OTLP_METRICS_ENABLED"),
        };
  const endpoint = own.endpoint ?? src.get("OTEL_EXPORTER_OTLP_ENDPOINT");
  if (!endpoint) return undefined;
  return {
    endpoint,
    protocol: own.protocol ?? src.get("OTEL_EXPORTER_OTLP_PROTOCOL") ?? "http/protobuf",
    traces: own.traces,
    metrics: own.metrics,
    headers: src.get("OTEL_EXPORTER_OTLP_HEADERS") ?? {},
    serviceName: src.get("OTEL_SERVICE_NAME"),
    resourceAttributes: src.get("OTEL_RESOURCE_ATTRIBUTES") ?? {},
    metricsIntervalMs: src.get("OTEL_METRIC_EXPORT_INTERVAL"),
    sampler: src.get("OTEL_TRACES_SAMPLER"),
    samplerRatio: src.get("OTEL_TRACES_SAMPLER_ARG"),
  };
}
