import assert from "node:assert/strict";
import { AgentClient, LogStream } from "@drover/agent";
import { createServer, type Server } from "node:http";
import type { AddressInfo } from "node:net";
import { after, before, test } from "node:test";
import { call, queueRun, registerAgent } from "../support/agent-client.js";
import { rawTarGz } from "../support/archives.js";
import { startTestServer, type TestServer } from "../support/server.js";
import { routes } from "@drover/protocol";
import { client } from "../support/typed-api.js";

// The agent's log pipeline against the real server through a network that fails: some
// appends never reach the server (503), some reach it but their answer is lost. The log the
// server ends up with must be exactly what was written: nothing lost, nothing doubled.

let server: TestServer;
let proxy: Server;
let proxyUrl: string;
const failures = { refused: 0, answerLost: 0 };

before(async () => {
  // The test appends without heartbeats: a lease that outlasts a slow run on a loaded machine.
  server = await startTestServer({ DROVER_LEASE_TTL_SECONDS: "900" });
  let appends = 0;
  proxy = createServer((req, res) => {
    const body: Buffer[] = [];
    req.on("data", (d: Buffer) => body.push(d));
    // A failed upstream call resets the agent's connection rather than leaving it hanging.
    req.on(
      "end",
      () =>
        void (async () => {
          const isAppend = req.method === "POST" && /\/logs\?offset=/.test(req.url ?? "");
          const n = isAppend ? ++appends : 0;
          if (isAppend && n % 5 === 2) {
            failures.refused++;
            res
              .writeHead(503, { "content-type": "application/json" })
              .end('{"error":"internal","message":"flaky network"}');
            return;
          }
          const headers: Record<string, string> = {};
          for (const k of ["authorization", "content-type"])
            if (typeof req.headers[k] === "string") headers[k] = req.headers[k];
          const upstream = await client(server.url).request(req.method ?? "GET", req.url ?? "/", {
            headers,
            body: body.length > 0 ? Buffer.concat(body) : undefined,
          });
          const data = upstream.body;
          if (isAppend && n % 4 === 3) {
            // The server stored the bytes; the agent never hears so.
            failures.answerLost++;
            req.socket.destroy();
            return;
          }
          res
            .writeHead(upstream.status, {
              "content-type": String(upstream.headers["content-type"] ?? "application/octet-stream"),
            })
            .end(data);
        })().catch(() => res.destroy()),
    );
  });
  await new Promise<void>((r) => proxy.listen(0, "127.0.0.1", r));
  proxyUrl = `http://127.0.0.1:${(proxy.address() as AddressInfo).port}`;
});
after(async () => {
  await new Promise((r) => proxy?.close(r));
  await server?.stop();
});

test("a log streamed through failing appends arrives whole, in order, once", async () => {
  await server.api(routes.createPool, { body: { name: "logs" } });
  const { session } = await registerAgent(server, "logs", "log-writer");
  const { runId } = await queueRun(
    server,
    "logs",
    "logs",
    rawTarGz([{ path: "main.tf", content: 'resource "terraform_data" "x" {}\n' }]),
  );
  const job = (await call(server, routes.pollJob, session, { query: { wait: 1000 } })).body.job;
  assert.equal(
    (await call(server, routes.startJob, job.jobToken, { params: { id: job.jobId }, body: { starter: "test" } }))
      .status,
    200,
  );

  const log = new LogStream(new AgentClient(proxyUrl).job(job.jobId, job.jobToken));
  let expected = "";
  for (let i = 0; i < 40_000; i++) {
    const line = `line ${i} ${"x".repeat(i % 97)}\n`;
    expected += line;
    log.write(line);
    // Let sends interleave with writing, as terraform's output does.
    if (i % 2_000 === 0) await new Promise((r) => setTimeout(r, 30));
  }
  await log.close();
  assert.equal(log.acknowledged, Buffer.byteLength(expected));
  assert.ok(failures.refused > 0 && failures.answerLost > 0, `the network did fail (${JSON.stringify(failures)})`);

  const stored = (
    await client(server.url, server.adminToken).call(routes.runLogs, {
      params: { id: runId },
      query: { phase: "plan", limit: 8388608 },
    })
  ).toString("utf8");
  assert.equal(stored.length, expected.length, "no byte lost or doubled");
  assert.ok(stored === expected, "every line in order");
});
