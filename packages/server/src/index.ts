export { loadServerConfig, type ServerConfig, type ServerFlags } from "./config.js";
export { startServer, type RunningServer, type StartOptions } from "./server.js";
export { openDatabase, type Db, type DatabaseLocation } from "./db/connect.js";
export { migrationProvider } from "./db/migrations.js";
export { CoalescedReads } from "./store/coalesced-reads.js";
export type { StoreContext, StoreSettings } from "./store/context.js";
export * as store from "./store/index.js";
export { localEventBus, postgresEventBus, type EventBus } from "./events.js";
export { DatabaseHealth, isConnectionError } from "./db/health.js";
export { cachingStatements } from "./db/statement-cache.js";
export {
  backstopPages,
  checkpointEveryBytes,
  startCheckpointer,
  startCheckpointWorker,
  walSizeLimitBytes,
} from "./db/checkpointer.js";
export { openApiDocument, openApiPath } from "./http/openapi.js";
export { tfeRoutes, tfeExtraPaths } from "./tfe/index.js";
export { tfeApi, type TfeRoute } from "./tfe/serve.js";
export { contentSecurityPolicy, registerWebUi, webUiPaths } from "./http/web-ui.js";
export type { AppOptions } from "./http/app.js";
export { registrar, answered, type Registrar, type ServeOptions } from "./http/serve.js";
export type { Authenticators, Callers } from "./http/auth.js";
export type { PollOutcome } from "./vcs/poller.js";
export { fetchCommit } from "./vcs/fetch.js";
export { relayClient, vcsReach, type RelayTarget, type VcsReach } from "./vcs/relay.js";
export { commitTriggers, globPattern } from "./vcs/triggers.js";
export { createMetrics, type MetricsOptions, type ServerMetrics } from "./metrics.js";
export * as capability from "./tfe/capability.js";
