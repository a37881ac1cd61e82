// Kubernetes job mode with OTLP: the controller passes its endpoint to each run pod's worker,
// whose spans join the job's trace through the assignment's traceparent (carried in the job
// Secret): the server's root `job` span, its `queued` wait, and under it the pod worker's span
// with its stages — three processes, one trace per phase.
import assert from "node:assert/strict";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";
import { after, before, test } from "node:test";
import { startStack, type Stack } from "../support/stack.js";
import { freePort, type Proc } from "../support/processes.js";
import { scrape } from "../support/metric-values.js";
import { startOtlpReceiver, type OtlpReceiver } from "../support/otlp-receiver.js";
import { eventually, fastTimings, startTestCluster, type TestCluster } from "./cluster.js";
import {
  agentRegistered,
  createAgentTask,
  podWorker,
  prepareNamespace,
  startJobModeController,
  terraformRunner,
  controllerStages,
} from "./agents.js";
import { routes } from "@drover/protocol";

const repo = join(dirname(fileURLToPath(import.meta.url)), "..", "..", "..");
const ns = "drover";
let cluster: TestCluster;
let stack: Stack;
let controller: Proc;
let receiver: OtlpReceiver;
let controllerPort: number;

before(async () => {
  receiver = await startOtlpReceiver();
  cluster = await startTestCluster({ timings: fastTimings });
  stack = await startStack({ DROVER_OTLP_ENDPOINT: receiver.url });
  await prepareNamespace(cluster, ns);
  await createAgentTask(cluster, ns, "task-template", [podWorker(), terraformRunner(stack)], {
    jobSpec: { ttlSecondsAfterFinished: 600 },
  });
  controllerPort = await freePort();
  controller = startJobModeController(cluster, stack, {
    ns,
    name: "traced-ctl",
    env: { DROVER_AGENT_HEALTH_PORT: String(controllerPort), DROVER_AGENT_OTLP_ENDPOINT: receiver.url },
  });
  await agentRegistered(stack, "traced-ctl");
});

after(async () => {
  await controller?.stop("SIGKILL");
  await stack?.stop();
  await cluster?.close();
  await receiver?.close();
});

test("examples/hello in job mode: each phase's trace holds the server's spans and the pod worker's stage spans under them", async () => {
  await stack.server.api(routes.createWorkspace, { body: { name: "k8s-traced", pool: stack.pool } });
  const runId = await stack.startRun(join(repo, "examples", "hello"), "k8s-traced", ["--auto-apply"]);
  assert.equal(
    (await stack.waitForRun(runId, ["applied", "errored", "canceled"], 120_000)).status,
    "applied",
    controller.output(),
  );
  const jobs = (await stack.server.api(routes.listRunJobs, { params: { id: runId } })).body.items as Array<{
    id: string;
    phase: string;
  }>;
  for (const job of jobs) {
    const root = await eventually(
      `the server's ${job.phase} job span`,
      async () => receiver.spans.find((s) => s.name === "job" && s.attributes["drover.job.id"] === job.id),
      30_000,
    );
    const worker = await eventually(
      `the pod worker's ${job.phase} span`,
      async () => receiver.spans.find((s) => s.traceId === root.traceId && s.name === `agent ${job.phase}`),
      30_000,
    );
    assert.equal(worker.parentSpanId, root.spanId, "the worker's span hangs under the server's job span");
    assert.equal(worker.resource["service.name"], "drover-worker");
    assert.ok(String(worker.resource["k8s.pod.name"] ?? "").length > 0, "the pod is named");
    const inTrace = () => receiver.spans.filter((s) => s.traceId === root.traceId);
    assert.equal(inTrace().filter((s) => s.name === "queued" && s.parentSpanId === root.spanId).length, 1);
    const stages =
      job.phase === "plan"
        ? ["claimed", "fetch", "engine", "extract", "caches", "init", "plan", "uploads", "finish"]
        : ["claimed", "fetch", "engine", "extract", "caches", "init", "apply", "outputs", "uploads", "finish"];
    const children = await eventually(
      `the ${job.phase} stages`,
      async () => {
        const c = inTrace()
          .filter((s) => s.parentSpanId === worker.spanId)
          .map((s) => s.name);
        return stages.every((n) => c.includes(n)) ? c : undefined;
      },
      30_000,
    );
    assert.deepEqual(children.filter((n) => stages.includes(n)).sort(), [...stages].sort());
    // The controller's Kubernetes stages, in order, under the job span: Job created → pod scheduled → image pulled → container started.
    const k8s = await controllerStages(inTrace, root.spanId, job.phase);
    const [, scheduled, pulled, started] = k8s;
    // The pull is the test cluster kubelet's Pulled event of the worker container: it starts where scheduling ended, the container's start where it ended.
    assert.equal(pulled!.attributes["drover.k8s.pulled_event"], true, "ended by the kubelet's Pulled event");
    assert.equal(pulled!.attributes["k8s.container.name"], "worker");
    assert.equal(pulled!.attributes["container.image.name"], "ghcr.io/drover-dev/drover:test");
    assert.equal(pulled!.startNs, scheduled!.endNs);
    assert.equal(started!.startNs, pulled!.endNs);
    assert.ok(
      k8s[3]!.endNs <= worker.startNs + 2_000_000_000n,
      "the worker's span begins once its container runs (second-resolution API times)",
    );
  }

  // The controller's metrics of the two Jobs: startup latency (Job created → worker running) once per Job, heartbeats timed, no errors.
  const metrics = `http://127.0.0.1:${controllerPort}/metrics`;
  assert.equal(await scrape(metrics, "drover_controller_job_startup_latency_seconds_count"), 2);
  const startup = (await scrape(metrics, "drover_controller_job_startup_latency_seconds_sum"))!;
  assert.ok(startup > 0 && startup < 120, `startup latency sum ${startup} s`);
  await eventually(
    "a timed controller heartbeat",
    async () => ((await scrape(metrics, "drover_controller_heartbeat_duration_seconds_count")) ?? 0) > 0 || undefined,
    30_000,
  );
  assert.equal(await scrape(metrics, "drover_controller_errors_total"), undefined, "no controller error");
  assert.equal(await scrape(metrics, "drover_controller_pod_failures_total"), undefined, "no pod failure");

  // Each run pod's worker exported its log bytes at its end (OTLP only: the pod is gone): what the server stored of that phase.
  for (const job of jobs) {
    const received = (await scrape(`${stack.server.url}/metrics`, "drover_log_bytes_received_total", {
      phase: job.phase,
    }))!;
    const shipped = await eventually(
      `the ${job.phase} pod's final log bytes`,
      async () => {
        const points = receiver.metrics
          .filter((m) => m.name === "drover_worker_log_bytes_shipped_total" && m.resource["drover.phase"] === job.phase)
          .flatMap((m) => m.points);
        const last = Math.max(0, ...points.map((p) => p.value));
        return last === received ? last : undefined;
      },
      30_000,
    );
    assert.ok(shipped > 0);
  }
});
