/*
 * The wire contract: every request and response body of the user API (/api/v1) and the
 * agent protocol (/api/agent/v1), defined once. The server validates requests with these
 * and the agent and CLI validate responses with them, so a change breaks the build, not
 * production. Timestamps are ISO-8601 strings.
 */

export * from "./schemas/common.js";
export * from "./schemas/user.js";
export * from "./schemas/run-options.js";
export * from "./schemas/agent.js";
export * from "./schemas/vcs.js";
export * from "./schemas/vcs-operations.js";
export * from "./schemas/vcs-deliveries.js";
export * from "./schemas/vcs-tasks.js";
