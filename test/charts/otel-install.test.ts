// The job charts' otel values end to end on the test cluster: agent-job and agent-k8s rendered
// with otel.endpoint (an OTLP/HTTP receiver on 127.0.0.1; pods here share this machine's
// network), otel.metricsEnabled and otel.tracesEnabled, applied, and examples/hello run through
// the installed release. Each value must reach the processes: the controller (from the chart),
// each run pod's worker (passed on by the controller) and agent-k8s's node worker (from the
// chart): with both on their spans join the run's trace and their metrics arrive; with traces
// off and metrics on only metrics do. A pool, a namespace and a receiver per release.
// Where podman runs here, the pods are real containers of the locally built drover and runner
// images; elsewhere the host-process shim stands in (chartImages).
import assert from "node:assert/strict";
import { join } from "node:path";
import { after, before, test } from "node:test";
import { routes } from "@drover/protocol";
import { runLog, startStack, type Stack } from "../support/stack.js";
import { startOtlpReceiver, type OtlpReceiver } from "../support/otlp-receiver.js";
import {
  applyRendered,
  assertRanFromImages,
  chartImages,
  isReady,
  kubectlOut,
  namespace,
  repo,
  runnerValues,
  template,
  templateAgentK8s,
  chartTimings,
  type ChartImages,
} from "../support/chart-cluster.js";
import { kube, startTestCluster, until, type TestCluster } from "../kube/cluster.js";

let cluster: TestCluster;
let stack: Stack;
const receivers: OtlpReceiver[] = [];
let images: ChartImages;
const startedAt = new Date();

before(
  async () => {
    images = await chartImages(join(repo, "test", "dist", ".chart-otel"));
    cluster = await startTestCluster({ timings: chartTimings, ...images.options });
    stack = await startStack();
  },
  { timeout: 20 * 60_000 },
);
after(async () => {
  await stack?.stop();
  await cluster?.close();
  await Promise.all(receivers.map((r) => r.close()));
});

/** A pool of its own for one release (two controllers of one pool would share its runs). */
async function pool(name: string): Promise<string> {
  await stack.server.api(routes.createPool, { body: { name } });
  return (await stack.server.api(routes.createPoolToken, { params: { pool: name }, body: { description: name } })).body
    .token;
}

const port = () => 20000 + Math.floor(Math.random() * 20000);

/** Installs `rendered` into `ns`, waits for `components` Ready, runs examples/hello on `poolName`; returns the run's job ids. */
async function installAndRun(
  ns: string,
  rendered: string,
  poolName: string,
  components: string[],
): Promise<{ jobs: Array<{ id: string; phase: string }>; diagnose: () => Promise<string> }> {
  await namespace(cluster, ns, "privileged");
  const applied = await applyRendered(cluster, ns, rendered);
  assert.equal(applied.code, 0, applied.out);
  const pods = async () => (await kube(cluster, "GET", `/api/v1/namespaces/${ns}/pods`)).body.items as any[];
  const diagnose = async () =>
    `${(await kubectlOut(cluster, ["get", "pods,events", "-n", ns, "-o", "wide"])).out}\n${(await kubectlOut(cluster, ["logs", "-n", ns, "-l", "app.kubernetes.io/component=controller", "--tail=40"])).out}`;
  const of = (ps: any[], c: string) => ps.filter((p) => p.metadata.labels?.["app.kubernetes.io/component"] === c);
  await until(
    `${components.join(" and ")} Ready`,
    pods,
    (ps) => components.every((c) => of(ps, c).some(isReady)),
    120_000,
  ).catch(async (e: Error) => assert.fail(`${e.message}\n${await diagnose()}`));
  const ws = `${ns}-hello`;
  await stack.server.api(routes.createWorkspace, { body: { name: ws, pool: poolName } });
  const runId = await stack.startRun(join(repo, "examples", "hello"), ws, ["--auto-apply"]);
  const done = await stack.waitForRun(runId, ["applied", "errored", "canceled"], 240_000);
  assert.equal(done.status, "applied", `${await runLog(stack.server, runId, "plan")}\n${await diagnose()}`);
  return { jobs: (await stack.server.api(routes.listRunJobs, { params: { id: runId } })).body.items, diagnose };
}

/** The OTLP variables of `container` in the pods of `ns` matching `selector`, by name. */
async function otlpEnv(ns: string, selector: string, container: string): Promise<Record<string, string>> {
  const items = (
    await kube(cluster, "GET", `/api/v1/namespaces/${ns}/pods?labelSelector=${encodeURIComponent(selector)}`)
  ).body.items as any[];
  const c = items[0]?.spec.containers.find((x: any) => x.name === container);
  return Object.fromEntries(
    (c?.env ?? []).filter((e: any) => e.name.startsWith("DROVER_AGENT_OTLP_")).map((e: any) => [e.name, e.value]),
  );
}

/** Deletes `ns`'s pods of `component` (SIGTERM: they flush their telemetry as they stop). */
async function stopPods(ns: string, component: string): Promise<void> {
  const r = await kubectlOut(cluster, [
    "delete",
    "pods",
    "-n",
    ns,
    "-l",
    `app.kubernetes.io/component=${component}`,
    "--wait=false",
  ]);
  assert.equal(r.code, 0, r.out);
}

const services = (r: OtlpReceiver, kind: "spans" | "metrics") =>
  new Set((kind === "spans" ? r.spans : r.metrics).map((x) => String(x.resource["service.name"])));

test("agent-job: otel.endpoint with metrics and traces on — the controller's and each run pod worker's spans join the run's trace, and both export their metrics", async () => {
  const receiver = await startOtlpReceiver();
  receivers.push(receiver);
  const ns = "otel-job";
  const token = await pool(ns);
  const values = [
    "--set",
    `otel.endpoint=${receiver.url}`,
    "--set",
    "otel.metricsEnabled=true",
    "--set",
    "otel.tracesEnabled=true",
  ];
  const rendered = template("agent-job", ns, [
    "--set",
    `agent.token=${token}`,
    "--set",
    `agent.url=${stack.server.url}`,
    "--set",
    "image.tag=test",
    "--set",
    `agent.healthPort=${port()}`,
    ...runnerValues(images),
    ...values,
  ]);
  const { jobs, diagnose } = await installAndRun(ns, rendered, ns, ["controller"]);
  const expected = {
    DROVER_AGENT_OTLP_ENDPOINT: receiver.url,
    DROVER_AGENT_OTLP_METRICS_ENABLED: "true",
    DROVER_AGENT_OTLP_TRACES_ENABLED: "true",
  };
  assert.deepEqual(
    await otlpEnv(ns, "app.kubernetes.io/component=controller", "controller"),
    expected,
    "the controller gets the chart's otel values",
  );
  for (const job of jobs) {
    // The server exports no spans here (no DROVER_OTLP_ENDPOINT): the pods' spans name the job's trace through the assignment's traceparent.
    const worker = await until(
      `the ${job.phase} pod worker's span`,
      async () =>
        receiver.spans.find((s) => s.name === `agent ${job.phase}` && s.resource["service.name"] === "drover-worker"),
      (s) => s !== undefined,
      30_000,
    ).catch(async (e: Error) => assert.fail(`${e.message}\n${await diagnose()}`));
    const inTrace = receiver.spans.filter((s) => s.traceId === worker!.traceId);
    assert.ok(
      inTrace.some(
        (s) =>
          s.name === "container started" &&
          s.resource["service.name"] === "drover-controller" &&
          s.parentSpanId === worker!.parentSpanId,
      ),
      "the controller's stages share the worker's parent (the job span)",
    );
  }
  // Each run pod's worker ships its log bytes; a periodic export before its first log (OTEL_METRIC_EXPORT_INTERVAL
  // reaches the pods) adds a point of 0 beside them.
  await until(
    "the run pod workers' metrics",
    async () =>
      receiver.metrics.filter((m) => m.name === "drover_worker_log_bytes_shipped_total").flatMap((m) => m.points),
    (ps) => ps.filter((p) => p.value > 0).length >= jobs.length,
    30_000,
  );
  // The controller exports at its stop.
  await stopPods(ns, "controller");
  const launched = await until(
    "the controller's metrics",
    async () =>
      receiver.metrics
        .filter(
          (m) =>
            m.name === "drover_controller_jobs_launched_total" && m.resource["service.name"] === "drover-controller",
        )
        .flatMap((m) => m.points),
    (ps) => ps.some((p) => p.value === 2),
    60_000,
  );
  assert.ok(launched.length > 0);
  await assertRanFromImages(cluster, images, startedAt, [
    ["drover", "controller"],
    ["drover", "worker"],
    ["runner", "runner"],
  ]);
});

test("agent-job: otel.tracesEnabled=false, metricsEnabled=true — metrics arrive from the controller and the run pods, no span does", async () => {
  const receiver = await startOtlpReceiver();
  receivers.push(receiver);
  const ns = "otel-job-metrics";
  const token = await pool(ns);
  const rendered = template(
    "agent-job",
    ns,
    [
      "--set",
      `agent.token=${token}`,
      "--set",
      `agent.url=${stack.server.url}`,
      "--set",
      "image.tag=test",
      "--set",
      `agent.healthPort=${port()}`,
      ...runnerValues(images),
      "--set",
      `otel.endpoint=${receiver.url}`,
      "--set",
      "otel.metricsEnabled=true",
      "--set",
      "otel.tracesEnabled=false",
    ],
    { release: "d-job-m" },
  );
  await installAndRun(ns, rendered, ns, ["controller"]);
  assert.equal(
    (await otlpEnv(ns, "app.kubernetes.io/component=controller", "controller")).DROVER_AGENT_OTLP_TRACES_ENABLED,
    "false",
  );
  await until(
    "the run pod workers' metrics",
    async () => receiver.metrics.filter((m) => m.name === "drover_worker_log_bytes_shipped_total"),
    (ms) => ms.length >= 2,
    30_000,
  );
  await stopPods(ns, "controller");
  await until(
    "the controller's metrics",
    async () => services(receiver, "metrics"),
    (s) => s.has("drover-controller"),
    60_000,
  );
  assert.deepEqual([...services(receiver, "spans")], [], "traces off: no process sent a span");
});

test("agent-k8s: otel values reach the controller and the node worker — the node worker's run spans and the controller's pod stages in one trace, both export metrics", async () => {
  const receiver = await startOtlpReceiver();
  receivers.push(receiver);
  const ns = "otel-nodes";
  const token = await pool(ns);
  const rendered = templateAgentK8s(ns, port(), [
    "--set",
    `agent.token=${token}`,
    "--set",
    `agent.url=${stack.server.url}`,
    "--set",
    "image.tag=test",
    "--set",
    "workerDaemonSet.prepareDataHome=true",
    ...runnerValues(images),
    "--set",
    `otel.endpoint=${receiver.url}`,
    "--set",
    "otel.metricsEnabled=true",
    "--set",
    "otel.tracesEnabled=true",
  ]);
  const { jobs, diagnose } = await installAndRun(ns, rendered, ns, ["controller", "worker"]);
  const expected = {
    DROVER_AGENT_OTLP_ENDPOINT: receiver.url,
    DROVER_AGENT_OTLP_METRICS_ENABLED: "true",
    DROVER_AGENT_OTLP_TRACES_ENABLED: "true",
  };
  assert.deepEqual(
    await otlpEnv(ns, "app.kubernetes.io/component=worker", "worker"),
    expected,
    "the DaemonSet's node worker gets the chart's otel values",
  );
  for (const job of jobs) {
    const worker = await until(
      `the node worker's ${job.phase} span`,
      async () =>
        receiver.spans.find(
          (s) => s.name === `agent ${job.phase}` && s.resource["service.name"] === "drover-node-worker",
        ),
      (s) => s !== undefined,
      30_000,
    ).catch(async (e: Error) => assert.fail(`${e.message}\n${await diagnose()}`));
    const inTrace = receiver.spans.filter((s) => s.traceId === worker!.traceId);
    assert.ok(
      inTrace.some((s) => s.name === "init" && s.parentSpanId === worker!.spanId),
      "its stages under it",
    );
    assert.ok(
      inTrace.some(
        (s) =>
          s.name === "image pulled" &&
          s.resource["service.name"] === "drover-controller" &&
          s.parentSpanId === worker!.parentSpanId,
      ),
      "the controller's stages under the same job span",
    );
  }
  await stopPods(ns, "worker");
  await stopPods(ns, "controller");
  await until(
    "both processes' metrics",
    async () => services(receiver, "metrics"),
    (s) => s.has("drover-node-worker") && s.has("drover-controller"),
    60_000,
  );
  const shipped = receiver.metrics
    .filter((m) => m.name === "drover_node_worker_log_bytes_shipped_total")
    .flatMap((m) => m.points);
  assert.ok(
    shipped.some((p) => p.value > 0),
    JSON.stringify(shipped),
  );
});
