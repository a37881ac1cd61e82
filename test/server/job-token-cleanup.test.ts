import assert from "node:assert/strict";
import { after, before, test } from "node:test";
import { routes } from "@drover/protocol";
import { loadServerConfig } from "@drover/server";
import { rawTarGz } from "../support/archives.js";
import { call, queueRun, registerAgent } from "../support/agent-client.js";
import { eventually } from "../support/fault-runs.js";
import { startTestServer, type TestServer } from "../support/server.js";

// The server's sweeper deletes job tokens once they have been retired for
// DROVER_JOB_TOKEN_RETENTION_SECONDS (decision 0022; the store conformance suite checks the
// retention itself on both databases). With zero, a finished job's token is soon unknown rather
// than "finished".

let zero: TestServer;
let kept: TestServer;
before(async () => {
  zero = await startTestServer({ DROVER_LEASE_TTL_SECONDS: "1", DROVER_JOB_TOKEN_RETENTION_SECONDS: "0" });
  kept = await startTestServer({ DROVER_LEASE_TTL_SECONDS: "1" });
  for (const s of [zero, kept]) await s.api(routes.createPool, { body: { name: "sweep" } });
});
after(async () => {
  await zero?.stop();
  await kept?.stop();
});

/** Runs one plan-only job to its end on `server`; returns its token and the call that uses it. */
async function finishedJob(server: TestServer) {
  const { session } = await registerAgent(server, "sweep", "sweeper-agent");
  await queueRun(server, "sweep", "sweep-ws", rawTarGz([{ path: "main.tf", content: "" }]), { planOnly: true });
  const job = (await call(server, routes.pollJob, session, { query: { wait: 5000 } })).body.job;
  assert.ok(job, "a job to claim");
  const params = { id: job.jobId as string };
  assert.equal((await call(server, routes.startJob, job.jobToken, { params, body: { starter: "test" } })).status, 200);
  assert.equal((await call(server, routes.jobHeartbeat, job.jobToken, { params })).status, 200);
  assert.equal(
    (await call(server, routes.finishJob, job.jobToken, { params, body: { outcome: "succeeded" } })).status,
    204,
  );
  return () => call(server, routes.jobHeartbeat, job.jobToken, { params });
}

test("DROVER_JOB_TOKEN_RETENTION_SECONDS=0: the sweeper deletes a finished job's retired token, which goes from working to unknown", async () => {
  const heartbeat = await finishedJob(zero);
  await eventually("the retired token to be deleted", async () => {
    const res = await heartbeat();
    assert.ok(res.status === 409 || res.status === 401 || res.status === 410, JSON.stringify(res.body));
    return res.body.error === "unauthorized" ? true : undefined;
  });
});

test("the default retention is a day: a finished job's token still tells a late caller the job finished", async () => {
  assert.equal(loadServerConfig({ env: {} }).jobTokenRetentionMs, 86_400_000);
  const heartbeat = await finishedJob(kept);
  const res = await heartbeat();
  assert.equal(res.body.error, "job_finished", JSON.stringify(res.body));
});

test("DROVER_JOB_TOKEN_RETENTION_SECONDS refuses a negative or fractional value", () => {
  assert.throws(
    () => loadServerConfig({ env: { DROVER_JOB_TOKEN_RETENTION_SECONDS: "-1" } }),
    /DROVER_JOB_TOKEN_RETENTION_SECONDS/,
  );
  assert.throws(
    () => loadServerConfig({ env: { DROVER_JOB_TOKEN_RETENTION_SECONDS: "1.5" } }),
    /DROVER_JOB_TOKEN_RETENTION_SECONDS/,
  );
  assert.equal(
    loadServerConfig({ env: { DROVER_JOB_TOKEN_RETENTION_SECONDS: "3600" } }).jobTokenRetentionMs,
    3_600_000,
  );
});
