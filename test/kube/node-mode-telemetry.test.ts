// agent-k8s's node-worker mode with OTLP: the node worker (standing in for its DaemonSet pod)
// exports each run's spans under the job's trace through the assignment's traceparent (read from
// the job Secret), the controller its Kubernetes stages of the runner-only pod, the server the
// root: one trace per phase across three processes. At its stop the node worker flushes its
// metrics: the log bytes it shipped are what the server stored.
import assert from "node:assert/strict";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";
import { after, before, test } from "node:test";
import { startStack, type Stack } from "../support/stack.js";
import { assertStageOrder, startOtlpReceiver, type OtlpReceiver } from "../support/otlp-receiver.js";
import { scrape } from "../support/metric-values.js";
import { eventually, fastTimings, startTestCluster, type TestCluster } from "./cluster.js";
import {
  createAgentTask,
  prepareNamespace,
  startNodeModeAgents,
  terraformRunner,
  type NodeModeAgents,
  controllerStages,
} from "./agents.js";
import { routes } from "@drover/protocol";

const repo = join(dirname(fileURLToPath(import.meta.url)), "..", "..", "..");
const ns = "drover-nodes-traced";
let cluster: TestCluster;
let stack: Stack;
let agents: NodeModeAgents | undefined;
let receiver: OtlpReceiver;

before(async () => {
  receiver = await startOtlpReceiver();
  cluster = await startTestCluster({ timings: fastTimings, hostPaths: "real" });
  stack = await startStack({ DROVER_OTLP_ENDPOINT: receiver.url });
  await prepareNamespace(cluster, ns);
  await createAgentTask(cluster, ns, "task-template", [terraformRunner(stack)]);
  agents = await startNodeModeAgents(cluster, stack, {
    ns,
    name: "traced-node-ctl",
    template: "task-template",
    env: { DROVER_AGENT_OTLP_ENDPOINT: receiver.url },
  });
});

after(async () => {
  await agents?.stop();
  await stack?.stop();
  await cluster?.close();
  await receiver?.close();
});

test("examples/hello in node-worker mode: each phase's trace holds the server's root, the controller's pod stages and the node worker's stage spans, parented across processes", async () => {
  await stack.server.api(routes.createWorkspace, { body: { name: "node-traced", pool: stack.pool } });
  const runId = await stack.startRun(join(repo, "examples", "hello"), "node-traced", ["--auto-apply"]);
  assert.equal(
    (await stack.waitForRun(runId, ["applied", "errored", "canceled"], 120_000)).status,
    "applied",
    `${agents!.controller.output()}\n${agents!.nodeWorker.output()}`,
  );
  const jobs = (await stack.server.api(routes.listRunJobs, { params: { id: runId } })).body.items as Array<{
    id: string;
    phase: string;
  }>;
  assert.equal(jobs.length, 2);
  for (const job of jobs) {
    const root = await eventually(
      `the server's ${job.phase} job span`,
      async () => receiver.spans.find((s) => s.name === "job" && s.attributes["drover.job.id"] === job.id),
      30_000,
    );
    const inTrace = () => receiver.spans.filter((s) => s.traceId === root.traceId);
    const worker = await eventually(
      `the node worker's ${job.phase} span`,
      async () => inTrace().find((s) => s.name === `agent ${job.phase}`),
      30_000,
    );
    assert.equal(worker.parentSpanId, root.spanId, "the node worker's span hangs under the server's job span");
    assert.equal(worker.resource["service.name"], "drover-node-worker");
    assert.equal(worker.resource["k8s.node.name"], "ktc-node");
    assert.equal(worker.resource["drover.controller"], "traced-node-ctl");
    const stages =
      job.phase === "plan"
        ? ["claimed", "fetch", "engine", "extract", "caches", "init", "plan", "uploads", "finish"]
        : ["claimed", "fetch", "engine", "extract", "caches", "init", "apply", "outputs", "uploads", "finish"];
    const children = await eventually(
      `the ${job.phase} stages`,
      async () => {
        const c = inTrace().filter((s) => s.parentSpanId === worker.spanId);
        return stages.every((n) => c.some((s) => s.name === n)) ? c : undefined;
      },
      30_000,
    );
    let previous = { startNs: 0n, endNs: 0n };
    for (const name of stages) {
      const s = children.find((c) => c.name === name)!;
      assertStageOrder(name, s, previous);
      previous = s;
    }
    // The controller's stages of the runner-only pod: in node mode the runner is the container that starts the run.
    const k8s = await controllerStages(inTrace, root.spanId, job.phase);
    assert.equal(k8s[2]!.attributes["k8s.container.name"], "runner");
    assert.equal(k8s[2]!.attributes["drover.k8s.pulled_event"], true);
  }

  // Stopping flushes the node worker's metrics: the log bytes it shipped are what the server stored of both phases.
  const nodeWorker = agents!.nodeWorker;
  nodeWorker.child.kill("SIGTERM");
  assert.equal((await nodeWorker.exited).code, 0, nodeWorker.output());
  const server = `${stack.server.url}/metrics`;
  const stored =
    (await scrape(server, "drover_log_bytes_received_total", { phase: "plan" }))! +
    (await scrape(server, "drover_log_bytes_received_total", { phase: "apply" }))!;
  const shipped = receiver.metrics
    .filter(
      (m) =>
        m.name === "drover_node_worker_log_bytes_shipped_total" && m.resource["service.name"] === "drover-node-worker",
    )
    .flatMap((m) => m.points);
  assert.equal(Math.max(0, ...shipped.map((p) => p.value)), stored);
  assert.ok(receiver.metrics.some((m) => m.name === "drover_node_worker_runs" && m.kind === "gauge"));
});
