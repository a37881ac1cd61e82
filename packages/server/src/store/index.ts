/*
 * The store: every database state transition of Drover, one module per concept. The same
 * code serves SQLite and PostgreSQL; test/server/store.test.ts is the conformance suite both
 * must pass.
 */
export * from "./agents.js";
export { chunkBytes, storedBytes, type BodyFile, type BodySource, type StoredBody } from "./bodies.js";
export { JsonScanError, JsonScanner, nonScalar } from "./json-scan.js";
export * from "./configuration-versions.js";
export * from "./context.js";
export * from "./demand.js";
export { deleteRetiredJobTokens, moveJob, type JobMoveFields } from "./job-moves.js";
export * from "./logs.js";
export * from "./plans.js";
export { PlanJsonThread, renderDeadlineMs, type RenderedPlanJson } from "./plan-json.js";
export * from "./outputs.js";
export * from "./pools.js";
export * from "./queue.js";
export * from "./lease-expiry.js";
export * from "./runs.js";
export * from "./run-create.js";
export { heldByDestroyGuard } from "./destroy-guard.js";
export * from "./run-variables.js";
export * from "./run-jobs.js";
export * from "./cancels.js";
export * from "./state.js";
export * from "./user-tokens.js";
export { poolWaiters } from "./waiters.js";
export * from "./variables.js";
export * from "./web-sessions.js";
export * from "./workspaces.js";
export * from "./presence.js";
export * from "./sessions.js";
export * from "./vcs-connections.js";
export * from "./workspace-vcs.js";
export * from "./vcs-deliveries.js";
export * from "./vcs-supersede.js";
export * from "./vcs-reports.js";
export * from "./vcs-tasks.js";
