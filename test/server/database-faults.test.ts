import assert from "node:assert/strict";
import { mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { after, before, describe, test } from "node:test";
import type { Proc } from "../support/processes.js";
import {
  assertRanOnce,
  assertWholeTicks,
  call,
  callOk,
  eventually,
  gatedApplyConfig,
  phaseLog,
  startAgentProc,
  startGatedRun,
  startServerProc,
  waitForRunStatus,
  waitForTicks,
  type ServerProc,
} from "../support/fault-runs.js";
import { startPrivatePostgres, type PrivatePostgres } from "../support/private-postgres.js";
import { routes, messageOf } from "@drover/protocol";

// PostgreSQL restarted, its backends terminated, or stopped for a while under two server
// processes with a real run applying and agents long-polling: both servers stay up, the run
// completes in one attempt per job, and its log holds every line once.

const admin = "drv_u_dbfaults-admin.0123456789abcdefghij0123456789ab";
const pool = "faults";
/** The acceptance test asks for 30 s; DROVER_TEST_DB_OUTAGE_SECONDS shortens it for local runs. */
const outageSeconds = Number(process.env.DROVER_TEST_DB_OUTAGE_SECONDS ?? 30);
const leaseTtlSeconds = 10;

let cluster: PrivatePostgres;
let dir: string;
const servers: ServerProc[] = [];
const agents: Proc[] = [];
let poolToken: string;

before(async () => {
  cluster = await startPrivatePostgres();
  const url = await cluster.createDatabase("drover_faults");
  dir = mkdtempSync(join(tmpdir(), "drover-dbfaults-"));
  for (const name of ["a", "b"]) {
    servers.push(
      await startServerProc({
        DROVER_DATABASE_URL: url,
        DROVER_DATA_DIR: join(dir, `server-${name}`),
        DROVER_ADMIN_TOKEN: admin,
        DROVER_LEASE_TTL_SECONDS: String(leaseTtlSeconds),
        DROVER_SWEEP_INTERVAL_MS: "200",
        DROVER_DATABASE_CONNECT_TIMEOUT_SECONDS: "3",
        // Short enough that a halted database is noticed within seconds (client deadline: +5 s).
        DROVER_DATABASE_STATEMENT_TIMEOUT_SECONDS: "3",
      }),
    );
  }
  const [a, b] = servers as [ServerProc, ServerProc];
  await callOk(a.url, routes.createPool, admin, { body: { name: pool } });
  poolToken = (await callOk(a.url, routes.createPoolToken, admin, { params: { pool }, body: {} })).token;
  // One agent per server: whichever takes the job, the other keeps long-polling through the fault.
  for (const [name, server] of [
    ["agent-a", a],
    ["agent-b", b],
  ] as const) {
    agents.push(await startAgentProc({ serverUrl: server.url, adminToken: admin, poolToken, pool, name, dir }));
  }
});

after(async () => {
  await Promise.all(agents.map((a) => a.stop("SIGKILL")));
  await Promise.all(servers.map((s) => s.proc.stop()));
  cluster?.destroy();
  if (dir) rmSync(dir, { recursive: true, force: true });
});

function assertServersUp(): void {
  for (const s of servers) {
    assert.equal(s.proc.child.exitCode, null, `server ${s.url} exited:\n${s.proc.output()}`);
    assert.equal(s.proc.child.signalCode, null);
    assert.doesNotMatch(s.proc.output(), /Unhandled 'error' event|uncaughtException/);
  }
}

async function bothReady(): Promise<void> {
  for (const s of servers)
    await eventually(`${s.url}/readyz`, async () =>
      (await call(s.url, routes.readyz, "")).status === 200 ? true : undefined,
    );
}

/** Both servers LISTEN again (cross-server wake-ups resumed). */
async function bothListening(): Promise<void> {
  await eventually("both servers to LISTEN again", async () => {
    const rows = await cluster.query<{ n: string }>(
      "select count(*) as n from pg_stat_activity where datname = 'drover_faults' and query ilike 'LISTEN drover_events'",
    );
    return Number(rows[0]?.n) === 2 ? true : undefined;
  });
}

/** Runs a gated apply, calls `fault` mid-apply, then checks the run completes whole and once. */
async function survives(name: string, fault: () => Promise<void>): Promise<void> {
  const [a] = servers as [ServerProc, ServerProc];
  const gate = join(dir, `${name}.gate`);
  const marker = join(dir, `${name}.marker`);
  const runId = await startGatedRun(a.url, admin, pool, name, gatedApplyConfig(gate, marker));
  await waitForRunStatus(a.url, admin, runId, ["applying"]);
  await waitForTicks(a.url, admin, runId, 3);

  await fault();
  try {
    await afterFault(runId, gate, marker);
  } catch (err) {
    const tails = [
      ...servers.map((s) => `server ${s.url}:\n${s.proc.output().slice(-3000)}`),
      ...agents.map((p, i) => `agent ${i}:\n${p.output().slice(-4000)}`),
    ];
    throw new Error(`${messageOf(err)}\n${tails.join("\n")}`, { cause: err });
  }
}

async function afterFault(runId: string, gate: string, marker: string): Promise<void> {
  const [a, b] = servers as [ServerProc, ServerProc];
  await bothReady();
  assertServersUp();
  await bothListening();
  // The apply keeps streaming through either server after the fault.
  const before = [...(await phaseLog(b.url, admin, runId, "apply")).matchAll(/: tick-\d+$/gm)].length;
  await waitForTicks(b.url, admin, runId, before + 5);
  writeFileSync(gate, "");
  const run = await waitForRunStatus(b.url, admin, runId, ["applied"]);
  assert.equal(run.status, "applied");
  assertWholeTicks(await phaseLog(a.url, admin, runId, "apply"));
  await assertRanOnce(a.url, admin, runId, marker);
  assertServersUp();
}

describe("PostgreSQL faults under two servers", () => {
  test("pg_ctl restart -m fast mid-apply", async () => {
    await survives("restart", async () => {
      cluster.restart();
    });
  });

  test("pg_terminate_backend of every backend mid-apply", async () => {
    await survives("terminate", async () => {
      const terminated = await cluster.terminateBackends();
      assert.ok(terminated >= 2, `terminated ${terminated} backends (each server's pool and LISTEN connection)`);
    });
  });

  test("a halted database (SIGSTOP: connections open, nothing answers): calls end at their deadline with 503, then resume", async () => {
    const [a] = servers as [ServerProc, ServerProc];
    await survives("halt", async () => {
      cluster.halt();
      try {
        const started = Date.now();
        const res = await call(a.url, routes.listPools, admin);
        assert.equal(res.status, 503, JSON.stringify(res.body));
        assert.equal(res.body.error, "database_unavailable");
        assert.ok(
          Date.now() - started < 20_000,
          `answered after ${Date.now() - started} ms: every call has a deadline`,
        );
        const ready = await eventually("/readyz to report the halted database", async () => {
          const r = await call(a.url, routes.readyz, "");
          return r.status === 503 ? r : undefined;
        });
        assert.equal(ready.body.error, "database_unavailable");
        assertServersUp();
      } finally {
        cluster.resume();
      }
    });
  });

  test(`a ${outageSeconds} s outage mid-apply: 503 database_unavailable with Retry-After, long-polls end, then everything resumes`, async () => {
    const [a, b] = servers as [ServerProc, ServerProc];
    // A poller of its own pool, held in a long-poll on server b when the database goes away.
    await callOk(a.url, routes.createPool, admin, { body: { name: "idle" } });
    const idleToken = (await callOk(a.url, routes.createPoolToken, admin, { params: { pool: "idle" }, body: {} }))
      .token;
    const session = (
      await callOk(b.url, routes.register, idleToken, {
        body: { name: "idle-poller", version: "t", driver: "local", capacity: 1 },
      })
    ).sessionToken;

    await survives("outage", async () => {
      const poll = call(b.url, routes.pollJob, session, { query: { wait: 45000 } });
      // Held on the server (an idle pool has no job for it) before the database goes.
      const early = await Promise.race([
        poll.then(() => "ended"),
        new Promise((r) => setTimeout(() => r("held"), 1_000)),
      ]);
      assert.equal(early, "held", "the long-poll waits while the database is up");
      const stoppedAt = Date.now();
      cluster.stopCluster();

      const ended = await poll;
      const heldMs = Date.now() - stoppedAt;
      assert.equal(ended.status, 503, JSON.stringify(ended.body));
      assert.equal(ended.body.error, "database_unavailable");
      assert.ok(heldMs < 30_000, `the long-poll ended ${heldMs} ms into the outage, not at its 45 s timeout`);

      for (const s of [a, b]) {
        const ready = await eventually(`${s.url}/readyz to report the outage`, async () => {
          const res = await call(s.url, routes.readyz, "");
          return res.status === 503 ? res : undefined;
        });
        assert.equal(ready.body.error, "database_unavailable");
        assert.match(ready.body.message, /^database unavailable( since \S+)?: \S/);
        assert.ok(Number(ready.headers.get("retry-after")) > 0, "readyz carries Retry-After");
      }
      const api = await call(a.url, routes.listRuns, admin, { query: { limit: 1 } });
      assert.equal(api.status, 503);
      assert.equal(api.body.error, "database_unavailable");
      assert.match(api.body.message, /retry/);
      assert.ok(Number(api.headers.get("retry-after")) > 0, "API errors carry Retry-After");
      const agentCall = await call(b.url, routes.agentHeartbeat, session, { body: { runningJobs: 0 } });
      assert.equal(agentCall.status, 503);
      assert.equal(agentCall.body.error, "database_unavailable");

      // The outage outlasts the lease TTL: only the sweeper's pause and grace keep the run alive.
      const left = outageSeconds * 1000 - (Date.now() - stoppedAt);
      if (left > 0) await new Promise((r) => setTimeout(r, left));
      assertServersUp();
      cluster.startCluster();
    });
  });
});
