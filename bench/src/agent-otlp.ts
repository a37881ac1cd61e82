import { createServer } from "node:http";
import type { AddressInfo } from "node:net";
import { startAgentProc } from "./agent-runs.js";
import { api, idleAgentTargetMb, rssMb, sleep, startServerProc } from "./harness.js";
import { type Figure } from "./report.js";
import { routes } from "@drover/protocol";

/**
 * Idle RSS of two registered, long-polling agents side by side, one without an OTLP endpoint
 * (no OpenTelemetry module loads) and one exporting traces and metrics to a collector on
 * 127.0.0.1 that accepts everything: what turning OTLP on costs an idle agent.
 */
export async function benchAgentOtlpIdle(): Promise<Figure[]> {
  let exports = 0;
  const collector = createServer((req, res) => {
    req.resume();
    req.on("end", () => {
      exports++;
      res.writeHead(200, { "content-type": "application/x-protobuf" }).end();
    });
  });
  await new Promise<void>((r) => collector.listen(0, "127.0.0.1", r));
  const endpoint = `http://127.0.0.1:${(collector.address() as AddressInfo).port}`;
  const server = await startServerProc();
  try {
    await api(server.url, routes.createPool, { body: { name: "otlp-idle" } });
    const plain = await startAgentProc(server, "otlp-idle", "idle-without-otlp");
    const traced = await startAgentProc(server, "otlp-idle", "idle-with-otlp", {
      DROVER_AGENT_OTLP_ENDPOINT: endpoint,
    });
    // Both sampled at the same moments, after V8's memory reducer has had its seconds (see agent-resources.ts).
    const without: number[] = [];
    const withOtlp: number[] = [];
    for (let s = 0; s < 6; s++) {
      await sleep(5000);
      without.push(rssMb(plain.child.pid!));
      withOtlp.push(rssMb(traced.child.pid!));
    }
    await Promise.all([plain.stop(), traced.stop()]);
    const a = without.at(-1)!;
    const b = withOtlp.at(-1)!;
    return [
      {
        bench: "agent idle, OTLP off vs on",
        metric: "RSS after 30 s idle with DROVER_AGENT_OTLP_ENDPOINT",
        unit: "MB",
        value: b,
        baseline: a,
        baselineLabel: "the same agent without an endpoint (no OpenTelemetry module loaded)",
        target: `without endpoint ≤ ${idleAgentTargetMb} MB; with: reported`,
        met: a <= idleAgentTargetMb,
        note: `ratio ${(b / a).toFixed(2)}×, +${(b - a).toFixed(1)} MB; every 5 s without: ${without.map((v) => v.toFixed(1)).join(", ")} MB; with: ${withOtlp.map((v) => v.toFixed(1)).join(", ")} MB; ${exports} export requests reached the collector (metrics export every 60 s, traces only with jobs)`,
      },
    ];
  } finally {
    await server.stop();
    collector.close();
  }
}
