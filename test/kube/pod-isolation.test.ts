import assert from "node:assert/strict";
import { randomBytes } from "node:crypto";
import { writeFileSync } from "node:fs";
import { join } from "node:path";
import { after, before, test } from "node:test";
import { runLog, startStack, type Stack } from "../support/stack.js";
import type { Proc } from "../support/processes.js";
import { fastTimings, startTestCluster, type TestCluster } from "./cluster.js";
import {
  agentRegistered,
  createAgentTask,
  fakeExecLoop,
  podWorker,
  prepareNamespace,
  runnerImage,
  startJobModeController,
} from "./agents.js";
import { routes } from "@drover/protocol";

// Job mode's per-pod worker shares its exec and run emptyDirs with the runner container the
// same way a node worker shares a run's directory (decision 0009): a link the run plants at
// steps/N/output must not ship a file of the worker container into the run log.

const ns = "drover-pod-isolation";
let cluster: TestCluster;
let stack: Stack;
let controller: Proc;
let secret: string;

// The attacking runner: links steps/1/output to a file only the worker container should read.
const attacker = fakeExecLoop(`    [ "$n" = 1 ] && ln -s "$SECRET" "$s/output"`);

before(async () => {
  cluster = await startTestCluster({ timings: fastTimings });
  stack = await startStack();
  secret = `WORKER-SECRET-${randomBytes(8).toString("hex")}`;
  const secretPath = join(stack.dir, "worker-only");
  writeFileSync(secretPath, secret, { mode: 0o600 });
  const script = join(stack.dir, "attacker.sh");
  writeFileSync(script, attacker);
  await prepareNamespace(cluster, ns);
  await createAgentTask(cluster, ns, "attack", [
    podWorker(),
    { name: "runner", image: runnerImage, command: ["/bin/sh", script], env: [{ name: "SECRET", value: secretPath }] },
  ]);
  controller = startJobModeController(cluster, stack, { ns, name: "pod-iso-ctl", template: "attack" });
  await agentRegistered(stack, "pod-iso-ctl");
});

after(async () => {
  await controller?.stop("SIGKILL");
  await stack?.stop();
  await cluster?.close();
});

test("job mode: a link planted at steps/N/output does not ship the worker container's files into the run log", async () => {
  assert.equal(
    (await stack.server.api(routes.createWorkspace, { body: { name: "pod-iso", pool: stack.pool } })).status,
    201,
  );
  const dir = join(stack.dir, "cfg");
  const { mkdirSync } = await import("node:fs");
  mkdirSync(dir);
  writeFileSync(join(dir, "main.tf"), 'resource "terraform_data" "x" {}\n');
  const runId = await stack.startRun(dir, "pod-iso");
  const run = await stack
    .waitForRun(runId, ["planned", "errored", "canceled", "planned_and_finished"], 60_000)
    .catch((err: Error) => {
      throw new Error(`${err.message}\ncontroller:\n${controller.output()}`);
    });
  const log = await runLog(stack.server, runId, "plan");
  assert.equal(run.status, "errored", `${log}\n${controller.output()}`);
  assert.match(run.errorMessage ?? "", /refused .*steps\/1\/output: it is a symbolic link/);
  assert.ok(!log.includes(secret) && !JSON.stringify(run).includes(secret), "the worker's file is not in the run");
});
