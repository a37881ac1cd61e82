// A trace's spans keep their nesting when the wall clock moves under them (an NTP step or slew
// while a job runs): a stage span ends within the agent's span it belongs to, whatever Date.now()
// says between their starts.
import assert from "node:assert/strict";
import { after, before, test } from "node:test";
import { startTelemetry } from "@drover/runtime/telemetry";
import { startOtlpReceiver, type OtlpReceiver } from "../support/otlp-receiver.js";
import { eventually } from "../support/fault-runs.js";

let receiver: OtlpReceiver;
before(async () => {
  receiver = await startOtlpReceiver();
});
after(async () => {
  await receiver?.close();
});

test("a child span stays within its parent when the wall clock steps forward or back between their starts", async () => {
  const realNow = Date.now;
  let step = 0;
  Date.now = () => realNow() + step;
  try {
    const telemetry = await startTelemetry({
      endpoint: receiver.url,
      protocol: "http/protobuf",
      traces: true,
      metrics: false,
      resource: { "service.name": "drover-agent" },
    });
    const parent = telemetry.tracer.start("agent plan");
    step = 60_000;
    const ahead = telemetry.tracer.start("init", parent);
    ahead.end();
    step = -60_000;
    const behind = telemetry.tracer.start("finish", parent);
    behind.end();
    parent.end();
    await telemetry.shutdown();
  } finally {
    Date.now = realNow;
  }
  const span = (name: string) =>
    eventually(`the ${name} span`, async () => receiver.spans.find((s) => s.name === name), 10_000);
  const parent = await span("agent plan");
  for (const name of ["init", "finish"]) {
    const child = await span(name);
    assert.equal(child.parentSpanId, parent.spanId);
    assert.ok(child.startNs >= parent.startNs, `${name} starts within its parent`);
    assert.ok(child.endNs <= parent.endNs, `${name} ends within its parent`);
  }
  const [init, finish] = [await span("init"), await span("finish")];
  assert.ok(init.endNs <= finish.startNs, "the stages keep their order");
});
