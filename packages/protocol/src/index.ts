export * from "./archive.js";
export * from "./errors.js";
export * from "./ids.js";
export * from "./images.js";
export * from "./lifecycle.js";
export * from "./plan.js";
export * from "./routes.js";
export * from "./schemas.js";
export { builtLazySchemas } from "./lazy-schema.js";
export * from "./settings.js";
export * from "./tokens.js";
export * from "./redact.js";
export * from "./text.js";
export * from "./versions.js";
export * from "./client.js";
export {
  EnvHttpProxyAgent,
  lazyHttp2,
  request as transportRequest,
  type TransportRequestOptions,
} from "./transport.js";
export * from "./tracing.js";
export * from "./otlp-settings.js";
