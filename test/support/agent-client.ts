import type { TestServer } from "./server.js";
import { rawCall } from "./typed-api.js";

/** Minimal raw agent-protocol calls for server tests (the real agent has its own client). */
export async function call(server: TestServer, method: string, path: string, token: string, body?: unknown, headers: Record<string, string> = {}) {
  const { status, body: parsed } = await rawCall(server.url, method, path, token, body, headers);
  return { status, body: parsed };
}

/** Creates a pool token for `pool` and registers an agent with it; returns its tokens. */
export async function registerAgent(server: TestServer, pool: string, name: string) {
  const tok = await server.api("POST", `/api/v1/pools/${pool}/tokens`, { description: name });
  if (tok.status !== 201) throw new Error(`pool token: ${JSON.stringify(tok.body)}`);
  const reg = await call(server, "POST", "/api/agent/v1/register", tok.body.token, { name, version: "test", driver: "local", capacity: 1 });
  if (reg.status !== 200) throw new Error(`register: ${JSON.stringify(reg.body)}`);
  return { poolToken: tok.body.token as string, poolTokenId: tok.body.id as string, session: reg.body.sessionToken as string };
}

/** Creates a workspace with an uploaded configuration and a run; returns their ids. */
export async function queueRun(server: TestServer, pool: string, workspace: string, archive: Buffer, run: Record<string, unknown> = {}) {
  const ws = await server.api("POST", "/api/v1/workspaces", { name: workspace, pool });
  if (ws.status !== 201) throw new Error(`workspace: ${JSON.stringify(ws.body)}`);
  const cv = await server.api("POST", `/api/v1/workspaces/${workspace}/configuration-versions`, archive, { "content-type": "application/gzip" });
  if (cv.status !== 201) throw new Error(`configuration: ${JSON.stringify(cv.body)}`);
  const r = await server.api("POST", "/api/v1/runs", { workspace, configurationVersionId: cv.body.id, ...run });
  if (r.status !== 201) throw new Error(`run: ${JSON.stringify(r.body)}`);
  return { workspaceId: ws.body.id as string, runId: r.body.id as string };
}
