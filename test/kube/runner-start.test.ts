import assert from "node:assert/strict";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";
import { after, before, test } from "node:test";
import { runLog, startStack, type Stack } from "../support/stack.js";
import type { Proc } from "../support/processes.js";
import { fastTimings, startTestCluster, type TestCluster } from "./cluster.js";
import {
  agentRegistered,
  createAgentTask,
  podWorker,
  prepareNamespace,
  runnerImage,
  startJobModeController,
} from "./agents.js";
import { routes } from "@drover/protocol";

// A runner container that runs but never starts its exec-loop (a wrong entrypoint) writes no
// heartbeat. The pod's worker must not wait for it forever: after
// DROVER_WORKER_RUNNER_START_TIMEOUT_SECONDS the run ends errored, saying why.

const repo = join(dirname(fileURLToPath(import.meta.url)), "..", "..", "..");
const ns = "runner-start";
let cluster: TestCluster;
let stack: Stack;
let controller: Proc | undefined;

before(async () => {
  cluster = await startTestCluster({ timings: fastTimings });
  stack = await startStack();
  await prepareNamespace(cluster, ns);
  await createAgentTask(cluster, ns, "task-template", [
    podWorker([{ name: "DROVER_WORKER_RUNNER_START_TIMEOUT_SECONDS", value: "3" }]),
    // Its entrypoint is not the exec-loop: the container runs, and no step ever will.
    { name: "runner", image: runnerImage, command: ["sleep", "600"] },
  ]);
});

after(async () => {
  await controller?.stop("SIGKILL");
  await stack?.stop();
  await cluster?.close();
});

test("a runner container that never starts its exec-loop ends the run errored after the runner start timeout", async () => {
  controller = startJobModeController(cluster, stack, { ns, name: "runner-start-ctl" });
  const ctl = controller;
  await agentRegistered(stack, "runner-start-ctl");
  await stack.server.api(routes.createWorkspace, { body: { name: ns, pool: stack.pool } });
  const runId = await stack.startRun(join(repo, "examples", "hello"), ns);
  const run = await stack
    .waitForRun(runId, ["errored", "planned", "planned_and_finished", "canceled"], 90_000)
    .catch((e: Error) => assert.fail(`${e.message}\n${ctl.output()}`));
  assert.equal(run.status, "errored");
  assert.match(
    run.errorMessage ?? "",
    /runner never started: the runner container's exec-loop wrote no heartbeat within 3 s \(DROVER_WORKER_RUNNER_START_TIMEOUT_SECONDS\)/,
    `${await runLog(stack.server, runId, "plan")}\n${ctl.output()}`,
  );
});
