import assert from "node:assert/strict";
import { after, before, test } from "node:test";
import { rawTarGz } from "../support/archives.js";
import { createTestDatabase, type TestDatabase } from "../support/databases.js";
import { callOk } from "../support/fault-runs.js";
import { spawnDrover, type Proc } from "../support/processes.js";
import { routes } from "@drover/protocol";

// Several server processes on one PostgreSQL: no job is handed out twice, and a job queued
// through one process wakes pollers waiting on the other (LISTEN/NOTIFY).

const admin = "drv_u_multi-admin.0123456789abcdefghij0123456789ab";
let database: TestDatabase;
const servers: Proc[] = [];
const urls: string[] = [];

before(async () => {
  database = await createTestDatabase("postgres");
  for (let i = 0; i < 2; i++) {
    const proc = spawnDrover(["server", "--port", "0", "--database-url", database.url], {
      ...process.env,
      DROVER_ADMIN_TOKEN: admin,
      DROVER_LOG_LEVEL: "warn",
      DROVER_LEASE_TTL_SECONDS: "600",
    });
    servers.push(proc);
    urls.push((await proc.waitFor(/listening on (http:\/\/\S+)/))[1]!);
  }
});

after(async () => {
  await Promise.all(servers.map((s) => s.stop()));
  await database?.drop();
});

test("two servers, 200 jobs, 20 competing pollers: every job handed out exactly once", async () => {
  const [a, b] = urls as [string, string];
  await callOk(a, routes.createPool, admin, { body: { name: "shared" } });
  const pollers = await Promise.all(
    Array.from({ length: 20 }, async (_, i) => {
      const url = i % 2 === 0 ? a : b;
      const { token } = await callOk(url, routes.createPoolToken, admin, { params: { pool: "shared" }, body: {} });
      const reg = await callOk(url, routes.register, token, {
        body: { name: `poller-${i}`, version: "t", driver: "local", capacity: 100 },
      });
      return { url, session: reg.sessionToken as string };
    }),
  );

  const total = 200;
  const claims: string[] = [];
  const deadline = Date.now() + 120_000;
  // Pollers wait first (so wake-ups matter), then the jobs are queued through both servers.
  const polling = pollers.map(async (p) => {
    while (claims.length < total && Date.now() < deadline) {
      const res = await callOk(p.url, routes.pollJob, p.session, { query: { wait: 2000 } });
      if (res.job) claims.push(res.job.jobId as string);
    }
  });

  const archive = rawTarGz([{ path: "main.tf", content: "" }]);
  for (let i = 0; i < total; i++) {
    const url = i % 2 === 0 ? a : b;
    const name = `ws-${i}`;
    await callOk(url, routes.createWorkspace, admin, { body: { name, pool: "shared" } });
    const cv = await callOk(url, routes.uploadConfiguration, admin, { params: { ws: name }, body: archive });
    await callOk(url, routes.createRun, admin, { body: { workspace: name, configurationVersionId: cv.id } });
  }
  await Promise.all(polling);

  assert.equal(claims.length, total, "every queued job was handed out");
  assert.equal(new Set(claims).size, total, "no job was handed out twice");
  const runs = await callOk(a, routes.listRuns, admin, { query: { limit: 1000 } });
  for (const run of runs.items) {
    const jobs = await callOk(b, routes.listRunJobs, admin, { params: { id: run.id } });
    assert.equal(jobs.items[0].attempt, 1, `job of ${run.id} claimed once`);
    assert.equal(jobs.items[0].status, "assigned");
  }
});
