import assert from "node:assert/strict";
import { mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { after, before, test } from "node:test";
import { freePort, type Proc } from "../support/processes.js";
import {
  assertRanOnce,
  assertWholeTicks,
  callOk,
  gatedApplyConfig,
  phaseLog,
  startAgentProc,
  startGatedRun,
  startServerProc,
  waitForRunStatus,
  waitForTicks,
  type ServerProc,
} from "../support/fault-runs.js";
import { routes } from "@drover/protocol";

// The server killed (-9) mid-apply and kept down for twice the lease TTL, then started again on
// the same data: the healthy agent's apply completes, in one attempt, with its whole log.

const admin = "drv_u_restart-admin.0123456789abcdefghij0123456789ab";
const leaseTtlSeconds = 8;
let dir: string;
let env: Record<string, string>;
let server: ServerProc;
let agent: Proc | undefined;

before(async () => {
  dir = mkdtempSync(join(tmpdir(), "drover-restart-"));
  const port = await freePort();
  env = {
    DROVER_DATA_DIR: join(dir, "server"),
    DROVER_PORT: String(port),
    DROVER_ADMIN_TOKEN: admin,
    DROVER_LEASE_TTL_SECONDS: String(leaseTtlSeconds),
    DROVER_SWEEP_INTERVAL_MS: "200",
  };
  server = await startServerProc(env);
});

after(async () => {
  await agent?.stop("SIGKILL");
  await server?.proc.stop();
  if (dir) rmSync(dir, { recursive: true, force: true });
});

test("server kill -9 for twice the lease TTL during an apply: the apply completes and its log is whole", async () => {
  await callOk(server.url, routes.createPool, admin, { body: { name: "restart" } });
  const poolToken = (await callOk(server.url, routes.createPoolToken, admin, { params: { pool: "restart" }, body: {} }))
    .token;
  agent = await startAgentProc({
    serverUrl: server.url,
    adminToken: admin,
    poolToken,
    pool: "restart",
    name: "survivor",
    dir,
  });
  const gate = join(dir, "gate");
  const marker = join(dir, "marker");
  const runId = await startGatedRun(server.url, admin, "restart", "restart", gatedApplyConfig(gate, marker));
  await waitForRunStatus(server.url, admin, runId, ["applying"]);
  await waitForTicks(server.url, admin, runId, 3);

  await server.proc.stop("SIGKILL");
  const downAt = Date.now();
  // The outage is the subject of the test: it must outlast the lease by a whole TTL.
  await new Promise((r) => setTimeout(r, 2 * leaseTtlSeconds * 1000));
  assert.equal(agent.child.exitCode, null, `the agent waits for the server:\n${agent.output()}`);
  server = await startServerProc(env);
  assert.ok(Date.now() - downAt >= 2 * leaseTtlSeconds * 1000);

  // The agent reconnects and keeps streaming; the lease is renewed before the grace ends.
  const ticks = [...(await phaseLog(server.url, admin, runId, "apply")).matchAll(/: tick-\d+$/gm)].length;
  await waitForTicks(server.url, admin, runId, ticks + 5).catch((err: Error) => {
    throw new Error(
      `${err.message}\nagent:\n${agent?.output().slice(-4000)}\nserver:\n${server.proc.output().slice(-3000)}`,
    );
  });
  // Past the grace period (one lease TTL after the start) the lease is still held.
  assert.match(server.proc.output(), /lease expiry waits one lease TTL/);
  await waitForTicks(server.url, admin, runId, ticks + 5 + 5 * leaseTtlSeconds);
  writeFileSync(gate, "");
  const run = await waitForRunStatus(server.url, admin, runId, ["applied"]);
  assert.equal(run.status, "applied");
  const log = await phaseLog(server.url, admin, runId, "apply");
  assertWholeTicks(log);
  assert.doesNotMatch(log, /agent lost/);
  await assertRanOnce(server.url, admin, runId, marker);
  const ws = await callOk(server.url, routes.getWorkspace, admin, { params: { ws: "restart" } });
  assert.equal(ws.stateLocked, false);
});
