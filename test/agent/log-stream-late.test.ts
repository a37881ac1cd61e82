import assert from "node:assert/strict";
import { AgentClient, LogStream } from "@drover/agent";
import { routes } from "@drover/protocol";
import { createServer, type IncomingHttpHeaders, type Server } from "node:http";
import type { AddressInfo } from "node:net";
import { after, before, test } from "node:test";
import { call, queueRun, registerAgent } from "../support/agent-client.js";
import { rawTarGz } from "../support/archives.js";
import { startTestServer, type TestServer } from "../support/server.js";
import { client } from "../support/typed-api.js";

// The agent's log appends through a network that delays them: some are held until the agent
// gives up waiting (its request deadline) and reach the server only after the agent's retry
// and later appends have; some connections are reset before the server sees the piece. The
// stored log must be exactly what was written.

let server: TestServer;
let proxy: Server;
let proxyUrl: string;
const seen = { late: 0, reset: 0 };

interface Piece {
  url: string;
  headers: Record<string, string>;
  body: Buffer;
}

function forwardHeaders(h: IncomingHttpHeaders): Record<string, string> {
  const out: Record<string, string> = {};
  for (const k of ["authorization", "content-type"]) if (typeof h[k] === "string") out[k] = h[k];
  return out;
}

before(async () => {
  // The test appends without heartbeats: a lease that outlasts a slow run on a loaded machine.
  server = await startTestServer({ DROVER_LEASE_TTL_SECONDS: "900" });
  let appends = 0;
  const held: Piece[] = [];
  const upstream = client(server.url);
  const send = (p: Piece, method: string) =>
    upstream.request(method, p.url, { headers: p.headers, body: p.body.length > 0 ? p.body : undefined });
  proxy = createServer((req, res) => {
    const body: Buffer[] = [];
    req.on("data", (d: Buffer) => body.push(d));
    req.on(
      "end",
      () =>
        void (async () => {
          const piece = { url: req.url ?? "/", headers: forwardHeaders(req.headers), body: Buffer.concat(body) };
          const isAppend = req.method === "POST" && /\/logs\?offset=/.test(piece.url);
          const n = isAppend ? ++appends : 0;
          if (isAppend && n % 3 === 1) {
            // Held until the agent's deadline closes the connection; delivered after the next append.
            seen.late++;
            req.socket.once("close", () => held.push(piece));
            return;
          }
          if (isAppend && n % 3 === 2 && n % 2 === 0) {
            seen.reset++;
            req.socket.destroy();
            return;
          }
          const answer = await send(piece, req.method ?? "GET");
          for (const late of held.splice(0)) await send(late, "POST");
          res
            .writeHead(answer.status, {
              "content-type": String(answer.headers["content-type"] ?? "application/octet-stream"),
            })
            .end(answer.body);
        })().catch(() => res.destroy()),
    );
  });
  await new Promise<void>((r) => proxy.listen(0, "127.0.0.1", r));
  proxyUrl = `http://127.0.0.1:${(proxy.address() as AddressInfo).port}`;
});
after(async () => {
  proxy?.closeAllConnections();
  await new Promise((r) => proxy?.close(r));
  await server?.stop();
});

test("appends delivered after their own retry, and reset connections, neither double nor drop a byte", async () => {
  await server.api(routes.createPool, { body: { name: "late" } });
  const { session } = await registerAgent(server, "late", "late-writer");
  const { runId } = await queueRun(
    server,
    "late",
    "late",
    rawTarGz([{ path: "main.tf", content: 'resource "terraform_data" "x" {}\n' }]),
  );
  const job = (await call(server, routes.pollJob, session, { query: { wait: 1000 } })).body.job;
  assert.equal(
    (await call(server, routes.startJob, job.jobToken, { params: { id: job.jobId }, body: { starter: "test" } }))
      .status,
    200,
  );

  // A short deadline, so that a held append is given up and retried.
  const agent = new AgentClient(proxyUrl, undefined, { requestMs: 300 });
  const log = new LogStream(agent.job(job.jobId, job.jobToken));
  let expected = "";
  for (let i = 0; i < 30_000; i++) {
    const line = `line ${i} ${"y".repeat(i % 61)}\n`;
    expected += line;
    // Written in pieces that split lines anywhere, as a pipe delivers them.
    const cut = i % line.length;
    log.write(line.slice(0, cut));
    log.write(line.slice(cut));
    if (i % 3_000 === 0) await new Promise((r) => setImmediate(r));
  }
  await log.close();
  await agent.dispatcher.close();
  assert.ok(seen.late > 1 && seen.reset > 0, `the network did delay and reset appends (${JSON.stringify(seen)})`);
  assert.equal(log.acknowledged, Buffer.byteLength(expected));
  const stored = (
    await client(server.url, server.adminToken).call(routes.runLogs, {
      params: { id: runId },
      query: { phase: "plan", limit: 8388608 },
    })
  ).toString("utf8");
  assert.equal(stored.length, expected.length, "no byte lost or doubled");
  assert.ok(stored === expected, "every line in order");
});

test("an append that arrives before the one ahead of it waits for its turn; one far past the end is refused at once", async () => {
  await server.api(routes.createPool, { body: { name: "order" } });
  const { session } = await registerAgent(server, "order", "order-writer");
  const { runId } = await queueRun(
    server,
    "order",
    "order",
    rawTarGz([{ path: "main.tf", content: 'resource "terraform_data" "x" {}\n' }]),
  );
  const job = (await call(server, routes.pollJob, session, { query: { wait: 1000 } })).body.job;
  assert.ok(job);
  assert.equal(
    (await call(server, routes.startJob, job.jobToken, { params: { id: job.jobId }, body: { starter: "test" } }))
      .status,
    200,
  );
  const agent = client(server.url, job.jobToken);
  const append = (offset: number, text: string) =>
    agent.call(routes.appendLog, { params: { id: job.jobId }, query: { offset }, body: Buffer.from(text) });

  const early = append(7, "line 2\n");
  // The early one is held on the server until this one lands.
  assert.deepEqual(await append(0, "line 1\n"), { offset: 7 });
  assert.deepEqual(await early, { offset: 14 });
  await assert.rejects(
    append(14 + 64 * 1024 * 1024, "far\n"),
    (err: Error & { code?: string }) => err.code === "log_gap",
  );
  const stored = (
    await client(server.url, server.adminToken).call(routes.runLogs, {
      params: { id: runId },
      query: { phase: "plan" },
    })
  ).toString("utf8");
  assert.equal(stored, "line 1\nline 2\n");
});
