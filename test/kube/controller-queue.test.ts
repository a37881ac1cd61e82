import assert from "node:assert/strict";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";
import { after, before, test } from "node:test";
import { runLog, startStack, type Stack } from "../support/stack.js";
import type { Proc } from "../support/processes.js";
import { startTcpProxy, type TcpProxy } from "../support/tcp-proxy.js";
import { eventually, fastTimings, kube, startTestCluster, type TestCluster } from "./cluster.js";
import { createAgentTask, podWorker, prepareNamespace, startJobModeController, terraformRunner } from "./agents.js";
import { routes } from "@drover/protocol";

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
  await prepareNamespace(cluster, ns);
  // No node matches: the pod stays Unschedulable, a failure only the controller reports.
  await createAgentTask(cluster, ns, "task-template", [podWorker(), terraformRunner(stack)], {
    podSpec: { nodeSelector: { "drover.dev/test-pool": "nowhere" } },
  });
  assert.equal((await stack.server.api(routes.createWorkspace, { body: { name: ns, pool: stack.pool } })).status, 201);
});

after(async () => {
  await controller?.stop("SIGKILL");
  await proxy?.close();
  await stack?.stop();
  await cluster?.close();
});

test("a pod failure reported while the server is unreachable is retried with backoff and reaches the run once the server is back", async () => {
  controller = startJobModeController(cluster, stack, {
    ns,
    name: "queue-ctl",
    env: {
      DROVER_URL: proxy.url,
      DROVER_AGENT_POD_PENDING_TIMEOUT_SECONDS: "3",
      DROVER_AGENT_SWEEP_INTERVAL_SECONDS: "1",
    },
  });
  const ctl = controller;
  const runId = await stack.startRun(join(repo, "examples", "hello"), ns, ["--auto-apply"]);
  const jobs = async () => (await kube(cluster, "GET", `/apis/batch/v1/namespaces/${ns}/jobs`)).body.items as any[];
  const [job] = await eventually(
    "the run's Job",
    async () => {
      const js = await jobs();
      return js.length === 1 ? js : undefined;
    },
    60_000,
  ).catch((e: Error) => assert.fail(`${e.message}\n${ctl.output()}`));
  // The server unreachable before the pending timeout passes: the report cannot get through.
  proxy.set("refuse");
  await ctl.waitFor(/handling a Job failed; retrying/, 60_000);
  await ctl.waitFor(/handling a Job failed; retrying(.|\n)*handling a Job failed; retrying/, 60_000);
  // Not given up on: the Job is kept while its report is owed.
  assert.deepEqual(
    (await jobs()).map((j) => j.metadata.uid),
    [job.metadata.uid],
    `the Job was deleted with its failure unreported:\n${ctl.output()}`,
  );
  proxy.set("open");
  const run = await stack
    .waitForRun(runId, ["errored", "planned", "applied"], 60_000)
    .catch((e: Error) => assert.fail(`${e.message}\n${ctl.output()}`));
  assert.equal(run.status, "errored");
  assert.match(run.errorMessage ?? "", /was pending for more than 3 s/);
  const log = await runLog(stack.server, runId, "plan");
  assert.equal(log.match(/\[drover\] pod .* was pending/g)?.length, 1, `the failure is in the log once:\n${log}`);
  await eventually("the Job deleted once reported", async () => (await jobs()).length === 0, 20_000);
});
