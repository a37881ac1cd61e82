// OpenTelemetry's standard variables (OTEL_EXPORTER_OTLP_*, OTEL_SERVICE_NAME,
// OTEL_RESOURCE_ATTRIBUTES, OTEL_METRIC_EXPORT_INTERVAL, OTEL_TRACES_SAMPLER) reach the
// server's and an agent's exports at a real OTLP/HTTP receiver, and Drover's own
// DROVER_…_OTLP_* settings beat them.
import assert from "node:assert/strict";
import { after, before, test } from "node:test";
import { SettingsSource } from "@drover/protocol";
import { otlpSettings } from "@drover/runtime";
import { startOtlpReceiver, type OtlpReceiver } from "../support/otlp-receiver.js";
import { startTestServer } from "../support/server.js";
import { startStack, type Stack } from "../support/stack.js";
import { eventually } from "../support/fault-runs.js";

let receiver: OtlpReceiver;
let other: OtlpReceiver;
let stack: Stack;
before(async () => {
  receiver = await startOtlpReceiver();
  other = await startOtlpReceiver();
  stack = await startStack();
});
after(async () => {
  await stack?.stop();
  await receiver?.close();
  await other?.close();
});

/** Metric exports `r` got from the process whose service.name is `service`, at their arrival times. */
function metricExports(r: OtlpReceiver, service: string) {
  const names = new Set(r.metrics.filter((m) => m.resource["service.name"] === service).map((m) => m.name));
  return { names, requests: r.requests.filter((q) => q.path === "/v1/metrics") };
}

test("the server exports to OTEL_EXPORTER_OTLP_ENDPOINT every OTEL_METRIC_EXPORT_INTERVAL, with the headers, service name and resource attributes given", async () => {
  const seen = receiver.requests.length;
  const server = await startTestServer({
    OTEL_EXPORTER_OTLP_ENDPOINT: receiver.url,
    OTEL_METRIC_EXPORT_INTERVAL: "200",
    OTEL_EXPORTER_OTLP_HEADERS: "authorization=Bearer%20otel-s3cret, x-tenant=drover",
    OTEL_SERVICE_NAME: "drover-server-eu",
    OTEL_RESOURCE_ATTRIBUTES: "deployment.environment=test,service.name=loses-to-OTEL_SERVICE_NAME",
  });
  try {
    // Three exports while the server runs: the default interval (60 s) would give none within the deadline.
    const started = Date.now();
    const exports = await eventually(
      "three metric exports from the running server",
      async () => {
        const got = receiver.requests.slice(seen).filter((q) => q.path === "/v1/metrics");
        return got.length >= 3 ? got : undefined;
      },
      15_000,
    );
    assert.ok(exports[2]!.at - started < 10_000, "exported every 200 ms, not every minute");
    for (const q of exports) {
      assert.equal(q.headers.authorization, "Bearer otel-s3cret", "OTEL_EXPORTER_OTLP_HEADERS, percent-decoded");
      assert.equal(q.headers["x-tenant"], "drover");
    }
    const mine = receiver.metrics.filter((m) => m.resource["service.name"] === "drover-server-eu");
    assert.ok(
      mine.some((m) => m.name === "drover_queue_depth"),
      JSON.stringify([...new Set(receiver.metrics.map((m) => m.resource["service.name"]))]),
    );
    assert.equal(mine[0]!.resource["deployment.environment"], "test", "OTEL_RESOURCE_ATTRIBUTES");
  } finally {
    await server.stop();
  }
});

test("DROVER_OTLP_ENDPOINT and DROVER_OTLP_PROTOCOL beat OTEL_EXPORTER_OTLP_ENDPOINT and _PROTOCOL", async () => {
  const seenHere = receiver.requests.length;
  const seenThere = other.requests.length;
  const server = await startTestServer({
    DROVER_OTLP_ENDPOINT: receiver.url,
    DROVER_OTLP_PROTOCOL: "http/protobuf",
    OTEL_EXPORTER_OTLP_ENDPOINT: other.url,
    OTEL_EXPORTER_OTLP_PROTOCOL: "grpc",
    OTEL_METRIC_EXPORT_INTERVAL: "200",
  });
  try {
    await eventually(
      "two metric exports at DROVER_OTLP_ENDPOINT",
      async () =>
        receiver.requests.slice(seenHere).filter((q) => q.path === "/v1/metrics").length >= 2 ? true : undefined,
      15_000,
    );
    assert.ok(
      receiver.requests.slice(seenHere).every((q) => q.contentType === "application/x-protobuf"),
      "over http/protobuf, not OTEL's grpc",
    );
  } finally {
    await server.stop();
  }
  assert.equal(other.requests.length, seenThere, "nothing went to OTEL_EXPORTER_OTLP_ENDPOINT");
});

test("an agent honours the OTEL_* variables too; its drover.* attributes stay its own", async (t) => {
  const agent = await stack.startAgent("otel-env", {
    OTEL_EXPORTER_OTLP_ENDPOINT: other.url,
    OTEL_METRIC_EXPORT_INTERVAL: "200",
    OTEL_EXPORTER_OTLP_HEADERS: "x-tenant=agents",
    OTEL_RESOURCE_ATTRIBUTES: "deployment.environment=test,drover.pool=spoofed",
  });
  t.after(() => agent.stop("SIGTERM"));
  const mine = await eventually(
    "two metric exports from the running agent",
    async () => {
      const m = other.metrics.filter((x) => x.resource["drover.agent"] === "otel-env");
      return metricExports(other, "drover-agent").requests.length >= 2 && m.length > 0 ? m : undefined;
    },
    30_000,
  );
  assert.equal(mine[0]!.resource["service.name"], "drover-agent", "the process's own name without OTEL_SERVICE_NAME");
  assert.equal(mine[0]!.resource["deployment.environment"], "test");
  assert.equal(mine[0]!.resource["drover.pool"], stack.pool, "drover.pool is the agent's pool, not the spoofed one");
  assert.ok(other.requests.filter((q) => q.path === "/v1/metrics").every((q) => q.headers["x-tenant"] === "agents"));
});

test("the OTEL_* settings compile as the specification reads them; bad values are refused naming the variable", () => {
  const of = (env: Record<string, string>) => otlpSettings(new SettingsSource(env), "agent");
  assert.equal(of({ OTEL_SERVICE_NAME: "x" }), undefined, "no endpoint: no export, nothing loaded");
  const s = of({
    OTEL_EXPORTER_OTLP_ENDPOINT: "http://collector:4317",
    OTEL_EXPORTER_OTLP_PROTOCOL: "grpc",
    OTEL_EXPORTER_OTLP_HEADERS: "a=1,b=x%3Dy%2Cz,,",
    OTEL_TRACES_SAMPLER: "parentbased_traceidratio",
    OTEL_TRACES_SAMPLER_ARG: "0.25",
  })!;
  assert.equal(s.endpoint, "http://collector:4317");
  assert.equal(s.protocol, "grpc");
  assert.deepEqual(s.headers, { a: "1", b: "x=y,z" });
  assert.equal(s.metricsIntervalMs, 60_000, "the specification's default");
  assert.deepEqual([s.sampler, s.samplerRatio], ["parentbased_traceidratio", 0.25]);
  const own = of({
    DROVER_AGENT_OTLP_ENDPOINT: "http://mine:4318",
    OTEL_EXPORTER_OTLP_ENDPOINT: "http://theirs:4317",
    OTEL_EXPORTER_OTLP_PROTOCOL: "grpc",
  })!;
  assert.deepEqual(
    [own.endpoint, own.protocol],
    ["http://mine:4318", "grpc"],
    "Drover's endpoint wins; an unset Drover protocol leaves OTEL's",
  );
  for (const [env, message] of [
    [{ OTEL_EXPORTER_OTLP_HEADERS: "novalue" }, /OTEL_EXPORTER_OTLP_HEADERS must be key=value pairs/],
    [{ OTEL_EXPORTER_OTLP_PROTOCOL: "http/json" }, /OTEL_EXPORTER_OTLP_PROTOCOL must be one of http\/protobuf, grpc/],
    [{ OTEL_METRIC_EXPORT_INTERVAL: "1s" }, /OTEL_METRIC_EXPORT_INTERVAL must be a whole number/],
    [{ OTEL_TRACES_SAMPLER_ARG: "2" }, /OTEL_TRACES_SAMPLER_ARG must be a number from 0 to 1/],
  ] as const) {
    assert.throws(() => of({ OTEL_EXPORTER_OTLP_ENDPOINT: "http://c:4318", ...env }), message);
  }
});
