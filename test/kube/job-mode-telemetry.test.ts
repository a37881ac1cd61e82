// Kubernetes job mode with OTLP: the controller passes its endpoint to each run pod's worker,
// whose spans join the job's trace through the assignment's traceparent (carried in the job
// Secret): the server's root `job` span, its `queued` wait, and under it the pod worker's span
// with its stages — three processes, one trace per phase.
import assert from "node:assert/strict";
import { writeFileSync } from "node:fs";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";
import { after, before, test } from "node:test";
import { startStack, type Stack } from "../support/stack.js";
import { droverBin, spawnDrover, type Proc } from "../support/processes.js";
import { startOtlpReceiver, type OtlpReceiver } from "../support/otlp-receiver.js";
import { eventually, fastTimings, kube, prepareDroverNamespace, startTestCluster, type TestCluster } from "./cluster.js";

const repo = join(dirname(fileURLToPath(import.meta.url)), "..", "..", "..");
const ns = "drover";
let cluster: TestCluster;
let stack: Stack;
let controller: Proc;
let receiver: OtlpReceiver;

before(async () => {
  receiver = await startOtlpReceiver();
  cluster = await startTestCluster({ timings: fastTimings });
  stack = await startStack({ DROVER_OTLP_ENDPOINT: receiver.url });
  const tfrc = join(stack.dir, "runner-terraformrc");
  writeFileSync(tfrc, "");
  await prepareDroverNamespace(cluster, ns, join(repo, "deploy", "kubernetes", "agenttasks.drover.dev.yaml"));
  const template = {
    apiVersion: "drover.dev/v1alpha1",
    kind: "AgentTask",
    metadata: { name: "task-template", namespace: ns },
    spec: {
      jobTemplate: {
        ttlSecondsAfterFinished: 600,
        template: {
          spec: {
            containers: [
              { name: "worker", image: "ghcr.io/drover-dev/drover:test", command: [process.execPath, droverBin], args: ["agent", "worker"] },
              { name: "runner", image: "ghcr.io/drover-dev/drover-runner:test", env: [{ name: "TF_CLI_CONFIG_FILE", value: tfrc }, { name: "CHECKPOINT_DISABLE", value: "1" }] },
            ],
          },
        },
      },
    },
  };
  assert.equal((await kube(cluster, "POST", `/apis/drover.dev/v1alpha1/namespaces/${ns}/agenttasks`, template)).status, 201);
  controller = spawnDrover(["agent", "controller"], {
    ...stack.baseEnv,
    KUBECONFIG: cluster.kubeconfigPath,
    DROVER_TOKEN: stack.poolToken,
    DROVER_AGENT_NAME: "traced-ctl",
    DROVER_AGENT_KUBERNETES_NAMESPACE: ns,
    DROVER_AGENT_KUBERNETES_TASK_TEMPLATE: "task-template",
    DROVER_AGENT_KUBERNETES_WORKER_IMAGE: "ghcr.io/drover-dev/drover:test",
    DROVER_AGENT_EXEC_LOOP_PATH: join(repo, "packages", "agent", "exec-loop", "exec-loop.sh"),
    DROVER_AGENT_HEALTH_PORT: "0",
    DROVER_AGENT_OTLP_ENDPOINT: receiver.url,
  });
  await eventually("the controller to register", async () => (await stack.server.api("GET", `/api/v1/agents?pool=${stack.pool}`)).body.items.some((a: any) => a.name === "traced-ctl" && a.status !== "offline"));
});

after(async () => {
  await controller?.stop("SIGKILL");
  await stack?.stop();
  await cluster?.close();
  await receiver?.close();
});

test("examples/hello in job mode: each phase's trace holds the server's spans and the pod worker's stage spans under them", async () => {
  await stack.server.api("POST", "/api/v1/workspaces", { name: "k8s-traced", pool: stack.pool });
  const runId = await stack.startRun(join(repo, "examples", "hello"), "k8s-traced", ["--auto-apply"]);
  assert.equal((await stack.waitForRun(runId, ["applied", "errored", "canceled"], 120_000)).status, "applied", controller.output());
  const jobs = (await stack.server.api("GET", `/api/v1/runs/${runId}/jobs`)).body.items as Array<{ id: string; phase: string }>;
  for (const job of jobs) {
    const root = await eventually(`the server's ${job.phase} job span`, async () => receiver.spans.find((s) => s.name === "job" && s.attributes["drover.job.id"] === job.id), 30_000);
    const worker = await eventually(`the pod worker's ${job.phase} span`, async () => receiver.spans.find((s) => s.traceId === root.traceId && s.name === `agent ${job.phase}`), 30_000);
    assert.equal(worker.parentSpanId, root.spanId, "the worker's span hangs under the server's job span");
    assert.equal(worker.resource["service.name"], "drover-worker");
    assert.ok(String(worker.resource["k8s.pod.name"] ?? "").length > 0, "the pod is named");
    const inTrace = () => receiver.spans.filter((s) => s.traceId === root.traceId);
    assert.equal(inTrace().filter((s) => s.name === "queued" && s.parentSpanId === root.spanId).length, 1);
    const stages = job.phase === "plan" ? ["claimed", "configuration download", "init", "plan", "uploads", "finish"] : ["claimed", "configuration download", "init", "apply", "uploads", "finish"];
    const children = await eventually(`the ${job.phase} stages`, async () => {
      const c = inTrace().filter((s) => s.parentSpanId === worker.spanId).map((s) => s.name);
      return stages.every((n) => c.includes(n)) ? c : undefined;
    }, 30_000);
    assert.deepEqual(children.filter((n) => stages.includes(n)).sort(), [...stages].sort());
    // The controller's Kubernetes stages, in order, under the job span: Job created → pod scheduled → container started.
    const k8s = await eventually(`the controller's ${job.phase} stages`, async () => {
      const found = ["kubernetes job created", "pod scheduled", "container started"].map((n) => inTrace().find((s) => s.name === n));
      return found.every((f) => f !== undefined) ? found.map((f) => f!) : undefined;
    }, 30_000);
    for (const s of k8s) {
      assert.equal(s.parentSpanId, root.spanId, `${s.name} hangs under the job span`);
      assert.equal(s.resource["service.name"], "drover-controller");
    }
    assert.ok(k8s[0]!.endNs <= k8s[1]!.endNs && k8s[1]!.endNs <= k8s[2]!.endNs, "created, then scheduled, then started");
    assert.ok(k8s[2]!.endNs <= worker.startNs + 2_000_000_000n, "the worker's span begins once its container runs (second-resolution API times)");
  }
});
