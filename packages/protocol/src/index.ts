export * from "./archive.js";
export * from "./errors.js";
export * from "./ids.js";
export * from "./plan.js";
export * from "./routes.js";
export * from "./schemas.js";
export * from "./tokens.js";
export * from "./redact.js";
