import { spawn } from "node:child_process";
import { startAgentProc } from "./agent-runs.js";
import { api, idleAgentTargetMb, rssMb, sleep, startServerProc, track } from "./harness.js";
import { type Figure } from "./report.js";
import { routes } from "@drover/protocol";

/** Idle RSS of a registered, long-polling agent, beside a bare Node.js process. */
export async function benchAgentIdle(): Promise<Figure[]> {
  const server = await startServerProc();
  try {
    await api(server.url, routes.createPool, { body: { name: "idle" } });
    const agent = await startAgentProc(server, "idle", "idle-agent");
    // Steady idle: V8's memory reducer collects start-up garbage some seconds after the
    // process goes quiet, so the first seconds vary by ~9 MB from run to run.
    const samples: number[] = [];
    for (let s = 0; s < 6; s++) {
      await sleep(5000);
      samples.push(rssMb(agent.child.pid!));
    }
    const rss = samples.at(-1)!;
    await agent.stop();
    const bare = track(spawn(process.execPath, ["-e", "setInterval(() => {}, 1000)"]));
    await sleep(1000);
    const bareRss = rssMb(bare.pid!);
    bare.kill();
    return [
      {
        bench: "agent idle",
        metric: "RSS after 30 s idle",
        unit: "MB",
        value: rss,
        baseline: bareRss,
        baselineLabel: "empty Node.js process",
        target: `≤ ${idleAgentTargetMb} MB`,
        met: rss <= idleAgentTargetMb,
        note: `every 5 s: ${samples.map((v) => v.toFixed(1)).join(", ")} MB (peak ${Math.max(...samples).toFixed(1)})`,
      },
    ];
  } finally {
    await server.stop();
  }
}
