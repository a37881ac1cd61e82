// Kubernetes job mode brings its engine in the runner image: a workspace's engineVersion is
// checked against it, so a run never executes a version the workspace did not ask for.
import assert from "node:assert/strict";
import { after, before, test } from "node:test";
import { runLog, startStack, writeConfig, type Stack } from "../support/stack.js";
import type { Proc } from "../support/processes.js";
import { fastTimings, startTestCluster, type TestCluster } from "./cluster.js";
import { agentRegistered, createAgentTask, podWorker, prepareNamespace, startJobModeController, terraformRunner } from "./agents.js";
import { routes } from "@drover/protocol";

const ns = "drover";
let cluster: TestCluster;
let stack: Stack;
let controller: Proc;

before(async () => {
  cluster = await startTestCluster({ timings: fastTimings });
  stack = await startStack();
  await prepareNamespace(cluster, ns);
  await createAgentTask(cluster, ns, "task-template", [podWorker(), terraformRunner(stack)]);
  controller = startJobModeController(cluster, stack, { ns, name: "engine-ctl" });
  await agentRegistered(stack, "engine-ctl");
});

after(async () => {
  await controller?.stop("SIGKILL");
  await stack?.stop();
  await cluster?.close();
});

test("job mode: a version the runner image's terraform does not satisfy fails the run with the reason, nothing run; one it satisfies runs", async () => {
  await stack.server.api(routes.createWorkspace, { body: { name: "k8s-other", pool: stack.pool, engineVersion: "0.0.1" } });
  const dir = writeConfig(stack.dir, "k8s-other", { "main.tf": 'resource "terraform_data" "a" {}\n' });
  const runId = await stack.startRun(dir, "k8s-other", ["--plan-only"]);
  const run = await stack.waitForRun(runId, ["errored", "planned_and_finished"], 120_000);
  assert.equal(run.status, "errored");
  assert.match(run.errorMessage, /^engine_unavailable: the runner's terraform is \d+\.\d+\.\d+, but the workspace asks for 0\.0\.1; nothing was run: use a runner image with that version/);
  assert.doesNotMatch(await runLog(stack.server, runId, "plan"), /\$ terraform init/);

  await stack.server.api(routes.createWorkspace, { body: { name: "k8s-ok", pool: stack.pool, engineVersion: ">= 1.0, < 100.0" } });
  const ok = await stack.startRun(writeConfig(stack.dir, "k8s-ok", { "main.tf": 'resource "terraform_data" "a" {}\n' }), "k8s-ok", ["--plan-only"]);
  const done = await stack.waitForRun(ok, ["errored", "planned_and_finished"], 120_000);
  assert.equal(done.status, "planned_and_finished", `${done.errorMessage}\n${controller.output()}`);
});
