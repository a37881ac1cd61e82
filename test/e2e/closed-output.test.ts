import assert from "node:assert/strict";
import { execFile } from "node:child_process";
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { after, before, test } from "node:test";
import { promisify } from "node:util";
import { routes } from "@drover/protocol";
import { droverBin, freePort, spawnDrover, type Proc } from "../support/processes.js";
import { pollWait } from "../support/poll.js";
import { routeCall } from "../support/typed-api.js";
import { startStack, writeConfig, type Stack } from "../support/stack.js";

// A Drover process whose standard output nobody reads any more (`drover server | head`, a dead
// `tee`, a closed journald pipe) still stops on SIGTERM and SIGINT; a user command whose reader
// has gone (`drover run logs … | head`) ends quietly with exit 0, as git and kubectl do.

/** Generous: a stop on a loaded 2-core machine is slow; a process that ignores the signal never stops. */
const stopDeadlineMs = 120_000;

let stack: Stack;
let dir: string;
before(async () => {
  stack = await startStack();
  dir = mkdtempSync(join(tmpdir(), "drover-closed-output-"));
});
after(async () => {
  await stack?.stop();
  if (dir) rmSync(dir, { recursive: true, force: true });
});

/** Closes the read end of the process's stdout before it has written anything: every write of it fails (EPIPE). */
function closeStdout(proc: Proc): void {
  proc.child.stdout?.destroy();
}

/** Closes stdout and stderr, as a dying `2>&1 | tee` or journald stream does. */
function closeOutputs(proc: Proc): void {
  closeStdout(proc);
  proc.child.stderr?.destroy();
}

/** Sends `signal` and resolves with how the process ended, or fails once the deadline has passed. */
async function stopWithin(proc: Proc, signal: NodeJS.Signals): Promise<{ code: number | null }> {
  proc.child.kill(signal);
  let timer: NodeJS.Timeout | undefined;
  const late = new Promise<never>((_, reject) => {
    timer = setTimeout(
      () => reject(new Error(`still running ${stopDeadlineMs} ms after ${signal}:\n${proc.output()}`)),
      stopDeadlineMs,
    );
  });
  try {
    return await Promise.race([proc.exited, late]);
  } finally {
    clearTimeout(timer);
  }
}

for (const signal of ["SIGTERM", "SIGINT"] as const) {
  test(`a server whose stdout is closed serves, then stops on ${signal}`, async () => {
    const port = await freePort();
    // A fresh data directory: the server prints the generated admin token on stdout, into the closed pipe.
    const server = spawnDrover(["server", "--port", String(port), "--data-dir", join(dir, `server-${signal}`)], {
      ...process.env,
      DROVER_LOG_LEVEL: "info",
    });
    closeStdout(server);
    try {
      const url = `http://127.0.0.1:${port}`;
      for (let attempt = 0; ; attempt++) {
        const answered = await routeCall(url, routes.healthz).then(
          (r) => r.status === 200,
          () => false,
        );
        if (answered) break;
        assert.equal(server.child.exitCode, null, `the server serves on:\n${server.output()}`);
        if (attempt > 1200) assert.fail(`the server did not answer on ${url}:\n${server.output()}`);
        await pollWait(attempt);
      }
      const exit = await stopWithin(server, signal);
      assert.equal(exit.code, 0, server.output());
    } finally {
      await server.stop("SIGKILL");
    }
  });

  test(`an agent whose stdout and stderr are closed runs, then stops on ${signal}`, async () => {
    const name = `closed-${signal.toLowerCase()}`;
    const agent = spawnDrover(["agent", "run"], {
      ...stack.baseEnv,
      DROVER_TOKEN: stack.poolToken,
      DROVER_AGENT_NAME: name,
      DROVER_AGENT_DATA_DIR: join(dir, name),
      DROVER_AGENT_HEALTH_PORT: "0",
      // Its log lines, one per event, go to stderr.
      DROVER_AGENT_LOG_FORMAT: "plain",
    });
    closeOutputs(agent);
    try {
      for (let attempt = 0; ; attempt++) {
        const listed = await stack.server.api(routes.listAgents, { query: { pool: stack.pool } });
        if (listed.body.items.some((a: any) => a.name === name && a.status !== "offline")) break;
        assert.equal(agent.child.exitCode, null, `the agent runs on:\n${agent.output()}`);
        if (attempt > 1200) assert.fail(`agent ${name} did not register:\n${agent.output()}`);
        await pollWait(attempt);
      }
      const exit = await stopWithin(agent, signal);
      assert.equal(exit.code, 0, agent.output());
    } finally {
      await agent.stop("SIGKILL");
    }
  });
}

test("`run logs <run> | head -n 1` prints the first line and exits 0 with nothing on stderr", async () => {
  await stack.startAgent("long-log");
  await stack.server.api(routes.createWorkspace, { body: { name: "long-log", pool: stack.pool, autoApply: true } });
  // Far more than a pipe holds, so the CLI is still writing when head has gone.
  const config = writeConfig(dir, "long-log", {
    "main.tf":
      'resource "terraform_data" "long" {\n' +
      '  provisioner "local-exec" {\n    command = "seq 1 20000 | sed s/^/line-/"\n  }\n}\n',
  });
  const runId = await stack.startRun(config, "long-log");
  await stack.waitForRun(runId, ["applied"]);
  const env = { ...stack.baseEnv, DROVER_TOKEN: stack.server.adminToken };
  // bash with pipefail: the pipeline's status is drover's own when it fails.
  const res = await promisify(execFile)(
    "bash",
    ["-c", 'set -o pipefail; "$0" "$1" run logs "$2" --phase apply | head -n 1', process.execPath, droverBin, runId],
    { env, encoding: "utf8" },
  ).then(
    (r) => ({ code: 0, ...r }),
    (err: { code: number; stdout: string; stderr: string }) => err,
  );
  assert.equal(res.code, 0, res.stderr);
  assert.equal(res.stderr, "");
  assert.equal(res.stdout.split("\n").length, 2, res.stdout);
});
