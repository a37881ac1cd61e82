import assert from "node:assert/strict";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";
import { after, before, test } from "node:test";
import { runLog, startStack, type Stack } from "../support/stack.js";
import type { Proc } from "../support/processes.js";
import { startOtlpReceiver, type OtlpReceiver } from "../support/otlp-receiver.js";
import { fastTimings, startTestCluster, type TestCluster } from "./cluster.js";
import {
  agentRegistered,
  createAgentTask,
  prepareNamespace,
  runnerImage,
  startJobModeController,
  workerImage,
} from "./agents.js";
import { routes } from "@drover/protocol";

// The controller's trace of the Kubernetes stages reads the pod's events (an API call). A pod
// failure must be reported without waiting for it: here every events list of the namespace
// hangs, and a worker that exits 3 a moment after it started still ends the run errored.

const repo = join(dirname(fileURLToPath(import.meta.url)), "..", "..", "..");
const ns = "stages";
let cluster: TestCluster;
let stack: Stack;
let receiver: OtlpReceiver;
let controller: Proc | undefined;

before(async () => {
  receiver = await startOtlpReceiver();
  cluster = await startTestCluster({ timings: fastTimings });
  stack = await startStack();
  await prepareNamespace(cluster, ns);
  await createAgentTask(cluster, ns, "task-template", [
    { name: "worker", image: workerImage, command: ["sh", "-c", "sleep 1; exit 3"] },
    { name: "runner", image: runnerImage, command: ["sleep", "600"] },
  ]);
});

after(async () => {
  await controller?.stop("SIGKILL");
  await stack?.stop();
  await cluster?.close();
  await receiver?.close();
});

test("a failing pod is reported while the stage tracing's events list still waits for an answer", async () => {
  cluster.stallRequests((method, url) => method === "GET" && url.startsWith(`/api/v1/namespaces/${ns}/events`));
  // A call's deadline far beyond this test: only not waiting on the list lets the report through.
  controller = startJobModeController(cluster, stack, {
    ns,
    name: "stages-ctl",
    env: { DROVER_AGENT_OTLP_ENDPOINT: receiver.url, DROVER_AGENT_KUBERNETES_API_TIMEOUT_SECONDS: "3600" },
  });
  const ctl = controller;
  await agentRegistered(stack, "stages-ctl");
  await stack.server.api(routes.createWorkspace, { body: { name: ns, pool: stack.pool } });
  const runId = await stack.startRun(join(repo, "examples", "hello"), ns);
  const run = await stack
    .waitForRun(runId, ["errored", "planned", "planned_and_finished"], 90_000)
    .catch((e: Error) => assert.fail(`${e.message}\n${ctl.output()}`));
  assert.equal(run.status, "errored");
  assert.match(
    run.errorMessage ?? "",
    /the worker container exited with code 3/,
    await runLog(stack.server, runId, "plan"),
  );
  assert.ok(
    cluster.stalledRequests >= 1,
    `the stage tracing listed the pod's events (and still waits): ${cluster.stalledRequests}\n${ctl.output()}`,
  );
});
