// OTLP export end to end: a server and a local agent pointed at an OTLP/HTTP (protobuf)
// receiver on 127.0.0.1 run examples/hello; each phase's trace has the server's job span as
// root, the queue wait and the agent's span as its children, and the agent's stage spans
// under that — parented across the two processes through the traceparent in the job
// assignment. The metrics of both /metrics endpoints arrive under the same names. An agent
// with no endpoint loads no OpenTelemetry module at all.
import assert from "node:assert/strict";
import { existsSync, readFileSync } from "node:fs";
import { join } from "node:path";
import { fileURLToPath } from "node:url";
import { after, before, test } from "node:test";
import { assertStageOrder, startOtlpReceiver, type OtlpReceiver, type ReceivedSpan } from "../support/otlp-receiver.js";
import { startStack, type Stack } from "../support/stack.js";
import { eventually } from "../support/fault-runs.js";
import { routes } from "@drover/protocol";

const repo = join(fileURLToPath(new URL(".", import.meta.url)), "..", "..", "..");
const watchModule = join(repo, "test", "dist", "support", "module-watch.js");

let receiver: OtlpReceiver;
let stack: Stack;
before(async () => {
  receiver = await startOtlpReceiver();
  stack = await startStack({ DROVER_OTLP_ENDPOINT: receiver.url });
});
after(async () => {
  await stack?.stop();
  await receiver?.close();
});

test("examples/hello through a local agent: a trace per phase with the stage spans, parented across server and agent; the metrics under their /metrics names", async () => {
  const moduleLog = join(stack.dir, "modules-with-endpoint.log");
  const agent = await stack.startAgent("traced", {
    DROVER_AGENT_OTLP_ENDPOINT: receiver.url,
    NODE_OPTIONS: `--import=${watchModule}`,
    DROVER_TEST_MODULE_LOG: moduleLog,
  });
  await stack.server.api(routes.createWorkspace, { body: { name: "traced-hello", pool: stack.pool } });
  const runId = await stack.startRun(join(repo, "examples", "hello"), "traced-hello", ["--auto-apply"]);
  assert.equal((await stack.waitForRun(runId, ["applied", "errored", "canceled"], 120_000)).status, "applied");
  // Stopping flushes what the agent buffered.
  await agent.stop("SIGTERM");
  assert.ok(
    existsSync(moduleLog) && readFileSync(moduleLog, "utf8").includes("@opentelemetry"),
    "with an endpoint the exporter is loaded",
  );

  const jobs = (await stack.server.api(routes.listRunJobs, { params: { id: runId } })).body.items as Array<{
    id: string;
    phase: string;
  }>;
  assert.equal(jobs.length, 2);
  for (const job of jobs) {
    const root = await eventually(
      `the server's span of the ${job.phase} job`,
      async () => receiver.spans.find((s) => s.name === "job" && s.attributes["drover.job.id"] === job.id),
      30_000,
    );
    const trace = () => receiver.spans.filter((s) => s.traceId === root.traceId);
    const named = (name: string, spans: ReceivedSpan[] = trace()) => {
      const found = spans.filter((s) => s.name === name);
      assert.equal(
        found.length,
        1,
        `one ${name} span in the ${job.phase} trace: ${trace()
          .map((s) => s.name)
          .join(", ")}`,
      );
      return found[0]!;
    };
    assert.equal(root.parentSpanId, "", "the job span is the trace's root");
    assert.equal(root.resource["service.name"], "drover-server");
    assert.equal(root.attributes["drover.run.id"], runId);
    assert.equal(root.attributes["drover.outcome"], "succeeded");
    const queued = named("queued");
    assert.equal(queued.parentSpanId, root.spanId);
    assert.ok(queued.startNs >= root.startNs && queued.endNs <= root.endNs);
    const agentSpan = named(`agent ${job.phase}`);
    assert.equal(agentSpan.parentSpanId, root.spanId, "the agent's span hangs under the server's job span");
    assert.equal(agentSpan.resource["service.name"], "drover-agent");
    assert.equal(agentSpan.resource["drover.agent"], "traced");
    assert.equal(agentSpan.resource["drover.pool"], stack.pool);
    assert.ok(agentSpan.startNs >= queued.endNs - 5_000_000n, "the agent's work starts after the queue wait");
    const stages =
      job.phase === "plan"
        ? ["claimed", "fetch", "engine", "extract", "caches", "init", "plan", "uploads", "finish"]
        : // The agent kept the plan's directory: its apply has no extract and no init.
          ["claimed", "fetch", "engine", "caches", "apply", "outputs", "uploads", "finish"];
    let previous = { startNs: 0n, endNs: 0n };
    for (const name of stages) {
      const s = named(name);
      assert.equal(s.parentSpanId, agentSpan.spanId, `${name} is a stage of the agent's span`);
      assertStageOrder(name, s, previous);
      assert.ok(s.endNs >= s.startNs && s.endNs <= agentSpan.endNs + 1_000_000n, `${name} ends within the agent span`);
      previous = s;
    }
    // (No bound on the agent span's end: it closes when the server's answer to finish arrives, after the root ended.)
    assert.ok(agentSpan.startNs >= root.startNs);
  }
  // Every request was OTLP/HTTP protobuf.
  assert.ok(
    receiver.requests.every((r) => r.contentType === "application/x-protobuf"),
    JSON.stringify(receiver.requests),
  );

  // The agent's series, under their /metrics names (the final export at its stop).
  const agentMetrics = receiver.metrics.filter((m) => m.resource["service.name"] === "drover-agent");
  const finished = agentMetrics.filter((m) => m.name === "drover_agent_jobs_finished_total").flatMap((m) => m.points);
  assert.ok(
    finished.some((p) => p.attributes.phase === "plan" && p.value === 1),
    JSON.stringify(finished),
  );
  assert.ok(finished.some((p) => p.attributes.phase === "apply" && p.value === 1));
  assert.ok(agentMetrics.some((m) => m.name === "drover_agent_jobs_running" && m.kind === "gauge"));
  assert.ok(agentMetrics.some((m) => m.name === "drover_agent_poll_errors_total" && m.kind === "sum"));
  const shipped = agentMetrics
    .filter((m) => m.name === "drover_agent_log_bytes_shipped_total")
    .flatMap((m) => m.points);
  assert.ok(shipped.length > 0 && shipped.every((p) => p.value > 0), JSON.stringify(shipped));
});

test("the server's gauges reach the collector under their /metrics names", async () => {
  // The server exports at its stop; a second server against the same receiver shows it without stopping the stack's.
  const { startTestServer } = await import("../support/server.js");
  const server = await startTestServer({ DROVER_OTLP_ENDPOINT: receiver.url });
  await server.api(routes.createPool, { body: { name: "otlp-pool" } });
  await server.stop();
  const serverMetrics = receiver.metrics.filter((m) => m.resource["service.name"] === "drover-server");
  const depth = serverMetrics.filter((m) => m.name === "drover_pool_jobs_pending").flatMap((m) => m.points);
  assert.ok(
    depth.some((p) => p.attributes.pool === "otlp-pool" && p.value === 0),
    JSON.stringify(serverMetrics.map((m) => m.name)),
  );
  for (const name of ["drover_queue_depth", "drover_agents", "drover_pool_desired_agents"])
    assert.ok(
      serverMetrics.some((m) => m.name === name),
      name,
    );
  // Histograms too, under their /metrics name, with /metrics' bucket bounds and per-bucket counts.
  const requests = serverMetrics.filter((m) => m.name === "drover_http_request_duration_seconds");
  assert.ok(requests.length > 0 && requests.every((m) => m.kind === "histogram"), JSON.stringify(requests));
  const created = requests
    .flatMap((m) => m.points)
    .find(
      (p) =>
        p.attributes.method === "POST" &&
        p.attributes.route === routes.createPool.path &&
        p.attributes.status === "201",
    );
  assert.ok(created, JSON.stringify(requests.flatMap((m) => m.points).map((p) => p.attributes)));
  assert.equal(created.value, 1, "one request counted");
  assert.deepEqual(created.bounds, [0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 5, 30, 60]);
  assert.equal(
    created.counts!.reduce((a, b) => a + b, 0),
    1,
    "per-bucket counts, not Prometheus' cumulative ones",
  );
  assert.ok(created.sum! > 0);
});

test("with no endpoint set the agent loads no OpenTelemetry module", async () => {
  const moduleLog = join(stack.dir, "modules-without-endpoint.log");
  const agent = await stack.startAgent("untraced", {
    NODE_OPTIONS: `--import=${watchModule}`,
    DROVER_TEST_MODULE_LOG: moduleLog,
  });
  await stack.server.api(routes.createWorkspace, { body: { name: "untraced-hello", pool: stack.pool } });
  const runId = await stack.startRun(join(repo, "examples", "hello"), "untraced-hello", ["--auto-apply"]);
  assert.equal((await stack.waitForRun(runId, ["applied", "errored", "canceled"], 120_000)).status, "applied");
  await agent.stop("SIGTERM");
  const resolved = existsSync(moduleLog) ? readFileSync(moduleLog, "utf8").split("\n") : [];
  assert.ok(resolved.length > 1, "the watch recorded the agent's modules");
  assert.deepEqual(
    resolved.filter((url) => url.includes("@opentelemetry")),
    [],
    "no @opentelemetry module resolved",
  );
});
