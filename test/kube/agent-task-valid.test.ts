import assert from "node:assert/strict";
import { after, before, test } from "node:test";
import { startStack, type Stack } from "../support/stack.js";
import type { Proc } from "../support/processes.js";
import { eventually, fastTimings, hasKubectl, kube, kubectl, startTestCluster, type TestCluster } from "./cluster.js";
import { createAgentTask, podWorker, prepareNamespace, startJobModeController, terraformRunner } from "./agents.js";

// I7: the controller sets its AgentTask's Valid condition from a server-side dry run of the Job the
// template makes, so `kubectl get agenttasks` shows a template the API refuses when it is applied,
// not only at each run's Job create.

const ns = "task-valid";
let cluster: TestCluster;
let stack: Stack;
let controller: Proc | undefined;

before(async () => {
  cluster = await startTestCluster({ timings: fastTimings });
  stack = await startStack();
  await prepareNamespace(cluster, ns);
});

after(async () => {
  await controller?.stop("SIGKILL");
  await stack?.stop();
  await cluster?.close();
});

const path = `/apis/drover.dev/v1alpha1/namespaces/${ns}/agenttasks/task-template`;

async function valid(generation: number): Promise<{ status: string; reason: string; message: string }> {
  return eventually(
    `the Valid condition of generation ${generation}`,
    async () => {
      const t = (await kube(cluster, "GET", path)).body;
      const c = t.status?.conditions?.find((x: any) => x.type === "Valid");
      return t.status?.observedGeneration === generation && c ? c : undefined;
    },
    30_000,
  ).catch((e: Error) => assert.fail(`${e.message}\n${controller?.output() ?? ""}`));
}

test(
  "kubectl get agenttasks shows VALID True for a template the API accepts, False with the API's reason when it refuses",
  { skip: !hasKubectl && "kubectl not installed" },
  async () => {
    await createAgentTask(cluster, ns, "task-template", [podWorker(), terraformRunner(stack)]);
    controller = startJobModeController(cluster, stack, { ns, name: "valid-ctl" });
    const accepted = await valid(1);
    assert.deepEqual([accepted.status, accepted.reason], ["True", "DryRunAccepted"]);
    const shown = await kubectl(cluster, ["get", "agenttasks", "-n", ns]);
    assert.equal(shown.code, 0, shown.stderr);
    assert.match(shown.stdout, /^NAME\s+VALID\s+AGE$/m);
    assert.match(shown.stdout, /^task-template\s+True\s+/m);
    // Dry runs only: nothing was created.
    assert.deepEqual((await kube(cluster, "GET", `/apis/batch/v1/namespaces/${ns}/jobs`)).body.items, []);

    // A container name the API server refuses (not an RFC 1123 label): the Job would never be created.
    const bad = {
      spec: {
        jobTemplate: {
          template: {
            spec: { containers: [podWorker(), terraformRunner(stack), { name: "Side_Car", image: "busybox" }] },
          },
        },
      },
    };
    assert.equal((await kube(cluster, "PATCH", path, bad, "application/merge-patch+json")).status, 200);
    const refused = await valid(2);
    assert.deepEqual([refused.status, refused.reason], ["False", "DryRunRefused"]);
    assert.match(refused.message, /spec\.template\.spec\.containers\[2\]\.name: Invalid value: "Side_Car"/);
    const shownBad = await kubectl(cluster, ["get", "agenttasks", "-n", ns]);
    assert.match(shownBad.stdout, /^task-template\s+False\s+/m);

    // A template the CRD's open schema lets through but that is no pod spec at all.
    const unusable = { spec: { jobTemplate: { template: { spec: { containers: "worker" } } } } };
    assert.equal((await kube(cluster, "PATCH", path, unusable, "application/merge-patch+json")).status, 200);
    const broken = await valid(3);
    assert.deepEqual([broken.status, broken.reason], ["False", "TemplateUnusable"]);
    assert.match(broken.message, /containers must be a list of objects/);

    // Fixed: True again.
    const fixed = {
      spec: { jobTemplate: { template: { spec: { containers: [podWorker(), terraformRunner(stack)] } } } },
    };
    assert.equal((await kube(cluster, "PATCH", path, fixed, "application/merge-patch+json")).status, 200);
    assert.equal((await valid(4)).status, "True");
    assert.deepEqual(cluster.denials, []);
  },
);
