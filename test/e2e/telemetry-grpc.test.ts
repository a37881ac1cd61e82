// The other OTLP settings: DROVER_OTLP_PROTOCOL / DROVER_AGENT_OTLP_PROTOCOL=grpc send the same
// spans and metrics to an OTLP/gRPC receiver (a grpc-js server on 127.0.0.1 taking the
// collector services' Export calls), and *_TRACES_ENABLED=false / *_METRICS_ENABLED=false turn
// each signal off on its own.
import assert from "node:assert/strict";
import { join } from "node:path";
import { fileURLToPath } from "node:url";
import { after, before, test } from "node:test";
import * as grpc from "@grpc/grpc-js";
import {
  decodeMetrics,
  decodeTraces,
  startOtlpReceiver,
  type OtlpReceiver,
  type ReceivedMetric,
  type ReceivedSpan,
} from "../support/otlp-receiver.js";
import { startStack, type Stack } from "../support/stack.js";
import { startTestServer } from "../support/server.js";
import { eventually } from "../support/fault-runs.js";
import { routes } from "@drover/protocol";

const repo = join(fileURLToPath(new URL(".", import.meta.url)), "..", "..", "..");
const spans: ReceivedSpan[] = [];
const metrics: ReceivedMetric[] = [];
let grpcServer: grpc.Server;
let grpcUrl: string;
let httpReceiver: OtlpReceiver;
let stack: Stack;

/** A unary Export method taking raw protobuf bytes. */
function exportMethod(path: string): grpc.MethodDefinition<Buffer, Buffer> {
  const raw = (b: Buffer) => b;
  return {
    path,
    requestStream: false,
    responseStream: false,
    requestSerialize: raw,
    requestDeserialize: raw,
    responseSerialize: raw,
    responseDeserialize: raw,
  };
}

before(async () => {
  grpcServer = new grpc.Server();
  grpcServer.addService(
    { Export: exportMethod("/opentelemetry.proto.collector.trace.v1.TraceService/Export") },
    {
      Export: (call: grpc.ServerUnaryCall<Buffer, Buffer>, done: grpc.sendUnaryData<Buffer>) => {
        spans.push(...decodeTraces(call.request));
        done(null, Buffer.alloc(0));
      },
    },
  );
  grpcServer.addService(
    { Export: exportMethod("/opentelemetry.proto.collector.metrics.v1.MetricsService/Export") },
    {
      Export: (call: grpc.ServerUnaryCall<Buffer, Buffer>, done: grpc.sendUnaryData<Buffer>) => {
        metrics.push(...decodeMetrics(call.request));
        done(null, Buffer.alloc(0));
      },
    },
  );
  const port = await new Promise<number>((resolve, reject) =>
    grpcServer.bindAsync("127.0.0.1:0", grpc.ServerCredentials.createInsecure(), (err, p) =>
      err ? reject(err) : resolve(p),
    ),
  );
  grpcUrl = `http://127.0.0.1:${port}`;
  httpReceiver = await startOtlpReceiver();
  stack = await startStack({ DROVER_OTLP_ENDPOINT: grpcUrl, DROVER_OTLP_PROTOCOL: "grpc" });
});
after(async () => {
  await stack?.stop();
  grpcServer?.forceShutdown();
  await httpReceiver?.close();
});

test("grpc: the server's and the agent's spans and metrics reach an OTLP/gRPC receiver", async () => {
  const agent = await stack.startAgent("grpc", {
    DROVER_AGENT_OTLP_ENDPOINT: grpcUrl,
    DROVER_AGENT_OTLP_PROTOCOL: "grpc",
  });
  await stack.server.api(routes.createWorkspace, { body: { name: "grpc-hello", pool: stack.pool } });
  const runId = await stack.startRun(join(repo, "examples", "hello"), "grpc-hello", ["--auto-apply"]);
  assert.equal((await stack.waitForRun(runId, ["applied", "errored"], 120_000)).status, "applied");
  await agent.stop("SIGTERM");
  const root = await eventually(
    "the server's plan job span over gRPC",
    async () =>
      spans.find(
        (s) => s.name === "job" && s.attributes["drover.run.id"] === runId && s.attributes["drover.phase"] === "plan",
      ),
    30_000,
  );
  const agentSpan = spans.find((s) => s.traceId === root.traceId && s.name === "agent plan");
  assert.ok(agentSpan, "the agent's span over gRPC");
  assert.equal(agentSpan.parentSpanId, root.spanId);
  assert.ok(
    metrics.some((m) => m.name === "drover_agent_jobs_finished_total" && m.resource["service.name"] === "drover-agent"),
  );
});

test("TRACES_ENABLED=false and METRICS_ENABLED=false turn each signal off", async () => {
  const tracesOff = await startTestServer({
    DROVER_OTLP_ENDPOINT: httpReceiver.url,
    DROVER_OTLP_TRACES_ENABLED: "false",
  });
  await tracesOff.api(routes.createPool, { body: { name: "metrics-only" } });
  await tracesOff.stop();
  assert.ok(
    httpReceiver.metrics.some((m) => m.name === "drover_pool_jobs_pending"),
    "metrics still exported",
  );
  assert.equal(httpReceiver.requests.filter((r) => r.path === "/v1/traces").length, 0, "no trace export");

  const before = httpReceiver.requests.length;
  const bothOff = await startTestServer({
    DROVER_OTLP_ENDPOINT: httpReceiver.url,
    DROVER_OTLP_TRACES_ENABLED: "false",
    DROVER_OTLP_METRICS_ENABLED: "false",
  });
  await bothOff.api(routes.createPool, { body: { name: "nothing" } });
  await bothOff.stop();
  assert.equal(httpReceiver.requests.length, before, "nothing exported");

  // The agent: metrics off, traces on.
  const agent = await stack.startAgent("no-metrics", {
    DROVER_AGENT_OTLP_ENDPOINT: httpReceiver.url,
    DROVER_AGENT_OTLP_METRICS_ENABLED: "false",
  });
  await stack.server.api(routes.createWorkspace, { body: { name: "no-metrics", pool: stack.pool } });
  const runId = await stack.startRun(join(repo, "examples", "hello"), "no-metrics", ["--plan-only"]);
  assert.equal(
    (await stack.waitForRun(runId, ["planned_and_finished", "errored"], 120_000)).status,
    "planned_and_finished",
  );
  await agent.stop("SIGTERM");
  assert.ok(
    httpReceiver.spans.some((s) => s.name === "agent plan" && s.attributes["drover.run.id"] === runId),
    "the agent's traces arrive",
  );
  assert.ok(!httpReceiver.metrics.some((m) => m.resource["service.name"] === "drover-agent"), "no agent metrics");
});
