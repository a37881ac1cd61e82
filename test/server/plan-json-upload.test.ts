import assert from "node:assert/strict";
import { request } from "node:http";
import { monitorEventLoopDelay } from "node:perf_hooks";
import { after, before, test } from "node:test";
import { routePath, routes } from "@drover/protocol";
import { rawTarGz } from "../support/archives.js";
import { call, queueRun, registerAgent } from "../support/agent-client.js";
import { startTestServer, type TestServer } from "../support/server.js";
import { routeCall } from "../support/typed-api.js";

// Review 2026-11-28 N6: a plan JSON upload is parsed off the event loop, within its own size
// limit, and an upload the job may not make is refused before its body is read.

const mb = 1024 * 1024;
const limitMb = 16;
let server: TestServer;
let session: string;
const archive = rawTarGz([{ path: "main.tf", content: "" }]);
let n = 0;

before(async () => {
  // No heartbeats in these tests: a lease outlives a slow upload on a loaded machine.
  server = await startTestServer({ DROVER_MAX_PLAN_JSON_MB: String(limitMb), DROVER_LEASE_TTL_SECONDS: "900" });
  await server.api(routes.createPool, { body: { name: "pj" } });
  ({ session } = await registerAgent(server, "pj", "pj-agent"));
});
after(() => server?.stop());

/** Queues a run and claims and starts its next job; returns the job and the run. */
async function startedJob(runId?: string) {
  const queued = runId ?? (await queueRun(server, "pj", `pj-ws${++n}`, archive)).runId;
  const polled = await call(server, routes.pollJob, session, { query: { wait: 0 } });
  const job = polled.body.job;
  assert.ok(job, "a job was queued");
  assert.equal(job.runId, queued);
  assert.equal(
    (await call(server, routes.startJob, job.jobToken, { params: { id: job.jobId }, body: { starter: "test" } }))
      .status,
    200,
  );
  return { job: job as { jobId: string; jobToken: string; phase: string }, runId: queued };
}

/** A plan JSON of about `mbytes` MB whose bulk is small objects, slow to parse and to serialise. */
function bigPlanJson(mbytes: number): Buffer {
  const item = '{"address":"a","n":0},';
  const items = item.repeat(Math.floor((mbytes * mb) / item.length));
  return Buffer.from(`{"format_version":"1.2","resource_changes":[],"padding":[${items}{}]}`);
}

interface Answer {
  status: number;
  body: any;
}

/**
 * Sends headers declaring `length` bytes and then only `pieces` (node:http: the test decides
 * how much of the body is ever sent); resolves with the answer.
 */
function sendPartly(path: string, token: string, length: number, pieces: Iterable<Buffer>): Promise<Answer> {
  return new Promise((resolve, reject) => {
    const req = request(server.url + path, {
      method: "PUT",
      headers: {
        authorization: `Bearer ${token}`,
        "content-type": "application/json",
        "content-length": String(length),
      },
    });
    req.on("response", (res) => {
      const parts: Buffer[] = [];
      res.on("data", (d: Buffer) => parts.push(d));
      res.on("end", () => {
        req.destroy();
        const text = Buffer.concat(parts).toString("utf8");
        resolve({ status: res.statusCode ?? 0, body: text ? JSON.parse(text) : undefined });
      });
    });
    req.on("error", reject);
    req.flushHeaders();
    for (const p of pieces) req.write(p);
  });
}

const planJsonPath = (jobId: string) => routePath(routes.uploadPlanJson, { id: jobId });
const storedPlanJson = (runId: string) =>
  routeCall(server.url, routes.runPlan, { token: server.adminToken, params: { id: runId } });

test("a large plan JSON is parsed off the event loop: /healthz answers before the upload does", async () => {
  const { job, runId } = await startedJob();
  const body = bigPlanJson(12);
  const delay = monitorEventLoopDelay({ resolution: 5 });
  delay.enable();
  const started = performance.now();
  let uploadAnswered = false;
  const upload = call(server, routes.uploadPlanJson, job.jobToken, { params: { id: job.jobId }, body }).then((r) => {
    uploadAnswered = true;
    return r;
  });
  // Health checks one after another for as long as the upload is being received and processed.
  let healthBeforeUpload = 0;
  while (!uploadAnswered) {
    const health = await routeCall(server.url, routes.healthz);
    assert.equal(health.status, 200);
    if (!uploadAnswered) healthBeforeUpload++;
  }
  const answer = await upload;
  const uploadMs = performance.now() - started;
  delay.disable();
  assert.equal(answer.status, 200, JSON.stringify(answer.body));
  assert.ok(healthBeforeUpload > 0, "/healthz was answered while the upload was processed");
  // This process is the server: its event loop was never held for a large part of the upload
  // (parsing and serialising it on the loop held it for most of it).
  const longestStallMs = delay.max / 1e6;
  assert.ok(
    longestStallMs < uploadMs / 4,
    `the event loop stalled ${longestStallMs.toFixed(0)} ms of an upload of ${uploadMs.toFixed(0)} ms`,
  );
  const stored = await storedPlanJson(runId);
  assert.equal(stored.status, 200);
  assert.equal(stored.body.format_version, "1.2");
});

test("an over-limit plan JSON gets 413 with the limit, declared or streamed, and nothing is stored", async () => {
  const { job, runId } = await startedJob();
  const declared = await sendPartly(planJsonPath(job.jobId), job.jobToken, (limitMb + 1) * mb, []);
  assert.equal(declared.status, 413);
  assert.equal(declared.body.error, "payload_too_large");
  assert.match(declared.body.message, new RegExp(`the limit is ${limitMb * mb} bytes`));
  const streamed = await call(server, routes.uploadPlanJson, job.jobToken, {
    params: { id: job.jobId },
    body: bigPlanJson(limitMb + 1),
  });
  assert.equal(streamed.status, 413);
  assert.equal(streamed.body.error, "payload_too_large");
  assert.equal((await storedPlanJson(runId)).status, 404, "no plan JSON was stored");
});

test("an apply job's upload of the plan JSON is refused before its body is read", async () => {
  const { job: plan, runId } = await startedJob();
  const planJson = Buffer.from(
    JSON.stringify({ format_version: "1.2", resource_changes: [{ address: "a.b", change: { actions: ["create"] } }] }),
  );
  assert.equal(
    (await call(server, routes.uploadPlanJson, plan.jobToken, { params: { id: plan.jobId }, body: planJson })).status,
    200,
  );
  const finished = await call(server, routes.finishJob, plan.jobToken, {
    params: { id: plan.jobId },
    body: { outcome: "succeeded", planSummary: { add: 1, change: 0, destroy: 0, hasChanges: true } },
  });
  assert.equal(finished.status, 204, JSON.stringify(finished.body));
  assert.equal((await server.api(routes.confirmRun, { params: { id: runId } })).status, 200);
  const { job: apply } = await startedJob(runId);
  assert.equal(apply.phase, "apply");
  // Declared just under the limit, not one byte sent: only a refusal made before reading can answer.
  const unsent = await sendPartly(planJsonPath(apply.jobId), apply.jobToken, (limitMb - 1) * mb, []);
  assert.equal(unsent.status, 403);
  assert.match(unsent.body.message, /only a plan job/);
  // So are a saved plan's providers' schemas.
  const schemasPath = routePath(routes.uploadProviderSchemas, { id: apply.jobId });
  const unsentSchemas = await sendPartly(schemasPath, apply.jobToken, (limitMb - 1) * mb, []);
  assert.equal(unsentSchemas.status, 403);
  assert.match(unsentSchemas.body.message, /only a plan job uploads its run's providers' schemas/);
  // A whole body that is not JSON: refused as forbidden, not as invalid JSON (it was never parsed).
  const whole = await call(server, routes.uploadPlanJson, apply.jobToken, {
    params: { id: apply.jobId },
    body: Buffer.alloc(2 * mb, "x"),
  });
  assert.equal(whole.status, 403, JSON.stringify(whole.body));
  assert.deepEqual(
    (await storedPlanJson(runId)).body,
    JSON.parse(planJson.toString("utf8")),
    "the plan job's JSON stands",
  );
});

test("an apply job may not upload the plan JSON even when its run has none: only the plan job renders it", async () => {
  const { job: plan, runId } = await startedJob();
  const finished = await call(server, routes.finishJob, plan.jobToken, {
    params: { id: plan.jobId },
    body: { outcome: "succeeded", planSummary: { add: 1, change: 0, destroy: 0, hasChanges: true } },
  });
  assert.equal(finished.status, 204, JSON.stringify(finished.body));
  assert.equal((await server.api(routes.confirmRun, { params: { id: runId } })).status, 200);
  const { job: apply } = await startedJob(runId);
  const answer = await call(server, routes.uploadPlanJson, apply.jobToken, {
    params: { id: apply.jobId },
    body: Buffer.from(JSON.stringify({ format_version: "1.2", resource_changes: [] })),
  });
  assert.equal(answer.status, 403, JSON.stringify(answer.body));
  assert.equal((await storedPlanJson(runId)).status, 404, "no plan JSON was stored");
});
