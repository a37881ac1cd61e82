import assert from "node:assert/strict";
import { AgentClient, LogStream } from "@drover/agent";
import { after, before, test } from "node:test";
import { jobTakenAway, routes } from "@drover/protocol";
import { call, queueRun, registerAgent } from "../support/agent-client.js";
import { rawTarGz } from "../support/archives.js";
import { eventually } from "../support/fault-runs.js";
import { until } from "../support/marked-processes.js";
import { startTestServer, type TestServer } from "../support/server.js";

// A job's log when the real server no longer knows the job's token (its tokens purged, here at
// once: DROVER_JOB_TOKEN_RETENTION_SECONDS=0): the refused append is handed to the log's owner,
// which abandons the log; nothing is sent after that, and close() does not wait or throw.

let server: TestServer;
before(async () => {
  // The sweeper starts one lease after the server does: a short lease, for the job is finished at once.
  server = await startTestServer({ DROVER_LEASE_TTL_SECONDS: "2", DROVER_JOB_TOKEN_RETENTION_SECONDS: "0" });
  await server.api(routes.createPool, { body: { name: "purge" } });
});
after(async () => {
  await server?.stop();
});

/** A job claimed, started and finished on the server, whose token the sweeper has since deleted. */
async function purgedJob(): Promise<{ jobId: string; jobToken: string }> {
  const { session } = await registerAgent(server, "purge", "log-agent");
  await queueRun(server, "purge", "purge-ws", rawTarGz([{ path: "main.tf", content: "" }]), { planOnly: true });
  const job = (await call(server, routes.pollJob, session, { query: { wait: 5000 } })).body.job;
  assert.ok(job, "a job to claim");
  const params = { id: job.jobId as string };
  assert.equal((await call(server, routes.startJob, job.jobToken, { params, body: { starter: "test" } })).status, 200);
  assert.equal(
    (await call(server, routes.finishJob, job.jobToken, { params, body: { outcome: "succeeded" } })).status,
    204,
  );
  await eventually("the job's token to be deleted", async () =>
    (await call(server, routes.jobHeartbeat, job.jobToken, { params })).body.error === "unauthorized"
      ? true
      : undefined,
  );
  return { jobId: job.jobId, jobToken: job.jobToken };
}

test("an append refused with 401 goes to the log's owner once; abandoned, the log sends nothing more and closes at once", async () => {
  const { jobId, jobToken } = await purgedJob();
  const agent = new AgentClient(server.url);
  const job = agent.job(jobId, jobToken);
  let appends = 0;
  const counted = {
    appendLog: (offset: number, data: Buffer, signal?: AbortSignal) => {
      appends++;
      return job.appendLog(offset, data, signal);
    },
  };
  const refusals: unknown[] = [];
  const log: LogStream = new LogStream(counted, {
    onRefused: (err) => {
      refusals.push(err);
      log.abandon();
    },
  });
  log.write("hello\n");
  await until("the append to be refused", () => refusals.length > 0);
  assert.equal(refusals.length, 1);
  assert.deepEqual(jobTakenAway(refusals[0]), { why: "forgotten" });
  const sent = appends;
  log.write("more\n");
  await log.close();
  assert.equal(appends, sent, "nothing is sent once the log is abandoned");
  assert.equal(log.unsent, "hello\nmore\n".length);
  await agent.dispatcher.close();
});
