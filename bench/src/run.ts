import { mkdtempSync, readdirSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { repoRoot } from "./harness.js";
import { describeFunctions, describeProfile, summarizeProfiles } from "./profile.js";
import { writeReport, type Figure } from "./report.js";
import { runBenches, timingNote, type Bench } from "./runner.js";

/**
 * `npm run bench [name…]`: runs the benchmarks (all by default) and writes
 * bench/results/latest.{md,json}, a line of history.jsonl and the README's benchmarks table;
 * a run of some benches only writes partial.{md,json}, so the full report the README quotes is
 * never replaced by a fragment. Each bench's module loads when it runs: one that cannot load
 * (a missing build of the test cluster) fails alone, with a note.
 */

/** Where the bench notes explain each bench's misses, when its run took no profile of its own. */
const notesFor: Record<string, string> = {
  overhead: 'bench/notes/issue-18.md, "Overhead" and "Where the agent adds time" (`terraform show -json` on the critical path, and the design that takes it off)',
  "agent-idle": 'bench/notes/issue-18.md, "Idle agent RSS" (what the RSS is made of, what the agent bundle and the http2 stand-in took off, and what is left)',
  "agent-otlp-idle": 'bench/notes/issue-18.md, "Idle agent RSS"',
  logs: 'bench/notes/logs.md, "2026-11-26 … why 100 MB/s is missed here" (windowed server and agent profiles; decision 0032)',
  "log-heavy-apply": 'bench/notes/logs.md, "Log-heavy apply"',
  scale: 'bench/notes/issue-18.md, "5,000 agents on PostgreSQL" and "Server pass of 2026-11-26"',
  kubernetes: 'bench/notes/issue-18.md, "Kubernetes: run created → Job exists" (the create path counted; the direct create\'s own p99 beside it in this table)',
  dispatch: 'bench/notes/issue-18.md, "Dispatch, 10,000 jobs, 100 agents"',
};

/**
 * The scale bench with every server it starts under `--cpu-prof` (BENCH_CPU_PROF, read by
 * startServerProc): the largest profile of each database is summarized into that database's
 * heartbeat figures, so a miss names where the server's time went in this run.
 */
async function scaleProfiled(): Promise<Figure[]> {
  const { benchScale } = await import("./scale.js");
  if (process.env.BENCH_CPU_PROF) return benchScale();
  const dir = mkdtempSync(join(tmpdir(), "drover-bench-scale-prof-"));
  process.env.BENCH_CPU_PROF = dir;
  try {
    const figures = await benchScale();
    const servers = readdirSync(dir)
      .filter((f) => f.startsWith("server-") && f.endsWith(".cpuprofile"))
      .map((f) => summarizeProfiles(dir, 12, [f]));
    for (const db of ["sqlite", "postgres"]) {
      const mine = servers.filter((s) => s.places.includes("pg") === (db === "postgres")).sort((a, b) => b.busyMs - a.busyMs)[0];
      if (!mine) continue;
      const summary = `the ${db} server's CPU profile over the largest fleet's whole pass, registration included (${mine.busyMs.toFixed(0)} ms busy), self time by place: ${describeProfile(mine)}; top functions: ${describeFunctions(mine)}`;
      for (const f of figures.filter((f) => f.bench.includes(db))) {
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
};

const selected = process.argv.slice(2);
const unknown = selected.filter((name) => !benches[name]);
if (unknown.length > 0) {
  console.error(`unknown bench ${unknown.join(", ")}; known: ${Object.keys(benches).join(", ")}`);
  process.exit(2);
}
const names = selected.length > 0 ? selected : Object.keys(benches);
const timeoutMinutes = Number(process.env.BENCH_TIMEOUT_MINUTES ?? "20");
if (!(timeoutMinutes > 0)) {
  console.error(`BENCH_TIMEOUT_MINUTES must be a positive number of minutes (got ${process.env.BENCH_TIMEOUT_MINUTES})`);
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
  { timeoutMs: timeoutMinutes * 60_000 },
);
const full = selected.length === 0;
console.log(writeReport(join(repoRoot, "bench", "results"), outcome.figures, [...outcome.notes, timingNote(outcome.seconds)], full ? "latest" : "partial", full ? join(repoRoot, "README.md") : undefined));
if (outcome.notes.length > 0) console.error(`${outcome.notes.length} bench failure(s), each a note in the report: ${outcome.notes.map((n) => n.split(":")[0]).join(", ")}`);
// A bench that timed out may still hold servers and timers open: the report is written, so end.
process.exit(0);
