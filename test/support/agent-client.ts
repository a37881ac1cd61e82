import type { TestServer } from "./server.js";
import { routeCall, type RouteArgs } from "./typed-api.js";
import { routes, type Route } from "@drover/protocol";

/** Agent-protocol calls for server tests with a given token, answered whatever their status (the real agent has its own client). */
export async function call<R extends Route>(server: TestServer, route: R, token: string, ...[input]: RouteArgs<R>) {
  const { status, body: parsed } = await routeCall(server.url, route, ...([{ token, ...input }] as RouteArgs<R>));
  return { status, body: parsed };
}

/** Creates a pool token for `pool` and registers an agent with it; returns its tokens. */
export async function registerAgent(server: TestServer, pool: string, name: string) {
  const tok = await server.api(routes.createPoolToken, { params: { pool }, body: { description: name } });
  if (tok.status !== 201) throw new Error(`pool token: ${JSON.stringify(tok.body)}`);
  const reg = await call(server, routes.register, tok.body.token, {
    body: { name, version: "test", driver: "local", capacity: 1 },
  });
  if (reg.status !== 200) throw new Error(`register: ${JSON.stringify(reg.body)}`);
  return {
    poolToken: tok.body.token as string,
    poolTokenId: tok.body.id as string,
    session: reg.body.sessionToken as string,
  };
}

/** Creates a workspace with an uploaded configuration and a run; returns their ids. */
export async function queueRun(
  server: TestServer,
  pool: string,
  workspace: string,
  archive: Buffer,
  run: Record<string, unknown> = {},
) {
  const ws = await server.api(routes.createWorkspace, { body: { name: workspace, pool } });
  if (ws.status !== 201) throw new Error(`workspace: ${JSON.stringify(ws.body)}`);
  const cv = await server.api(routes.uploadConfiguration, { params: { ws: workspace }, body: archive });
  if (cv.status !== 201) throw new Error(`configuration: ${JSON.stringify(cv.body)}`);
  const r = await server.api(routes.createRun, { body: { workspace, configurationVersionId: cv.body.id, ...run } });
  if (r.status !== 201) throw new Error(`run: ${JSON.stringify(r.body)}`);
  return { workspaceId: ws.body.id as string, runId: r.body.id as string };
}
