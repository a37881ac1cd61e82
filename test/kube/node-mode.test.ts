import assert from "node:assert/strict";
import { existsSync, mkdirSync, mkdtempSync, readdirSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";
import { after, before, test } from "node:test";
import { runLog, startStack, type Stack } from "../support/stack.js";
import { spawnDrover, type Proc } from "../support/processes.js";
import { eventually, fastTimings, kube, startTestCluster, type TestCluster } from "./cluster.js";
import { agentRegistered, controllerEnv, createAgentTask, nodeWorkerEnv, prepareNamespace, terraformRunner } from "./agents.js";

// agent-k8s's node-worker design end to end: the controller launches run pods that hold only
// the runner; the worker of the node they land on (one per node, a DaemonSet in the chart)
// prepares their directory in its hostPath data home and owns the run.

const repo = join(dirname(fileURLToPath(import.meta.url)), "..", "..", "..");
const ns = "drover-nodes";
let cluster: TestCluster;
let stack: Stack;
let controller: Proc;
let nodeWorker: Proc;
let home: string;
let startNodeWorker: () => Proc;

before(async () => {
  // The node worker runs here as a process standing in for its DaemonSet pod, so the node's
  // hostPaths are this machine's real paths.
  cluster = await startTestCluster({ timings: fastTimings, hostPaths: "real" });
  stack = await startStack();
  home = mkdtempSync(join(tmpdir(), "drover-node-home-"));
  await prepareNamespace(cluster, ns);
  await createAgentTask(cluster, ns, "task-template", [terraformRunner(stack)]);
  const common = { ...stack.baseEnv, KUBECONFIG: cluster.kubeconfigPath, DROVER_AGENT_KUBERNETES_NAMESPACE: ns, DROVER_AGENT_NODE_HOME: home, DROVER_AGENT_LOG_FORMAT: "plain" };
  startNodeWorker = () =>
    spawnDrover(["agent", "node-worker"], {
      ...common,
      ...nodeWorkerEnv("node-ctl"),
      DROVER_AGENT_HEALTH_PORT: "0",
      DROVER_WORKER_RUNNER_STALE_SECONDS: "10",
    });
  nodeWorker = startNodeWorker();
  await nodeWorker.waitFor(/node worker started/);
  controller = spawnDrover(["agent", "controller"], {
    ...common,
    ...controllerEnv(stack, "node-ctl", "task-template"),
    DROVER_AGENT_HEALTH_PORT: "0",
  });
  await agentRegistered(stack, "node-ctl");
});

after(async () => {
  await controller?.stop("SIGKILL");
  await nodeWorker?.stop("SIGKILL");
  await stack?.stop();
  await cluster?.close();
  if (home) rmSync(home, { recursive: true, force: true });
});

test("node-worker mode: examples/hello plan+apply in runner-only pods driven by the node's worker", async () => {
  assert.equal((await stack.server.api("POST", "/api/v1/workspaces", { name: "node-hello", pool: stack.pool })).status, 201);
  const runId = await stack.startRun(join(repo, "examples", "hello"), "node-hello", ["--auto-apply"]);
  const run = await stack.waitForRun(runId, ["applied", "errored", "canceled"], 60_000).catch(async (err: Error) => {
    const pods = (await kube(cluster, "GET", `/api/v1/namespaces/${ns}/pods`)).body.items.map((p: any) => ({ name: p.metadata.name, phase: p.status?.phase, init: p.status?.initContainerStatuses, containers: p.status?.containerStatuses }));
    throw new Error(`${err.message}\npods: ${JSON.stringify(pods, null, 1)}\nnode worker:\n${nodeWorker.output()}\ncontroller:\n${controller.output()}`);
  });
  const plan = await runLog(stack.server, runId, "plan");
  const apply = await runLog(stack.server, runId, "apply");
  assert.equal(run.status, "applied", `${plan}\n${apply}\n${controller.output()}\n${nodeWorker.output()}`);
  const order = ["[drover] plan of run", "$ terraform init", "$ terraform plan", "Plan: 2 to add", "[drover] plan succeeded"].map((s) => plan.indexOf(s));
  assert.ok(order.every((v, i) => v >= 0 && (i === 0 || v > order[i - 1]!)), `plan log out of order: ${order}`);
  assert.match(apply, /Apply complete! Resources: 2 added/);
  assert.match(nodeWorker.output(), /supervising a run pod on this node/);

  const pods = (await kube(cluster, "GET", `/api/v1/namespaces/${ns}/pods?labelSelector=${encodeURIComponent(`drover.dev/run-id=${runId}`)}`)).body.items;
  assert.equal(pods.length, 2, "one pod per phase");
  for (const pod of pods) {
    assert.deepEqual(pod.spec.containers.map((c: any) => c.name), ["runner"], "no worker container in the run pod");
    assert.equal(pod.spec.automountServiceAccountToken, false, "run pods get no API access");
    const job = pod.metadata.labels["drover.dev/k8s-job"];
    const runnerMounts = pod.spec.containers[0].volumeMounts.filter((m: any) => m.name === "drover-home");
    assert.deepEqual(runnerMounts.map((m: any) => m.subPath), [`runs/${job}`], "the runner sees its own run directory only");
    const initMounts = pod.spec.initContainers[0].volumeMounts.filter((m: any) => m.name === "drover-home");
    assert.deepEqual(initMounts.map((m: any) => [m.subPath, m.readOnly]), [["ready", true]], "the init container sees the ready marks only, no run's files");
    assert.ok(!JSON.stringify(pod).includes("drv_j_"), "no job token in the pod spec");
  }
  await eventually("the node's run directories and ready marks to be removed", async () => readdirSync(join(home, "runs")).length === 0 && readdirSync(join(home, "ready")).length === 0, 20_000);
  assert.ok(existsSync(join(home, "runs")));
});

test("a node worker killed mid-run: its replacement ends that run errored with the reason, and takes new runs", async () => {
  assert.equal((await stack.server.api("POST", "/api/v1/workspaces", { name: "node-restart", pool: stack.pool })).status, 201);
  const dir = join(stack.dir, "node-restart");
  mkdirSync(dir, { recursive: true });
  writeFileSync(join(dir, "main.tf"), 'resource "terraform_data" "long" {\n  input = timestamp()\n  provisioner "local-exec" {\n    command = "echo started-long; sleep 20"\n  }\n}\n');
  const runId = await stack.startRun(dir, "node-restart", ["--auto-apply"]);
  await eventually("the apply to be running", async () => /started-long/.test(await runLog(stack.server, runId, "apply")), 90_000);
  await nodeWorker.stop("SIGKILL");
  nodeWorker = startNodeWorker();
  const run = await stack.waitForRun(runId, ["errored", "applied", "canceled"], 30_000);
  assert.equal(run.status, "errored");
  assert.match(run.errorMessage ?? "", /worker restarted while the run was in progress/);
  const ws = (await stack.server.api("GET", "/api/v1/workspaces/node-restart")).body;
  assert.equal(ws.stateLocked, false, "the workspace is usable again");

  writeFileSync(join(dir, "main.tf"), 'resource "terraform_data" "ok" {}\n');
  const next = await stack.startRun(dir, "node-restart", ["--auto-apply"]);
  assert.equal((await stack.waitForRun(next, ["applied", "errored"], 90_000)).status, "applied");
});

test("node-worker settings: a missing data home is one clear line and exit 2", async () => {
  const proc = spawnDrover(["agent", "node-worker"], { PATH: process.env.PATH, DROVER_URL: "http://127.0.0.1:9", DROVER_AGENT_NODE_NAME: "n" });
  const exit = await proc.exited;
  assert.equal(exit.code, 2);
  assert.match(proc.output().trim(), /^drover agent node-worker: DROVER_AGENT_NODE_HOME is not set/);
});
