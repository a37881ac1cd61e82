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

// The controller's create path (issue 18): between a job offered and its Job created it makes
// no API call but the Job's create. The AgentTask comes from a watch of that one object (by
// name), which also carries an edited template to the next Jobs.

const repo = join(dirname(fileURLToPath(import.meta.url)), "..", "..", "..");
const ns = "create-path";
let cluster: TestCluster;
let stack: Stack;
let controller: Proc | undefined;
const requests: { method: string; url: string }[] = [];

before(async () => {
  cluster = await startTestCluster({
    timings: fastTimings,
    onRequest: (method, url) => void requests.push({ method, url }),
  });
  stack = await startStack();
  await prepareNamespace(cluster, ns);
  // No node matches: the pods stay pending and nothing runs; only the launches are looked at.
  await createAgentTask(cluster, ns, "task-template", [podWorker(), terraformRunner(stack)], {
    podSpec: { nodeSelector: { "drover.dev/test-pool": "nowhere" } },
  });
});

after(async () => {
  await controller?.stop("SIGKILL");
  await stack?.stop();
  await cluster?.close();
});

const jobOf = async (runId: string) =>
  eventually(
    `the Job of run ${runId}`,
    async () =>
      (
        (
          await kube(
            cluster,
            "GET",
            `/apis/batch/v1/namespaces/${ns}/jobs?labelSelector=drover.dev%2Frun-id%3D${runId}`,
          )
        ).body.items as any[]
      )[0],
    60_000,
  );

test("Jobs are built from the watched AgentTask: no read of it per run, and an edit reaches the next Job", async () => {
  controller = startJobModeController(cluster, stack, { ns, name: "create-ctl" });
  const ctl = controller;
  await agentRegistered(stack, "create-ctl");
  await ctl.waitFor(/task template watched/, 60_000);
  const taskPath = `/apis/drover.dev/v1alpha1/namespaces/${ns}/agenttasks`;
  const reads = () =>
    requests.filter((r) => r.method === "GET" && r.url.startsWith(`${taskPath}/task-template`)).length;
  const before = reads();
  for (let i = 0; i < 3; i++) {
    await stack.server.api(routes.createWorkspace, { body: { name: `${ns}-${i}`, pool: stack.pool } });
    const job = await jobOf(await stack.startRun(join(repo, "examples", "hello"), `${ns}-${i}`));
    assert.equal(job.spec.template.spec.nodeSelector["drover.dev/test-pool"], "nowhere");
    // Its Secret follows the Job.
    await eventually(
      "the job Secret",
      async () =>
        (await kube(cluster, "GET", `/api/v1/namespaces/${ns}/secrets/${job.metadata.name}-job`)).status === 200,
      30_000,
    );
  }
  assert.equal(
    reads() - before,
    0,
    `the AgentTask was read per run:\n${requests
      .filter((r) => r.url.startsWith(taskPath))
      .map((r) => `${r.method} ${r.url}`)
      .join("\n")}`,
  );
  assert.ok(
    requests.some(
      (r) =>
        r.method === "GET" &&
        r.url.startsWith(taskPath) &&
        /watch=(true|1)/.test(r.url) &&
        /fieldSelector=metadata.name%3Dtask-template/.test(r.url),
    ),
    "watched by name",
  );

  // An edited template: the watch brings it, and the next Job uses it.
  const current = (await kube(cluster, "GET", `${taskPath}/task-template`)).body;
  current.spec.jobTemplate.template.spec.nodeSelector = { "drover.dev/test-pool": "elsewhere" };
  const put = await kube(cluster, "PUT", `${taskPath}/task-template`, current);
  assert.equal(put.status, 200);
  const version = put.body.metadata.resourceVersion as string;
  const ours = reads();
  await ctl.waitFor(new RegExp(`task template watched.* resourceVersion=${version} `), 60_000);
  await stack.server.api(routes.createWorkspace, { body: { name: `${ns}-edited`, pool: stack.pool } });
  const edited = await jobOf(await stack.startRun(join(repo, "examples", "hello"), `${ns}-edited`));
  assert.equal(edited.spec.template.spec.nodeSelector["drover.dev/test-pool"], "elsewhere");
  assert.equal(reads() - ours, 0);
});
