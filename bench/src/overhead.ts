import { spawnSync } from "node:child_process";
import { cpSync, mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { packDir, runToCompletion, startAgentProc, type RunTimeline } from "./agent-runs.js";
import { api, repoRoot, startServerProc } from "./harness.js";
import { median, type Figure } from "./report.js";
import { routes } from "@drover/protocol";

/** terraform init/plan/apply of examples/bench, bare, in a fresh copy (as the agent does it). */
function bareRun(): number {
  const dir = mkdtempSync(join(tmpdir(), "drover-bench-bare-"));
  cpSync(join(repoRoot, "examples", "bench"), dir, { recursive: true });
  const tfrc = join(dir, ".terraformrc");
  writeFileSync(tfrc, "");
  const env = {
    ...process.env,
    TF_CLI_CONFIG_FILE: tfrc,
    CHECKPOINT_DISABLE: "1",
    TF_IN_AUTOMATION: "1",
    TF_INPUT: "0",
  };
  const started = Date.now();
  for (const args of [
    ["init", "-input=false", "-no-color"],
    ["plan", "-input=false", "-no-color", "-out=plan.tfplan"],
    ["apply", "-input=false", "-no-color", "plan.tfplan"],
  ]) {
    const r = spawnSync("terraform", args, { cwd: dir, env, stdio: "ignore" });
    if (r.status !== 0) throw new Error(`bare terraform ${args[0]} failed`);
  }
  const ms = Date.now() - started;
  rmSync(dir, { recursive: true, force: true });
  return ms;
}

/**
 * Wall time of the same configuration through server + local agent (upload → applied,
 * including the agent's init/plan/show/apply and the state on the server's http backend)
 * against terraform init/plan/apply bare; 5 alternating repetitions, ratio of medians.
 */
export async function benchOverhead(reps = 5): Promise<Figure[]> {
  const server = await startServerProc();
  const agent = await (async () => {
    await api(server.url, routes.createPool, { body: { name: "overhead" } });
    return startAgentProc(server, "overhead", "bench-agent");
  })();
  try {
    const archive = await packDir(join(repoRoot, "examples", "bench"));
    const bare: number[] = [];
    const drover: number[] = [];
    const timelines: RunTimeline[] = [];
    for (let i = 0; i < reps; i++) {
      bare.push(bareRun());
      // A fresh workspace each time, so both sides create 100 resources from empty state.
      await api(server.url, routes.createWorkspace, { body: { name: `overhead-${i}`, pool: "overhead" } });
      const run = await runToCompletion(server, `overhead-${i}`, archive);
      if (run.status !== "applied") throw new Error(`run ${run.id} ended ${run.status}`);
      drover.push(run.ms);
      if (run.timeline) timelines.push(run.timeline);
    }
    const ratio = median(drover) / median(bare);
    const part = (k: keyof RunTimeline) => median(timelines.map((t) => t[k])).toFixed(0);
    const where = `medians: upload → plan started ${part("toPlan")} ms, plan job ${part("plan")} ms, plan finished → apply started ${part("handoff")} ms, apply job ${part("apply")} ms`;
    return [
      {
        bench: "overhead (examples/bench: 100 terraform_data, init+plan+apply)",
        metric: "wall time, median of 5",
        unit: "ms",
        value: median(drover),
        baseline: median(bare),
        baselineLabel: "terraform bare",
        target: "≤ 1.10×",
        met: ratio <= 1.1,
        note: `through Drover: ${drover.join(", ")} ms; bare: ${bare.join(", ")} ms; ${where}`,
      },
    ];
  } finally {
    await agent.stop();
    await server.stop();
  }
}
