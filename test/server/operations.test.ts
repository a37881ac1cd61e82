import assert from "node:assert/strict";
import { after, before, test } from "node:test";
import { rawTarGz } from "../support/archives.js";
import { call, queueRun, registerAgent } from "../support/agent-client.js";
import { startTestServer, type TestServer } from "../support/server.js";
import { routes } from "@drover/protocol";
import { client, routeCall } from "../support/typed-api.js";

let server: TestServer;
const archive = rawTarGz([{ path: "main.tf", content: "" }]);

before(async () => {
  server = await startTestServer();
  await server.api(routes.createPool, { body: { name: "ops" } });
});
after(() => server?.stop());

test("/healthz, /readyz and /openapi.json answer without a token", async () => {
  const anonymous = client(server.url);
  const health = await anonymous.call(routes.healthz, {});
  assert.equal(health.status, "ok");
  assert.ok(!Number.isNaN(Date.parse(health.currentTime)));
  assert.equal((await anonymous.call(routes.readyz, {})).status, "ready");
  const doc = (await anonymous.call(routes.openapi, {})) as any;
  assert.equal(doc.openapi, "3.1.0");
  assert.ok(doc.paths[routes.pollJob.path].post, "the agent protocol is described");
  assert.ok(doc.paths[routes.createRun.path].post.requestBody, "request schemas are included");
});

test("/metrics reports queue depth and pending runs per pool, agents by status, runs by state", async () => {
  await registerAgent(server, "ops", "metrics-agent");
  await queueRun(server, "ops", "m1", archive);
  const ws = await server.api(routes.getWorkspace, { params: { ws: "m1" } });
  const cv = await server.api(routes.uploadConfiguration, { params: { ws: "m1" }, body: archive });
  await server.api(routes.createRun, { body: { workspace: ws.body.id, configurationVersionId: cv.body.id } });
  // With a user token: pools by name (an anonymous scrape gets their ids, metrics-cache.test).
  const text = (await client(server.url, server.adminToken).call(routes.metrics, {})).toString("utf8");
  assert.match(text, /drover_queue_depth\{pool="ops"\} 1/);
  assert.match(text, /drover_pending_runs\{pool="ops"\} 1/);
  assert.match(text, /drover_agents\{status="idle"\} 1/);
  assert.match(text, /drover_runs\{state="queued"\} 1/);
  assert.match(text, /drover_http_request_duration_seconds_bucket\{[^}]*route="\/api\/v1\/runs"/);
});

test("long-poll: a job queued while an agent waits is handed over at once, and logs follow live", async () => {
  const { session } = await registerAgent(server, "ops", "waiter");
  // Drain what earlier tests queued so this poll really waits.
  while ((await call(server, routes.pollJob, session, { query: { wait: 0 } })).body.job);
  const polling = call(server, routes.pollJob, session, { query: { wait: 20000 } });
  await new Promise((r) => setTimeout(r, 200));
  const queuedAt = Date.now();
  const { runId } = await queueRun(server, "ops", "live", archive);
  const claimed = await polling;
  assert.equal(claimed.body.job.runId, runId);
  // Half the 20 s wait: tells "woken by the queue event" from "the wait ran out" without
  // depending on how fast a loaded machine answers (a 1 s bound did).
  assert.ok(Date.now() - queuedAt < 10_000, "answered on the queue event, not at the end of the wait");

  const job = claimed.body.job;
  await call(server, routes.startJob, job.jobToken, { params: { id: job.jobId }, body: { starter: "test" } });
  const logs = (query: { phase: "plan" | "apply"; offset: number }) =>
    routeCall(server.url, routes.runLogs, {
      token: server.adminToken,
      params: { id: runId },
      query: { phase: query.phase, offset: query.offset, wait: 20000 },
    });
  const follow = logs({ phase: "plan", offset: 0 });
  await new Promise((r) => setTimeout(r, 200));
  await call(server, routes.appendLog, job.jobToken, {
    params: { id: job.jobId },
    query: { offset: 0 },
    body: Buffer.from("Initializing...\n"),
  });
  const res = await follow;
  assert.equal(res.body, "Initializing...\n");
  assert.equal(res.headers.get("x-drover-log-offset"), "16");
  assert.equal(res.headers.get("x-drover-log-complete"), "false");

  await call(server, routes.finishJob, job.jobToken, {
    params: { id: job.jobId },
    body: { outcome: "failed", message: "boom" },
  });
  const end = await logs({ phase: "plan", offset: 16 });
  assert.equal(end.body, undefined, "no more bytes");
  assert.equal(end.headers.get("x-drover-log-complete"), "true", "a finished job's log says it is complete");
  const apply = await logs({ phase: "apply", offset: 0 });
  assert.equal(
    apply.headers.get("x-drover-log-complete"),
    "true",
    "a phase that never ran is complete once the run ended",
  );
  const run = await server.api(routes.getRun, { params: { id: runId } });
  assert.equal(run.body.status, "errored");
  assert.equal(run.body.errorMessage, "boom");
});
