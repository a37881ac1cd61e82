export * from "./archive.js";
export * from "./redact.js";
export * from "./sensitive-values.js";
export * from "./client.js";
export { EnvHttpProxyAgent, request as transportRequest, type TransportRequestOptions } from "./transport.js";
export * from "./tracing.js";
export * from "./otlp-settings.js";
export * from "./log-format.js";
