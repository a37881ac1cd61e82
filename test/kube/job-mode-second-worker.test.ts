import assert from "node:assert/strict";
import { existsSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { after, before, test } from "node:test";
import { runLog, startStack, writeConfig, type Stack } from "../support/stack.js";
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

// Issue 11 / decision 0028: a second pod for a job that a worker already started (the Job's
// pod created again after a node loss, say) mounts the same job Secret; its worker must be
// refused by the server and run nothing, while the first worker's run goes on to the end.

const ns = "drover-fence";
let cluster: TestCluster;
let stack: Stack;
let controller: Proc;

before(async () => {
  cluster = await startTestCluster({ timings: fastTimings });
  stack = await startStack();
  await prepareNamespace(cluster, ns);
  await createAgentTask(cluster, ns, "task-template", [podWorker(), terraformRunner(stack)], {
    jobSpec: { ttlSecondsAfterFinished: 600 },
  });
  controller = startJobModeController(cluster, stack, { ns, name: "fence-ctl" });
  await agentRegistered(stack, "fence-ctl");
});

after(async () => {
  await controller?.stop("SIGKILL");
  await stack?.stop();
  await cluster?.close();
});

const count = (text: string, needle: string) => text.split(needle).length - 1;
/** Lines the provisioner printed (not the "Executing" line that quotes its command). */
const printed = (text: string, word: string) =>
  text.split("\n").filter((l) => l.endsWith(`(local-exec): ${word}`)).length;

test("a second pod for a started job: its worker is refused with job_already_started and no step runs twice", async () => {
  const res = await stack.server.api(routes.createWorkspace, { body: { name: "k8s-fence", pool: stack.pool } });
  assert.equal(res.status, 201, JSON.stringify(res.body));
  // The apply holds in its provisioner until the test opens the gate: the first worker is
  // still running its step while the second pod comes and goes.
  const gate = join(stack.dir, "fence-gate");
  const files = {
    "main.tf": `resource "terraform_data" "held" {\n  provisioner "local-exec" {\n    command = "echo provisioner-ran; while [ ! -e '${gate}' ]; do sleep 0.1; done; echo gate-opened"\n  }\n}\n`,
  };
  const runId = await stack.startRun(writeConfig(stack.dir, "k8s-fence", files), "k8s-fence", ["--auto-apply"]);
  await stack.waitForRun(runId, ["applying"], 120_000);
  await eventually(
    "the provisioner to run",
    async () => printed(await runLog(stack.server, runId, "apply"), "provisioner-ran") > 0,
  );
  const first = await eventually("the running apply pod", async () => {
    const pods = await kube(
      cluster,
      "GET",
      `/api/v1/namespaces/${ns}/pods?labelSelector=${encodeURIComponent(`drover.dev/run-id=${runId}`)}`,
    );
    return (pods.body.items as any[]).find(
      (p) => p.metadata.labels["drover.dev/phase"] === "apply" && p.status?.phase === "Running",
    );
  });

  // The same pod spec (same job Secret, same containers) under another name, owned by the Job
  // and carrying its labels, as the Job controller's replacement would: both the Job controller
  // and ours see it as the Job's pod. It has no job-tracking finalizer: a real replacement comes
  // once the first pod is terminating (its node lost), and the test cluster's Job controller
  // would otherwise count its end as the Job's completion and delete the first pod, still running here.
  const second = `${first.metadata.name}-again`;
  const owner = (first.metadata.ownerReferences as any[]).find((r) => r.kind === "Job" && r.controller === true);
  assert.ok(owner, "the first pod is owned by its Job");
  const created = await kube(cluster, "POST", `/api/v1/namespaces/${ns}/pods`, {
    apiVersion: "v1",
    kind: "Pod",
    metadata: { name: second, namespace: ns, labels: first.metadata.labels, ownerReferences: [owner] },
    spec: { ...first.spec, nodeName: undefined },
  });
  assert.equal(created.status, 201, JSON.stringify(created.body));
  const ended = await eventually(
    "the second pod to end",
    async () => {
      const p = (await kube(cluster, "GET", `/api/v1/namespaces/${ns}/pods/${second}`)).body;
      return ["Succeeded", "Failed"].includes(p.status?.phase) ? p : undefined;
    },
    120_000,
  );
  const workerLog = (await kube(cluster, "GET", `/api/v1/namespaces/${ns}/pods/${second}/log?container=worker`))
    .body as string;
  assert.match(workerLog, /job_already_started/, workerLog);
  assert.match(workerLog, /already started by another worker.*no step ran here/, workerLog);
  assert.equal(
    ended.status.phase,
    "Succeeded",
    `the refused worker ends cleanly: ${JSON.stringify(ended.status)}\n${workerLog}`,
  );
  assert.ok(
    (ended.metadata.ownerReferences as any[]).some((r) => r.uid === owner.uid),
    "still the Job's pod",
  );

  const during = await runLog(stack.server, runId, "apply");
  assert.equal(printed(during, "provisioner-ran"), 1, during);
  assert.equal(count(during, "$ terraform init"), 1, during);
  assert.equal(existsSync(gate), false);
  writeFileSync(gate, "");
  const run = await stack.waitForRun(runId, ["applied", "errored", "canceled"], 120_000);
  const log = await runLog(stack.server, runId, "apply");
  assert.equal(run.status, "applied", `${log}\n${controller.output()}`);
  assert.equal(printed(log, "provisioner-ran"), 1, log);
  assert.equal(printed(log, "gate-opened"), 1, log);
  assert.equal(count(log, "$ terraform init"), 1, log);
  assert.equal(count(log, "$ terraform apply"), 1, log);
});
