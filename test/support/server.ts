import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { pino } from "pino";
import { testServerDiagnostics } from "./processes.js";
import { routeCall, type ApiResponse, type RouteArgs } from "./typed-api.js";
import type { Route } from "@drover/protocol";
import { loadServerConfig, startServer, type RunningServer, type StartOptions } from "@drover/server";

/** A real server on a random port, plus a tiny JSON client for its user API. */
export interface TestServer extends RunningServer {
  adminToken: string;
  dataDir: string;
  /** Calls a route with the admin token (unless the input names another); returns status and parsed JSON (or text). */
  api<R extends Route>(route: R, ...input: RouteArgs<R>): Promise<ApiResponse>;
  stop(): Promise<void>;
}

/** Starts a server that checks its responses against the route table; `env` adds DROVER_* settings (e.g. DROVER_DATABASE_URL, DROVER_LEASE_TTL_SECONDS). */
export async function startTestServer(
  env: Record<string, string> = {},
  options: StartOptions = {},
): Promise<TestServer> {
  // A data directory the caller names is theirs to keep or remove; one made here is removed by stop().
  const made = env.DROVER_DATA_DIR === undefined;
  const dataDir = env.DROVER_DATA_DIR ?? mkdtempSync(join(tmpdir(), "drover-server-"));
  const config = loadServerConfig({
    env: {
      DROVER_DATA_DIR: dataDir,
      DROVER_PORT: "0",
      DROVER_ADMIN_TOKEN: "drv_u_test-admin.0123456789abcdefghij0123456789ab",
      DROVER_SWEEP_INTERVAL_MS: "200",
      ...testServerDiagnostics,
      ...env,
    },
  });
  const server = await startServer(config, {
    logger: pino({ level: process.env.DROVER_TEST_LOG_LEVEL ?? "silent" }),
    ...options,
  });
  const adminToken = server.adminToken ?? "";
  const api: TestServer["api"] = (route, ...[input]) =>
    routeCall(server.url, route, ...([{ token: adminToken, ...input }] as RouteArgs<typeof route>));
  return {
    ...server,
    adminToken,
    dataDir,
    api,
    async stop() {
      await server.close();
      if (made) rmSync(dataDir, { recursive: true, force: true });
    },
  };
}
