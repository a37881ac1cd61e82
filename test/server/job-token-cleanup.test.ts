import assert from "node:assert/strict";
import { after, before, test } from "node:test";
import { routes } from "@drover/protocol";
import { rawTarGz } from "../support/archives.js";
import { call, queueRun, registerAgent } from "../support/agent-client.js";
import { eventually } from "../support/fault-runs.js";
import { startTestServer, type TestServer } from "../support/server.js";

// The server's sweeper deletes job tokens once they have been retired for the retention
// (decision 0022; the store conformance suite checks the retention itself on both databases).
// Here the retention is zero, so a finished job's token is soon unknown rather than "finished".

let server: TestServer;
before(async () => {
  server = await startTestServer({ DROVER_LEASE_TTL_SECONDS: "1" }, { retiredJobTokenRetentionMs: 0 });
  await server.api(routes.createPool, { body: { name: "sweep" } });
});
after(() => server?.stop());

test("the sweeper deletes a finished job's retired token: the token goes from working to unknown", async () => {
  const { session } = await registerAgent(server, "sweep", "sweeper-agent");
  await queueRun(server, "sweep", "sweep-ws", rawTarGz([{ path: "main.tf", content: "" }]), { planOnly: true });
  const job = (await call(server, routes.pollJob, session, { query: { wait: 5000 } })).body.job;
  assert.ok(job, "a job to claim");
  const params = { id: job.jobId as string };
  assert.equal((await call(server, routes.startJob, job.jobToken, { params, body: { starter: "test" } })).status, 200);
  assert.equal((await call(server, routes.jobHeartbeat, job.jobToken, { params })).status, 200);
  assert.equal((await call(server, routes.finishJob, job.jobToken, { params, body: { outcome: "succeeded" } })).status, 204);
  await eventually("the retired token to be deleted", async () => {
    const res = await call(server, routes.jobHeartbeat, job.jobToken, { params });
    assert.ok(res.status === 409 || res.status === 401 || res.status === 410, JSON.stringify(res.body));
    return res.body.error === "unauthorized" ? true : undefined;
  });
});
