import { join } from "node:path";
import { benchDispatch } from "./dispatch.js";
import { benchScale } from "./scale.js";
import { benchOverhead } from "./overhead.js";
import { benchAgentIdle } from "./agent-resources.js";
import { benchAgentOtlpIdle } from "./agent-otlp.js";
import { benchLogHeavyApply, benchLogStreaming } from "./logs.js";
import { benchKubernetes } from "./kubernetes.js";
import { benchProviderCache } from "./provider-cache.js";
import { benchImages } from "./images.js";
import { benchThroughput } from "./throughput.js";
import { repoRoot } from "./harness.js";
import { writeReport, type Figure } from "./report.js";

/**
 * `npm run bench [name…]`: runs the benchmarks (all by default) and writes
 * bench/results/latest.{md,json}; a run of some benches only writes partial.{md,json}, so the
 * full report the README quotes is never replaced by a fragment.
 */
const benches: Record<string, () => Promise<Figure[]>> = {
  dispatch: () => benchDispatch(),
  overhead: () => benchOverhead(),
  "agent-idle": () => benchAgentIdle(),
  "agent-otlp-idle": () => benchAgentOtlpIdle(),
  logs: () => benchLogStreaming(),
  "log-heavy-apply": () => benchLogHeavyApply(),
  scale: () => benchScale(),
  kubernetes: () => benchKubernetes(),
  "provider-cache": () => benchProviderCache(),
  images: () => benchImages(),
  throughput: () => benchThroughput(),
};

const selected = process.argv.slice(2);
const names = selected.length > 0 ? selected : Object.keys(benches);
const figures: Figure[] = [];
const notes: string[] = [];
for (const name of names) {
  const run = benches[name];
  if (!run) {
    console.error(`unknown bench ${name}; known: ${Object.keys(benches).join(", ")}`);
    process.exit(2);
  }
  const started = Date.now();
  process.stderr.write(`bench ${name}…\n`);
  try {
    figures.push(...(await run()));
  } catch (err) {
    notes.push(`${name} failed: ${err instanceof Error ? err.message : String(err)}`);
  }
  process.stderr.write(`bench ${name} took ${((Date.now() - started) / 1000).toFixed(1)} s\n`);
}
console.log(writeReport(join(repoRoot, "bench", "results"), figures, notes, selected.length > 0 ? "partial" : "latest"));
