import assert from "node:assert/strict";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";
import { after, before, test } from "node:test";
import { startStack, type Stack } from "../support/stack.js";
import type { Proc } from "../support/processes.js";
import { eventually, fastTimings, kube, startTestCluster, type TestCluster } from "./cluster.js";
import {
  agentRegistered,
  createAgentTask,
  podWorker,
  prepareNamespace,
  startJobModeController,
  terraformRunner,
} from "./agents.js";
import { routes } from "@drover/protocol";

// B3: a task pod with a long-running sidecar (a log shipper, a mesh proxy), rendered by the
// charts as a native sidecar: the run's Job completes once its worker and runner end, so the
// run does not hold a concurrency slot until the Job's activeDeadlineSeconds.

const repo = join(dirname(fileURLToPath(import.meta.url)), "..", "..", "..");
const ns = "drover-sidecar";
let cluster: TestCluster;
let stack: Stack;
let controller: Proc;

before(async () => {
  cluster = await startTestCluster({ timings: fastTimings });
  stack = await startStack();
  await prepareNamespace(cluster, ns);
  const shipper = {
    name: "log-shipper",
    image: "busybox:1.36",
    command: ["sh", "-c", "trap 'exit 0' TERM; while :; do sleep 0.1; done"],
    restartPolicy: "Always",
  };
  await createAgentTask(cluster, ns, "task-template", [podWorker(), terraformRunner(stack)], {
    podSpec: { initContainers: [shipper] },
  });
  controller = startJobModeController(cluster, stack, {
    ns,
    name: "sidecar-ctl",
    env: { DROVER_AGENT_CONCURRENCY: "1" },
  });
  await agentRegistered(stack, "sidecar-ctl");
});

after(async () => {
  await controller?.stop("SIGKILL");
  await stack?.stop();
  await cluster?.close();
});

test("a run whose task pod has a long-running sidecar completes, and so does its Job; the next run gets the slot", async () => {
  for (const ws of ["sidecar-1", "sidecar-2"])
    assert.equal(
      (await stack.server.api(routes.createWorkspace, { body: { name: ws, pool: stack.pool } })).status,
      201,
    );
  const first = await stack.startRun(join(repo, "examples", "hello"), "sidecar-1", []);
  const second = await stack.startRun(join(repo, "examples", "hello"), "sidecar-2", []);
  for (const runId of [first, second]) {
    const run = await stack.waitForRun(runId, ["planned", "errored", "canceled"], 120_000);
    assert.equal(run.status, "planned", `${run.errorMessage}\n${controller.output()}`);
    const job = await eventually(
      `the Job of ${runId} to finish`,
      async () => {
        const j = (await kube(cluster, "GET", `/apis/batch/v1/namespaces/${ns}/jobs/drover-${runId}-plan-1`)).body;
        return (j.status?.conditions ?? []).some(
          (c: any) => ["Complete", "Failed"].includes(c.type) && c.status === "True",
        )
          ? j
          : undefined;
      },
      60_000,
    );
    assert.ok(
      job.status.conditions.some((c: any) => c.type === "Complete" && c.status === "True"),
      JSON.stringify(job.status),
    );
    assert.equal(
      job.spec.template.spec.initContainers.find((c: any) => c.name === "log-shipper")?.restartPolicy,
      "Always",
    );
  }
});
