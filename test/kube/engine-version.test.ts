// Kubernetes job mode brings its engine in the runner image: a workspace's engineVersion is
// checked against it, so a run never executes a version the workspace did not ask for.
import assert from "node:assert/strict";
import { writeFileSync } from "node:fs";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";
import { after, before, test } from "node:test";
import { runLog, startStack, writeConfig, type Stack } from "../support/stack.js";
import { droverBin, spawnDrover, type Proc } from "../support/processes.js";
import { eventually, fastTimings, kube, prepareDroverNamespace, startTestCluster, type TestCluster } from "./cluster.js";
import { routes } from "@drover/protocol";

const repo = join(dirname(fileURLToPath(import.meta.url)), "..", "..", "..");
const ns = "drover";
let cluster: TestCluster;
let stack: Stack;
let controller: Proc;

before(async () => {
  cluster = await startTestCluster({ timings: fastTimings });
  stack = await startStack();
  const tfrc = join(stack.dir, "runner-terraformrc");
  writeFileSync(tfrc, "");
  await prepareDroverNamespace(cluster, ns, join(repo, "deploy", "kubernetes", "agenttasks.drover.dev.yaml"));
  const runner = { name: "runner", image: "ghcr.io/drover-dev/drover-runner:test", env: [{ name: "TF_CLI_CONFIG_FILE", value: tfrc }, { name: "CHECKPOINT_DISABLE", value: "1" }] };
  const worker = { name: "worker", image: "ghcr.io/drover-dev/drover:test", command: [process.execPath, droverBin], args: ["agent", "worker"] };
  const template = { apiVersion: "drover.dev/v1alpha1", kind: "AgentTask", metadata: { name: "task-template", namespace: ns }, spec: { jobTemplate: { template: { spec: { containers: [worker, runner] } } } } };
  assert.equal((await kube(cluster, "POST", `/apis/drover.dev/v1alpha1/namespaces/${ns}/agenttasks`, template)).status, 201);
  controller = spawnDrover(["agent", "controller"], {
    ...stack.baseEnv,
    KUBECONFIG: cluster.kubeconfigPath,
    DROVER_TOKEN: stack.poolToken,
    DROVER_AGENT_NAME: "engine-ctl",
    DROVER_AGENT_KUBERNETES_NAMESPACE: ns,
    DROVER_AGENT_KUBERNETES_TASK_TEMPLATE: "task-template",
    DROVER_AGENT_KUBERNETES_WORKER_IMAGE: "ghcr.io/drover-dev/drover:test",
    DROVER_AGENT_EXEC_LOOP_PATH: join(repo, "packages", "agent", "exec-loop", "exec-loop.sh"),
    DROVER_AGENT_HEALTH_PORT: "0",
  });
  await eventually("the controller to register", async () => (await stack.server.api(routes.listAgents, { query: { pool: stack.pool } })).body.items.some((a: { name: string; status: string }) => a.name === "engine-ctl" && a.status !== "offline"));
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
