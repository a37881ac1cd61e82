import assert from "node:assert/strict";
import { after, before, test } from "node:test";
import { routes } from "@drover/protocol";
import { rawTarGz } from "../support/archives.js";
import { call, queueRun, registerAgent } from "../support/agent-client.js";
import { startTestServer, type TestServer } from "../support/server.js";
import { readPhaseLog, routeCall } from "../support/typed-api.js";

// Review 2026-11-28 N8: log appends are bounded per token (in flight) and per job (waiting for
// their turn, and stored bytes).

const kib = 1024;
const mib = 1024 * kib;
let server: TestServer;
let session: string;
const archive = rawTarGz([{ path: "main.tf", content: "" }]);
let n = 0;

before(async () => {
  server = await startTestServer({ DROVER_MAX_JOB_LOG_MB: "1", DROVER_LEASE_TTL_SECONDS: "900" });
  await server.api(routes.createPool, { body: { name: "logs" } });
  ({ session } = await registerAgent(server, "logs", "log-agent"));
});
after(() => server?.stop());

async function startedJob() {
  const { runId } = await queueRun(server, "logs", `logs-ws${++n}`, archive);
  const job = (await call(server, routes.pollJob, session, { query: { wait: 0 } })).body.job as {
    jobId: string;
    jobToken: string;
  };
  assert.equal(
    (await call(server, routes.startJob, job.jobToken, { params: { id: job.jobId }, body: { starter: "test" } }))
      .status,
    200,
  );
  return { job, runId };
}

const append = (job: { jobId: string; jobToken: string }, offset: number, body: Buffer) =>
  routeCall(server.url, routes.appendLog, { token: job.jobToken, params: { id: job.jobId }, query: { offset }, body });

test("many concurrent appends with one job token: all but the few the server holds are refused 429 with Retry-After", async () => {
  const { job } = await startedJob();
  // The review's flood at small scale: each ahead of the log's end, so each would be held waiting.
  const flood = await Promise.all(
    Array.from({ length: 40 }, () => append(job, 64 * kib, Buffer.alloc(256 * kib, "x"))),
  );
  const refused = flood.filter((r) => r.status === 429);
  const held = flood.filter((r) => r.status !== 429);
  assert.ok(
    held.length <= 2,
    `at most two appends of the job were held (then log_gap): ${held.map((r) => r.status).join(",")}`,
  );
  for (const r of held) assert.equal(r.body.error, "log_gap");
  assert.equal(refused.length, 40 - held.length);
  for (const r of refused) {
    assert.equal(r.body.error, "too_many_requests");
    assert.equal(r.headers.get("retry-after"), "1");
  }
  // Nothing was stored, and the job's log takes appends in order as before.
  assert.equal((await append(job, 0, Buffer.from("fine\n"))).body.offset, 5);
});

test("a log over DROVER_MAX_JOB_LOG_MB ends with a notice; later appends are acknowledged and dropped, the job goes on", async () => {
  const { job, runId } = await startedJob();
  const chunk = (c: string) => Buffer.alloc(512 * kib, c);
  assert.equal((await append(job, 0, chunk("a"))).body.offset, 512 * kib);
  assert.equal((await append(job, 512 * kib, chunk("b"))).body.offset, mib, "exactly the limit is stored");
  assert.equal((await append(job, mib, chunk("c"))).body.offset, mib + 512 * kib, "acknowledged as the agent counts");
  assert.equal((await append(job, mib + 512 * kib, chunk("d"))).body.offset, 2 * mib);
  const finished = await call(server, routes.finishJob, job.jobToken, {
    params: { id: job.jobId },
    body: { outcome: "succeeded", planSummary: { add: 0, change: 0, destroy: 0, hasChanges: false } },
  });
  assert.equal(finished.status, 204, JSON.stringify(finished.body));
  const log = await readPhaseLog(server.url, server.adminToken, runId, "plan");
  assert.ok(log.startsWith("a".repeat(512 * kib) + "b".repeat(512 * kib)));
  assert.ok(!log.includes("ccc") && !log.includes("ddd"), "bytes past the limit are not stored");
  assert.match(log.slice(mib), /\[drover\] this job's log reached its limit of 1 MiB \(DROVER_MAX_JOB_LOG_MB\)/);
  assert.ok(log.length < mib + 1024, `stored ${log.length} bytes`);
});
