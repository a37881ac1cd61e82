import assert from "node:assert/strict";
import { after, before, test } from "node:test";
import { rawTarGz } from "../support/archives.js";
import { call, queueRun, registerAgent } from "../support/agent-client.js";
import { startTestServer, type TestServer } from "../support/server.js";

let server: TestServer;
const archive = rawTarGz([{ path: "main.tf", content: "" }]);

before(async () => {
  server = await startTestServer();
  await server.api("POST", "/api/v1/pools", { name: "ops" });
});
after(() => server?.stop());

test("/healthz, /readyz and /openapi.json answer without a token", async () => {
  const health = (await (await fetch(`${server.url}/healthz`)).json()) as any;
  assert.equal(health.status, "ok");
  assert.ok(!Number.isNaN(Date.parse(health.currentTime)));
  assert.equal((await fetch(`${server.url}/readyz`)).status, 200);
  const doc = (await (await fetch(`${server.url}/openapi.json`)).json()) as any;
  assert.equal(doc.openapi, "3.1.0");
  assert.ok(doc.paths["/api/agent/v1/jobs/next"].post, "the agent protocol is described");
  assert.ok(doc.paths["/api/v1/runs"].post.requestBody, "request schemas are included");
});

test("/metrics reports queue depth and pending runs per pool, agents by status, runs by state", async () => {
  await registerAgent(server, "ops", "metrics-agent");
  await queueRun(server, "ops", "m1", archive);
  const ws = await server.api("GET", "/api/v1/workspaces/m1");
  const cv = await server.api("POST", `/api/v1/workspaces/m1/configuration-versions`, archive, { "content-type": "application/gzip" });
  await server.api("POST", "/api/v1/runs", { workspace: ws.body.id, configurationVersionId: cv.body.id });
  const text = await (await fetch(`${server.url}/metrics`)).text();
  assert.match(text, /drover_queue_depth\{pool="ops"\} 1/);
  assert.match(text, /drover_pending_runs\{pool="ops"\} 1/);
  assert.match(text, /drover_agents\{status="idle"\} 1/);
  assert.match(text, /drover_runs\{state="queued"\} 1/);
  assert.match(text, /drover_http_request_duration_seconds_bucket\{[^}]*route="\/api\/v1\/runs"/);
});

test("long-poll: a job queued while an agent waits is handed over at once, and logs follow live", async () => {
  const { session } = await registerAgent(server, "ops", "waiter");
  // Drain what earlier tests queued so this poll really waits.
  while ((await call(server, "POST", "/api/agent/v1/jobs/next?wait=0", session)).body.job);
  const polling = call(server, "POST", "/api/agent/v1/jobs/next?wait=20000", session);
  await new Promise((r) => setTimeout(r, 200));
  const queuedAt = Date.now();
  const { runId } = await queueRun(server, "ops", "live", archive);
  const claimed = await polling;
  assert.equal(claimed.body.job.runId, runId);
  // Half the 20 s wait: tells "woken by the queue event" from "the wait ran out" without
  // depending on how fast a loaded machine answers (a 1 s bound did).
  assert.ok(Date.now() - queuedAt < 10_000, "answered on the queue event, not at the end of the wait");

  const job = claimed.body.job;
  await call(server, "POST", `/api/agent/v1/jobs/${job.jobId}/start`, job.jobToken);
  const auth = { authorization: `Bearer ${server.adminToken}` };
  const follow = fetch(`${server.url}/api/v1/runs/${runId}/logs?phase=plan&offset=0&wait=20000`, { headers: auth });
  await new Promise((r) => setTimeout(r, 200));
  await call(server, "POST", `/api/agent/v1/jobs/${job.jobId}/logs?offset=0`, job.jobToken, Buffer.from("Initializing...\n"));
  const res = await follow;
  assert.equal(await res.text(), "Initializing...\n");
  assert.equal(res.headers.get("x-drover-log-offset"), "16");
  assert.equal(res.headers.get("x-drover-log-complete"), "false");

  await call(server, "POST", `/api/agent/v1/jobs/${job.jobId}/finish`, job.jobToken, { outcome: "failed", message: "boom" });
  const end = await fetch(`${server.url}/api/v1/runs/${runId}/logs?phase=plan&offset=16&wait=20000`, { headers: auth });
  assert.equal(await end.text(), "");
  assert.equal(end.headers.get("x-drover-log-complete"), "true", "a finished job's log says it is complete");
  const apply = await fetch(`${server.url}/api/v1/runs/${runId}/logs?phase=apply&offset=0&wait=20000`, { headers: auth });
  assert.equal(apply.headers.get("x-drover-log-complete"), "true", "a phase that never ran is complete once the run ended");
  const run = await server.api("GET", `/api/v1/runs/${runId}`);
  assert.equal(run.body.status, "errored");
  assert.equal(run.body.errorMessage, "boom");
});
