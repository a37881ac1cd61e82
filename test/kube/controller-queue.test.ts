import assert from "node:assert/strict";
import { writeFileSync } from "node:fs";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";
import { after, before, test } from "node:test";
import { runLog, startStack, type Stack } from "../support/stack.js";
import { droverBin, spawnDrover, type Proc } from "../support/processes.js";
import { startTcpProxy, type TcpProxy } from "../support/tcp-proxy.js";
import { eventually, fastTimings, kube, prepareDroverNamespace, startTestCluster, type TestCluster } from "./cluster.js";

// The controller's per-Job work queue on the test cluster: a pod failure the controller must
// report while the Drover server is unreachable is retried with backoff (the Job kept), and
// reaches the run once the server is back — it is not dropped with the Job deleted, which left
// the run waiting for its lease to expire.

const repo = join(dirname(fileURLToPath(import.meta.url)), "..", "..", "..");
const ns = "queue-retry";
let cluster: TestCluster;
let stack: Stack;
let proxy: TcpProxy;
let controller: Proc | undefined;

before(async () => {
  cluster = await startTestCluster({ timings: fastTimings });
  stack = await startStack();
  proxy = await startTcpProxy(stack.server.url, "open");
  await prepareDroverNamespace(cluster, ns, join(repo, "deploy", "kubernetes", "agenttasks.drover.dev.yaml"));
  const tfrc = join(stack.dir, "runner-terraformrc");
  writeFileSync(tfrc, "");
  // No node matches: the pod stays Unschedulable, a failure only the controller reports.
  const spec = {
    nodeSelector: { "drover.dev/test-pool": "nowhere" },
    containers: [
      { name: "worker", image: "ghcr.io/drover-dev/drover:test", command: [process.execPath, droverBin], args: ["agent", "worker"] },
      { name: "runner", image: "ghcr.io/drover-dev/drover-runner:test", env: [{ name: "TF_CLI_CONFIG_FILE", value: tfrc }] },
    ],
  };
  const template = { apiVersion: "drover.dev/v1alpha1", kind: "AgentTask", metadata: { name: "task-template", namespace: ns }, spec: { jobTemplate: { template: { spec } } } };
  assert.equal((await kube(cluster, "POST", `/apis/drover.dev/v1alpha1/namespaces/${ns}/agenttasks`, template)).status, 201);
  assert.equal((await stack.server.api("POST", "/api/v1/workspaces", { name: ns, pool: stack.pool })).status, 201);
});

after(async () => {
  await controller?.stop("SIGKILL");
  await proxy?.close();
  await stack?.stop();
  await cluster?.close();
});

test("a pod failure reported while the server is unreachable is retried with backoff and reaches the run once the server is back", async () => {
  controller = spawnDrover(["agent", "controller"], {
    ...stack.baseEnv,
    DROVER_URL: proxy.url,
    KUBECONFIG: cluster.kubeconfigPath,
    DROVER_TOKEN: stack.poolToken,
    DROVER_AGENT_NAME: "queue-ctl",
    DROVER_AGENT_KUBERNETES_NAMESPACE: ns,
    DROVER_AGENT_KUBERNETES_TASK_TEMPLATE: "task-template",
    DROVER_AGENT_KUBERNETES_WORKER_IMAGE: "ghcr.io/drover-dev/drover:test",
    DROVER_AGENT_EXEC_LOOP_PATH: join(repo, "packages", "agent", "exec-loop", "exec-loop.sh"),
    DROVER_AGENT_HEALTH_PORT: "0",
    DROVER_AGENT_LOG_FORMAT: "plain",
    DROVER_AGENT_POD_PENDING_TIMEOUT_SECONDS: "3",
    DROVER_AGENT_SWEEP_INTERVAL_SECONDS: "1",
  });
  const ctl = controller;
  const runId = await stack.startRun(join(repo, "examples", "hello"), ns, ["--auto-apply"]);
  const jobs = async () => (await kube(cluster, "GET", `/apis/batch/v1/namespaces/${ns}/jobs`)).body.items as any[];
  const [job] = await eventually("the run's Job", async () => {
    const js = await jobs();
    return js.length === 1 ? js : undefined;
  }, 60_000).catch((e: Error) => assert.fail(`${e.message}\n${ctl.output()}`));
  // The server unreachable before the pending timeout passes: the report cannot get through.
  proxy.set("refuse");
  await ctl.waitFor(/handling a Job failed; retrying/, 60_000);
  await ctl.waitFor(/handling a Job failed; retrying(.|\n)*handling a Job failed; retrying/, 60_000);
  // Not given up on: the Job is kept while its report is owed.
  assert.deepEqual((await jobs()).map((j) => j.metadata.uid), [job.metadata.uid], `the Job was deleted with its failure unreported:\n${ctl.output()}`);
  proxy.set("open");
  const run = await stack.waitForRun(runId, ["errored", "planned", "applied"], 60_000).catch((e: Error) => assert.fail(`${e.message}\n${ctl.output()}`));
  assert.equal(run.status, "errored");
  assert.match(run.errorMessage ?? "", /was pending for more than 3 s/);
  const log = await runLog(stack.server, runId, "plan");
  assert.equal(log.match(/\[drover\] pod .* was pending/g)?.length, 1, `the failure is in the log once:\n${log}`);
  await eventually("the Job deleted once reported", async () => (await jobs()).length === 0, 20_000);
});
