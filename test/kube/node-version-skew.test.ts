// I14: agent-k8s's node workers are updated only when their pod is deleted (DaemonSet OnDelete),
// so a node's worker may be older or newer than the controller. The controller puts its version
// in each run's job Secret; a worker of another version warns in its log and in the run's log,
// naming how to update it.
import assert from "node:assert/strict";
import { join } from "node:path";
import { dirname } from "node:path";
import { fileURLToPath } from "node:url";
import { after, before, test } from "node:test";
import { runLog, startStack, type Stack } from "../support/stack.js";
import { eventually, fastTimings, kube, startTestCluster, type TestCluster } from "./cluster.js";
import {
  createAgentTask,
  prepareNamespace,
  startNodeModeAgents,
  terraformRunner,
  type NodeModeAgents,
} from "./agents.js";
import { routes } from "@drover/protocol";

const repo = join(dirname(fileURLToPath(import.meta.url)), "..", "..", "..");
const ns = "drover-node-skew";
let cluster: TestCluster;
let stack: Stack;
let agents: NodeModeAgents;

before(async () => {
  cluster = await startTestCluster({ timings: fastTimings, hostPaths: "real" });
  stack = await startStack();
  await prepareNamespace(cluster, ns);
  await createAgentTask(cluster, ns, "task-template", [terraformRunner(stack)]);
  agents = await startNodeModeAgents(cluster, stack, { ns, name: "node-skew", template: "task-template" });
});

after(async () => {
  await agents?.stop();
  await stack?.stop();
  await cluster?.close();
});

test("node mode: a worker of another version than the controller warns in its log and in the run's log", async () => {
  await stack.server.api(routes.createWorkspace, { body: { name: "skewed", pool: stack.pool } });
  // No worker while the controller launches: the Secret then says an older controller made it.
  await agents.nodeWorker.stop("SIGKILL");
  const runId = await stack.startRun(join(repo, "examples", "hello"), "skewed", []);
  const secrets = `/api/v1/namespaces/${ns}/secrets`;
  const secret = await eventually("the run's job Secret", async () =>
    ((await kube(cluster, "GET", secrets)).body.items as any[]).find((s) => s.metadata.name.endsWith("-job")),
  );
  assert.equal(Buffer.from(secret.data.version, "base64").toString(), "0.1.0", "the controller writes its version");
  const patched = await kube(
    cluster,
    "PATCH",
    `${secrets}/${secret.metadata.name}`,
    { stringData: { version: "0.0.9" } },
    "application/merge-patch+json",
  );
  assert.equal(patched.status, 200, JSON.stringify(patched.body));
  const worker = await agents.restartNodeWorker();
  const run = await stack.waitForRun(runId, ["errored", "planned", "failed"], 180_000);
  const plan = await runLog(stack.server, runId, "plan");
  assert.equal(run.status, "planned", `${run.errorMessage}\n${plan}\n${worker.output()}`);
  const line =
    /\[drover\] version skew: this node's drover worker is 0\.1\.0, the controller 0\.0\.9; update the worker by deleting its pod \(kubectl delete pod\)/;
  assert.match(plan, line);
  assert.match(worker.output(), /version skew: this node's drover worker is 0\.1\.0, the controller 0\.0\.9/);
});
