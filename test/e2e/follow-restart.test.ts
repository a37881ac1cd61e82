import assert from "node:assert/strict";
import { mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { after, before, test } from "node:test";
import { routes } from "@drover/protocol";
import {
  assertWholeTicks,
  callOk,
  gatedApplyConfig,
  phaseLog,
  startAgentProc,
  startServerProc,
  waitForRunStatus,
  type ServerProc,
} from "../support/fault-runs.js";
import { freePort, runDrover, spawnDrover, type Proc } from "../support/processes.js";
import { writeConfig } from "../support/stack.js";

// The CLI following a run rides out a restart of the server (stopped with SIGTERM, started again
// on the same port and data): it says so once, resumes the log where it was, and exits with the
// run's result. Past DROVER_CLIENT_RECONNECT_SECONDS it gives up with exit 3 and how to resume.

/** Generous: a plan and the start of an apply on a loaded 2-core machine; it only delays a failure. */
const slowMs = 240_000;
const admin = "drv_u_follow-admin.0123456789abcdefghij0123456789ab";
let dir: string;
let serverEnv: Record<string, string>;
let server: ServerProc;
let agent: Proc | undefined;

before(async () => {
  dir = mkdtempSync(join(tmpdir(), "drover-follow-restart-"));
  serverEnv = {
    DROVER_DATA_DIR: join(dir, "server"),
    DROVER_PORT: String(await freePort()),
    DROVER_ADMIN_TOKEN: admin,
    DROVER_SWEEP_INTERVAL_MS: "200",
  };
  server = await startServerProc(serverEnv);
  await callOk(server.url, routes.createPool, admin, { body: { name: "follow" } });
  const poolToken = (await callOk(server.url, routes.createPoolToken, admin, { params: { pool: "follow" }, body: {} }))
    .token as string;
  agent = await startAgentProc({ serverUrl: server.url, adminToken: admin, poolToken, pool: "follow", name: "a", dir });
});

after(async () => {
  await agent?.stop("SIGKILL");
  await server?.proc.stop("SIGKILL");
  if (dir) rmSync(dir, { recursive: true, force: true });
});

/** The CLI's environment: the admin token, the terraform-free side of a user's shell. */
function cliEnv(extra: Record<string, string>): NodeJS.ProcessEnv {
  const env: NodeJS.ProcessEnv = { ...process.env, DROVER_URL: server.url, DROVER_TOKEN: admin, ...extra };
  env.DROVER_CONFIG_DIR = join(dir, "cli-config");
  return env;
}

/** A `drover` process with its stdout and stderr kept apart (the log on one, notices on the other). */
function spawnCli(args: string[], env: NodeJS.ProcessEnv): { proc: Proc; stdout(): string; stderr(): string } {
  const proc = spawnDrover(args, env);
  let stdout = "";
  let stderr = "";
  proc.child.stdout?.on("data", (d: Buffer) => (stdout += d.toString()));
  proc.child.stderr?.on("data", (d: Buffer) => (stderr += d.toString()));
  return { proc, stdout: () => stdout, stderr: () => stderr };
}

/** Starts the server again if a test left it stopped, so each test starts with one running. */
async function serverRunning(): Promise<void> {
  if (server.proc.child.exitCode === null && server.proc.child.signalCode === null) return;
  server = await startServerProc(serverEnv);
}

/** Stops the server with SIGTERM (a deploy, a restart) and waits until it has exited. */
async function stopServer(): Promise<void> {
  await server.proc.stop("SIGTERM");
}

test("run start keeps following through a server restart: every log line once, the run's own exit code", async () => {
  await serverRunning();
  await callOk(server.url, routes.createWorkspace, admin, { body: { name: "through", pool: "follow" } });
  const gate = join(dir, "gate-through");
  const config = writeConfig(dir, "through", { "main.tf": gatedApplyConfig(gate, join(dir, "marker-through")) });
  const cli = spawnCli(
    ["run", "start", config, "--workspace", "through", "--auto-apply"],
    cliEnv({ DROVER_CLIENT_RECONNECT_SECONDS: "300" }),
  );
  try {
    await cli.proc.waitFor(/: tick-3$/m, slowMs);
    await stopServer();
    await cli.proc.waitFor(/lost the Drover server/, slowMs);
    server = await startServerProc(serverEnv);
    writeFileSync(gate, "");
    const exit = await cli.proc.exited;
    assert.equal(exit.code, 0, cli.stdout() + cli.stderr());

    const runId = cli.stdout().match(/Run (run-\S+) created/)?.[1] ?? "";
    const run = await callOk(server.url, routes.getRun, admin, { params: { id: runId } });
    assert.equal(run.status, "applied");
    // What the CLI printed of the log is the log as stored, each line once: nothing lost, nothing repeated.
    const [plan, apply] = [
      await phaseLog(server.url, admin, runId, "plan"),
      await phaseLog(server.url, admin, runId, "apply"),
    ];
    assertWholeTicks(apply);
    assertWholeTicks(cli.stdout());
    assert.equal(cli.stdout().split(plan).length, 2, "the plan log once:\n" + cli.stdout());
    assert.equal(cli.stdout().split(apply).length, 2, "the apply log once:\n" + cli.stdout());
    const notices = cli.stderr().match(/lost the Drover server/g) ?? [];
    assert.equal(notices.length, 1, cli.stderr());
    assert.match(cli.stderr(), new RegExp(`run ${runId} continues on the agent`));
  } finally {
    await cli.proc.stop("SIGKILL");
    // A failed test frees the agent for the next one.
    writeFileSync(gate, "");
  }
});

test("run logs --follow gives up after DROVER_CLIENT_RECONNECT_SECONDS with exit 3 and how to resume", async () => {
  await serverRunning();
  await callOk(server.url, routes.createWorkspace, admin, { body: { name: "given-up", pool: "follow" } });
  const gate = join(dir, "gate-given-up");
  const config = writeConfig(dir, "given-up", { "main.tf": gatedApplyConfig(gate, join(dir, "marker-given-up")) });
  const started = await runDrover(
    ["run", "start", config, "--workspace", "given-up", "--auto-apply", "--no-follow", "--json"],
    cliEnv({}),
  );
  assert.equal(started.code, 0, started.stderr);
  const runId = (JSON.parse(started.stdout) as { id: string }).id;
  await waitForRunStatus(server.url, admin, runId, ["applying"]);

  const cli = spawnCli(["run", "logs", runId, "--follow"], cliEnv({ DROVER_CLIENT_RECONNECT_SECONDS: "1" }));
  try {
    await cli.proc.waitFor(/: tick-2$/m, slowMs);
    await stopServer();
    const exit = await cli.proc.exited;
    assert.equal(exit.code, 3, cli.stdout() + cli.stderr());
    assert.match(
      cli.stderr(),
      new RegExp(`run ${runId} continues on the agent; resume with \`drover run logs ${runId} --follow\``),
    );
    assert.equal((cli.stderr().match(/lost the Drover server/g) ?? []).length, 1, cli.stderr());
  } finally {
    await cli.proc.stop("SIGKILL");
  }

  // It did go on: with the server back, the resumed follow prints the whole log and the run applies.
  server = await startServerProc(serverEnv);
  writeFileSync(gate, "");
  const resumed = await runDrover(["run", "logs", runId, "--follow"], cliEnv({}));
  assert.equal(resumed.code, 0, resumed.stderr);
  assertWholeTicks(resumed.stdout);
  const run = await callOk(server.url, routes.getRun, admin, { params: { id: runId } });
  assert.equal(run.status, "applied");
});
