export { loadServerConfig, type ServerConfig, type ServerFlags } from "./config.js";
export { startServer, type RunningServer } from "./server.js";
export { openDatabase, type Db, type DatabaseLocation } from "./db/connect.js";
export type { StoreContext, StoreSettings } from "./store/context.js";
export * as store from "./store/index.js";
export { localEventBus, postgresEventBus, type EventBus } from "./events.js";
export { DatabaseHealth, isConnectionError } from "./db/health.js";
export { openApiDocument, openApiPath } from "./http/openapi.js";
export type { AppOptions } from "./http/app.js";
