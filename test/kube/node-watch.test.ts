import assert from "node:assert/strict";
import { mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";
import { after, before, test } from "node:test";
import { startStack, type Stack } from "../support/stack.js";
import { spawnDrover, type Proc } from "../support/processes.js";
import { fastTimings, kube, prepareDroverNamespace, startTestCluster, type TestCluster } from "./cluster.js";
import { routes } from "@drover/protocol";

// agent-k8s node workers watch their node's run pods (no polling LIST), and two releases in
// one namespace — two controllers, each with its own node workers — never supervise each
// other's run pods: each worker selects the pods of its own controller.

const repo = join(dirname(fileURLToPath(import.meta.url)), "..", "..", "..");
const ns = "two-releases";
let cluster: TestCluster;
let stack: Stack;
const requests: string[] = [];
const procs: Proc[] = [];
const homes: string[] = [];

interface Release {
  controller: Proc;
  worker: Proc;
  workspace: string;
}
const releases: Record<string, Release> = {};

before(async () => {
  cluster = await startTestCluster({
    timings: fastTimings,
    hostPaths: "real",
    onRequest: (method, url) => void requests.push(`${method} ${url}`),
  });
  stack = await startStack();
  const tfrc = join(stack.dir, "runner-terraformrc");
  writeFileSync(tfrc, "");
  await prepareDroverNamespace(cluster, ns, join(repo, "deploy", "kubernetes", "agenttasks.drover.dev.yaml"));
  for (const name of ["a", "b"]) {
    const template = {
      apiVersion: "drover.dev/v1alpha1",
      kind: "AgentTask",
      metadata: { name: `task-${name}`, namespace: ns },
      spec: {
        jobTemplate: {
          template: {
            spec: {
              containers: [
                {
                  name: "runner",
                  image: "ghcr.io/drover-dev/drover-runner:test",
                  env: [
                    { name: "TF_CLI_CONFIG_FILE", value: tfrc },
                    { name: "CHECKPOINT_DISABLE", value: "1" },
                  ],
                },
              ],
            },
          },
        },
      },
    };
    assert.equal(
      (await kube(cluster, "POST", `/apis/drover.dev/v1alpha1/namespaces/${ns}/agenttasks`, template)).status,
      201,
    );
    const pool = `pool-${name}`;
    assert.equal((await stack.server.api(routes.createPool, { body: { name: pool } })).status, 201);
    const token = (await stack.server.api(routes.createPoolToken, { params: { pool }, body: { description: pool } }))
      .body.token as string;
    assert.equal((await stack.server.api(routes.createWorkspace, { body: { name: `ws-${name}`, pool } })).status, 201);
    const home = mkdtempSync(join(tmpdir(), `drover-release-${name}-`));
    homes.push(home);
    const common = {
      ...stack.baseEnv,
      KUBECONFIG: cluster.kubeconfigPath,
      DROVER_AGENT_KUBERNETES_NAMESPACE: ns,
      DROVER_AGENT_NODE_HOME: home,
      DROVER_AGENT_LOG_FORMAT: "plain",
      DROVER_AGENT_HEALTH_PORT: "0",
    };
    const worker = spawnDrover(["agent", "node-worker"], {
      ...common,
      DROVER_AGENT_NODE_NAME: "ktc-node",
      DROVER_AGENT_CONTROLLER_NAME: `ctl-${name}`,
      DROVER_AGENT_EXEC_LOOP_PATH: join(repo, "packages", "agent", "exec-loop", "exec-loop.sh"),
    });
    await worker.waitFor(/node worker started/);
    const controller = spawnDrover(["agent", "controller"], {
      ...common,
      DROVER_TOKEN: token,
      DROVER_AGENT_NAME: `ctl-${name}`,
      DROVER_AGENT_KUBERNETES_TASK_TEMPLATE: `task-${name}`,
      DROVER_AGENT_KUBERNETES_WORKER_IMAGE: "ghcr.io/drover-dev/drover:test",
    });
    procs.push(worker, controller);
    releases[name] = { controller, worker, workspace: `ws-${name}` };
  }
});

after(async () => {
  await Promise.all(procs.map((p) => p.stop("SIGKILL")));
  await stack?.stop();
  await cluster?.close();
  for (const h of homes) rmSync(h, { recursive: true, force: true });
});

test("two releases in one namespace each complete their run; no node worker touches the other release's pods; workers watch instead of polling", async () => {
  const [a, b] = [releases.a!, releases.b!];
  const listsBefore = requests.filter(
    (r) =>
      r.startsWith("GET ") &&
      decodeURIComponent(r).includes("fieldSelector=spec.nodeName") &&
      !/[?&]watch=(true|1)/.test(r),
  ).length;
  const [runA, runB] = await Promise.all([
    stack.startRun(join(repo, "examples", "hello"), a.workspace, ["--auto-apply"]),
    stack.startRun(join(repo, "examples", "hello"), b.workspace, ["--auto-apply"]),
  ]);
  const [doneA, doneB] = await Promise.all([
    stack.waitForRun(runA, ["applied", "errored", "canceled"], 120_000),
    stack.waitForRun(runB, ["applied", "errored", "canceled"], 120_000),
  ]);
  const logs = `release a worker:\n${a.worker.output()}\nrelease b worker:\n${b.worker.output()}`;
  assert.equal(doneA.status, "applied", logs);
  assert.equal(doneB.status, "applied", logs);
  assert.match(a.worker.output(), new RegExp(runA));
  assert.doesNotMatch(a.worker.output(), new RegExp(runB), "release a's worker touched release b's run pod");
  assert.match(b.worker.output(), new RegExp(runB));
  assert.doesNotMatch(b.worker.output(), new RegExp(runA), "release b's worker touched release a's run pod");

  // Both workers watched: a listing only where a watch must relist (410 after the bounded
  // watch history moved on). Polling every 500 ms made about four a second.
  const lists = requests.filter(
    (r) =>
      r.startsWith("GET ") &&
      decodeURIComponent(r).includes("fieldSelector=spec.nodeName") &&
      !/[?&]watch=(true|1)/.test(r),
  );
  assert.ok(lists.length - listsBefore <= 4, lists.join("\n"));
  assert.ok(
    requests.some((r) => decodeURIComponent(r).includes("fieldSelector=spec.nodeName") && /[?&]watch=(true|1)/.test(r)),
    "a watch on this node's pods",
  );
});
