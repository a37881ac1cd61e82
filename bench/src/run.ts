import { mkdtempSync, readdirSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { idleAgentTargetMb, repoRoot, stopTracked } from "./harness.js";
import { describeFunctions, describeProfile, summarizeProfiles } from "./profile.js";
import { writeReport, type ExpectedRow, type Figure } from "./report.js";
import { runBenches, timingNote, type Bench } from "./runner.js";
import { webRows } from "./web-rows.js";
import { vcsRows } from "./vcs-rows.js";
import { benchScale, scaleCoversAll, scaleProfileFile, scalePlans, scaleRows } from "./scale.js";

/**
 * `npm run bench [name…]`: runs the benchmarks (all by default) and writes
 * bench/results/latest.{md,json}, a line of history.jsonl and the README's benchmarks table;
 * a run of some benches only writes partial.{md,json}, so the full report the README quotes is
 * never replaced by a fragment (nor by a run of some scale fleets, BENCH_SCALE_DATABASES). Each
 * bench's module but the scale one loads when it runs: one that cannot load
 * (a missing build of the test cluster) fails alone, with a note and its rows as not met, and the
 * run exits 1 (after writing its report).
 */

/** Where the bench notes explain each bench's misses, when its run took no profile of its own. */
const notesFor: Record<string, string> = {
  overhead:
    'bench/notes/issue-18.md, "Overhead" and "Where the agent adds time" (`terraform show -json` on the critical path, kept there by decision 0050)',
  "agent-idle":
    'bench/notes/issue-18.md, "Idle agent RSS" (what the RSS is made of); decision 0048 (why the target is 80 MB)',
  "agent-otlp-idle": 'bench/notes/issue-18.md, "Idle agent RSS"',
  logs: 'bench/notes/logs.md, "2026-11-26 … why 100 MB/s is missed here" (windowed server and agent profiles; decision 0032)',
  "log-heavy-apply": 'bench/notes/logs.md, "Log-heavy apply"',
  scale: 'bench/notes/issue-18.md, "5,000 agents on PostgreSQL" and "Server pass of 2026-11-26"',
  kubernetes:
    'bench/notes/issue-18.md, "Kubernetes: run created → Job exists" (the create path counted; the direct create\'s own p99 beside it in this table)',
  dispatch: 'bench/notes/issue-18.md, "Dispatch, 10,000 jobs, 100 agents"',
  "cloud-plan": "bench/notes/cloud-plan.md (terraform's own 1.5 s of fixed waits in every remote plan)",
};

/**
 * The scale bench with every server it starts under `--cpu-prof` (BENCH_CPU_PROF, read by
 * startServerProc): the profile of each database's largest fleet (named by database and fleet
 * size, scaleProfileName) is summarized into that database's heartbeat figures, so a miss names
 * where the server's time went in this run.
 */
async function scaleProfiled(): Promise<Figure[]> {
  if (process.env.BENCH_CPU_PROF) return benchScale();
  const dir = mkdtempSync(join(tmpdir(), "drover-bench-scale-prof-"));
  process.env.BENCH_CPU_PROF = dir;
  try {
    const figures = await benchScale();
    const files = readdirSync(dir);
    for (const { db, agents } of scalePlans()) {
      const file = scaleProfileFile(files, db, agents);
      if (!file) continue;
      const mine = summarizeProfiles(dir, 12, [file]);
      const summary = `the ${db} server's CPU profile over the largest fleet's whole pass, registration included (${mine.busyMs.toFixed(0)} ms busy), self time by place: ${describeProfile(mine)}; top functions: ${describeFunctions(mine)}`;
      for (const f of figures.filter((f) => f.bench.endsWith(`, ${db})`))) {
        if (f.metric.startsWith("heartbeat p99 (client")) f.note = `${f.note ?? ""}; ${summary}`;
        f.why = `the ${db} server's CPU profile in the heartbeat p99 (client side) note (taken in this run); ${notesFor.scale}`;
      }
    }
    return figures;
  } finally {
    delete process.env.BENCH_CPU_PROF;
    rmSync(dir, { recursive: true, force: true });
  }
}

const benches: Record<string, Bench> = {
  dispatch: async () => (await import("./dispatch.js")).benchDispatch(),
  overhead: async () => (await import("./overhead.js")).benchOverhead(),
  "agent-idle": async () => (await import("./agent-resources.js")).benchAgentIdle(),
  "agent-otlp-idle": async () => (await import("./agent-otlp.js")).benchAgentOtlpIdle(),
  logs: async () => (await import("./logs.js")).benchLogStreaming(),
  "log-heavy-apply": async () => (await import("./logs.js")).benchLogHeavyApply(),
  scale: scaleProfiled,
  kubernetes: async () => (await import("./kubernetes.js")).benchKubernetes(),
  "provider-cache": async () => (await import("./provider-cache.js")).benchProviderCache(),
  images: async () => (await import("./images.js")).benchImages(),
  throughput: async () => (await import("./throughput.js")).benchThroughput(),
  web: async () => (await import("./web.js")).benchWeb(),
  "cloud-plan": async () => (await import("./cloud-plan.js")).benchCloudPlan(),
  vcs: async () => (await import("./vcs.js")).benchVcs(),
};

/**
 * Each bench's rows at its default size, values aside: a bench that fails reports these as not
 * met, so its rows stay in the report, its missed targets and the README. The runner notes
 * when a bench's figures stop matching them.
 */
const rows = (bench: string, metrics: Array<[metric: string, unit: string, target: string]>): ExpectedRow[] =>
  metrics.map(([metric, unit, target]) => ({ bench, metric, unit, target }));
const expected: Record<string, () => ExpectedRow[]> = {
  web: webRows,
  dispatch: () =>
    rows("dispatch (10000 jobs, 100 agents, SQLite)", [
      ["queued→started p50", "ms", "—"],
      ["queued→started p99", "ms", "≤ 20 ms"],
      ["queued→started max", "ms", "—"],
    ]),
  overhead: () =>
    rows("overhead (examples/bench: 100 terraform_data, init+plan+apply)", [
      ["wall time, median of 5", "ms", "≤ 1.10×"],
    ]),
  "agent-idle": () => rows("agent idle", [["RSS after 30 s idle", "MB", `≤ ${idleAgentTargetMb} MB`]]),
  "agent-otlp-idle": () =>
    rows("agent idle, OTLP off vs on", [
      [
        "RSS after 30 s idle with DROVER_AGENT_OTLP_ENDPOINT",
        "MB",
        `without endpoint ≤ ${idleAgentTargetMb} MB; with: reported`,
      ],
    ]),
  logs: () => rows("log streaming (50 MB from a run's hook)", [["throughput into the server", "MB/s", "≥ 100 MB/s"]]),
  "log-heavy-apply": () =>
    rows("log-heavy apply (a provisioner printing 200,000 lines)", [
      ["wall time, init+plan+apply, median of 5", "ms", "≤ 1.10×"],
    ]),
  scale: () => scaleRows(),
  kubernetes: () =>
    rows("kubernetes (test cluster)", [
      ["run created → Job exists, p99 of 100", "ms", "≤ 100 ms"],
      ["run created → runner's first step started, median of 8", "ms", "reported"],
    ]),
  "provider-cache": () =>
    rows("provider-cache", [
      ["init, bare terraform, cold (3 × 20 MB providers)", "ms", "—"],
      ["init, bare terraform, TF_PLUGIN_CACHE_DIR warm + lock file", "ms", "—"],
      ["init via the agent's cache, cold (fetch + verify + init)", "ms", "—"],
      ["init via the agent's cache, warm", "ms", "warm ≤ 0.3× cold"],
      ["wrong lock files, 12 concurrent inits × 3 rounds, TF_PLUGIN_CACHE_DIR", "count", "—"],
      ["wrong lock files, 12 concurrent inits × 3 rounds, agent's cache", "count", "0"],
    ]),
  images: () =>
    rows("images", [
      ["drover image size", "MB", "—"],
      ["runner image size", "MB", "—"],
      ["drover server start (podman run → ready), median of 5", "ms", "—"],
    ]),
  "cloud-plan": () =>
    rows("cloud-block plan (5 terraform_data, plan from empty state)", [
      ["terraform plan wall time, median of 5", "ms", "≤ +1000 ms"],
    ]),
  throughput: () =>
    rows("throughput (60 plan-only runs of one terraform_data, 20 agents, SQLite)", [
      ["runs per minute", "runs/min", "reported"],
      ["server CPU per run", "ms", "reported"],
    ]),
  vcs: () => vcsRows(),
};

const selected = process.argv.slice(2);
const unknown = selected.filter((name) => !benches[name]);
if (unknown.length > 0) {
  console.error(`unknown bench ${unknown.join(", ")}; known: ${Object.keys(benches).join(", ")}`);
  process.exit(2);
}
const names = selected.length > 0 ? selected : Object.keys(benches);
let scaleAll: boolean;
try {
  scaleAll = scaleCoversAll();
} catch (err) {
  console.error(err instanceof Error ? err.message : String(err));
  process.exit(2);
}
const timeoutMinutes = Number(process.env.BENCH_TIMEOUT_MINUTES ?? "20");
if (!(timeoutMinutes > 0)) {
  console.error(
    `BENCH_TIMEOUT_MINUTES must be a positive number of minutes (got ${process.env.BENCH_TIMEOUT_MINUTES})`,
  );
  process.exit(2);
}
const outcome = await runBenches(
  Object.fromEntries(
    names.map((name) => [
      name,
      async () => {
        const figures = await benches[name]!();
        for (const f of figures) f.why ??= notesFor[name];
        return figures;
      },
    ]),
  ),
  names,
  { timeoutMs: timeoutMinutes * 60_000, expected, abandon: stopTracked },
);
// Full only with every bench at its every size: a run of some fleets (BENCH_SCALE_DATABASES)
// lacks rows, so it must not replace latest, the history or the README's table.
const full = selected.length === 0 && scaleAll;
console.log(
  writeReport(
    join(repoRoot, "bench", "results"),
    outcome.figures,
    [...outcome.notes, timingNote(outcome.seconds)],
    full ? "latest" : "partial",
    full ? join(repoRoot, "README.md") : undefined,
  ),
);
if (outcome.failed.length > 0)
  console.error(
    `${outcome.failed.length} bench(es) failed, each a note in the report and its rows not met: ${outcome.failed.join(", ")}`,
  );
// A bench that timed out may still hold timers open, and its processes must not outlive the run.
stopTracked();
process.exit(outcome.failed.length > 0 ? 1 : 0);
