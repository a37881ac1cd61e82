import assert from "node:assert/strict";
import { readdirSync } from "node:fs";
import { connect } from "node:net";
import { join } from "node:path";
import { after, before, test } from "node:test";
import { routePath, routes } from "@drover/protocol";
import { startTestServer, type TestServer } from "../support/server.js";
import { lookUntil, within } from "../support/poll.js";

/*
 * A client that stops sending mid-upload (a laptop put to sleep, a NAT that dropped the flow) is
 * cut off once its connection has been silent for the server's idle timeout, and the part of the
 * body it had sent is removed; the server goes on answering everyone else.
 */

let server: TestServer;
before(async () => {
  server = await startTestServer({}, { idleConnectionMs: 300 });
  const ws = await server.api(routes.createPool, { body: { name: "idle" } });
  assert.equal(ws.status, 201);
  assert.equal((await server.api(routes.createWorkspace, { body: { name: "idle", pool: "idle" } })).status, 201);
});
after(() => server?.stop());

test("an upload that stalls mid-body is closed after the idle timeout and its spooled part removed", async () => {
  const url = new URL(server.url);
  const socket = connect(Number(url.port), url.hostname);
  const closed = new Promise<void>((resolve) => socket.once("close", () => resolve()));
  socket.on("error", () => undefined);
  const path = routePath(routes.uploadConfiguration, { ws: "idle" });
  socket.write(
    [
      `POST ${path} HTTP/1.1`,
      `host: ${url.host}`,
      `authorization: Bearer ${server.adminToken}`,
      "content-type: application/gzip",
      "content-length: 1000000",
      "",
      "",
    ].join("\r\n"),
  );
  socket.write(Buffer.alloc(64 * 1024, 1));
  // Never sends the rest. Well past the idle timeout, the server has closed the connection.
  assert.notEqual(await within(closed, 30_000), null, "the stalled connection was closed");
  const uploads = join(server.dataDir, "uploads");
  // Removed as the aborted body's stream ends, just after the close.
  await lookUntil(
    "the stalled upload's spool file removed",
    () => (readdirSync(uploads).length === 0 ? true : undefined),
    { timeoutMs: 20_000, diagnose: () => readdirSync(uploads).join(", ") },
  );
  // Everyone else is still answered.
  assert.equal((await server.api(routes.getWorkspace, { params: { ws: "idle" } })).status, 200);
});
