import assert from "node:assert/strict";
import { spawnSync } from "node:child_process";
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { test } from "node:test";
// The bench's types from the project reference, its code from the compiled output (bench/ is not an npm workspace).
import type * as Report from "../../bench/src/report.js";
import type * as Runner from "../../bench/src/runner.js";

const { failedRows, missedBy, quoteInReadme, writeReport } = (await import(
  new URL("../../../bench/dist/report.js", import.meta.url).href
)) as typeof Report;
const { runBenches, timingNote } = (await import(
  new URL("../../../bench/dist/runner.js", import.meta.url).href
)) as typeof Runner;

const figure = (over: Partial<Report.Figure>): Report.Figure => ({
  bench: "b",
  metric: "m",
  unit: "ms",
  value: 1,
  baseline: null,
  baselineLabel: "",
  target: "—",
  met: null,
  ...over,
});

test("a bench that throws or never ends leaves a note, and the benches after it still run", async () => {
  const ran: string[] = [];
  const outcome = await runBenches(
    {
      broken: async () => {
        ran.push("broken");
        throw new Error("no cluster");
      },
      stuck: () => {
        ran.push("stuck");
        return new Promise<never>(() => undefined);
      },
      fine: async () => {
        ran.push("fine");
        return [figure({ bench: "fine" })];
      },
    },
    ["broken", "stuck", "fine"],
    { timeoutMs: 50, log: () => undefined },
  );
  assert.deepEqual(ran, ["broken", "stuck", "fine"]);
  assert.deepEqual(
    outcome.figures.map((f) => f.bench),
    ["fine"],
  );
  assert.equal(outcome.notes.length, 2);
  assert.match(outcome.notes[0]!, /^broken failed: no cluster/);
  assert.match(outcome.notes[1]!, /^stuck failed: did not finish within/);
  assert.deepEqual(
    outcome.seconds.map((s) => s.name),
    ["broken", "stuck", "fine"],
  );
  assert.match(
    timingNote(outcome.seconds),
    /^time per bench: broken \d+ s, stuck \d+ s, fine \d+ s; total [\d.]+ min$/,
  );
});

test("a failed bench keeps its expected rows (n/a, not met, the failure as note), is listed as failed, and its env changes and processes end with it", async () => {
  const abandoned: string[] = [];
  const seen: Array<string | undefined> = [];
  const row = (bench: string, metric: string, target: string) => ({ bench, metric, unit: "ms", target });
  const outcome = await runBenches(
    {
      broken: async () => {
        process.env.BENCH_RUNNER_TEST_ENV = "broken";
        throw new Error("no cluster");
      },
      stuck: () => {
        process.env.BENCH_RUNNER_TEST_ENV = "stuck";
        return new Promise<never>(() => undefined);
      },
      fine: async () => {
        seen.push(process.env.BENCH_RUNNER_TEST_ENV);
        return [figure({ bench: "fine", metric: "p50" }), figure({ bench: "fine", metric: "new" })];
      },
    },
    ["broken", "stuck", "fine"],
    {
      timeoutMs: 50,
      log: () => undefined,
      expected: {
        broken: () => [row("broken bench", "p99", "≤ 20 ms"), row("broken bench", "count", "reported")],
        stuck: () => [row("stuck bench", "wall time", "≤ 1.05×")],
        fine: () => [row("fine", "p50", "—"), row("fine", "p99", "—")],
      },
      abandon: () => {
        abandoned.push("called");
        return 3;
      },
    },
  );
  assert.equal(
    process.env.BENCH_RUNNER_TEST_ENV,
    undefined,
    "a bench's env change ends with it, a timed-out one's too",
  );
  assert.deepEqual(seen, [undefined]);
  assert.deepEqual(abandoned, ["called"], "only the timed-out bench is abandoned");
  assert.deepEqual(outcome.failed, ["broken", "stuck"]);
  assert.deepEqual(
    outcome.figures.map((f) => [f.bench, f.metric, Number.isNaN(f.value) ? "n/a" : f.value, f.met]),
    [
      ["broken bench", "p99", "n/a", false],
      ["broken bench", "count", "n/a", false],
      ["stuck bench", "wall time", "n/a", false],
      ["fine", "p50", 1, null],
      ["fine", "new", 1, null],
    ],
  );
  assert.equal(outcome.figures[0]!.note, "broken failed: no cluster");
  assert.match(
    outcome.figures[2]!.note!,
    /^stuck failed: did not finish within .*; 3 process\(es\) it left running were ended$/,
  );
  assert.match(
    outcome.notes[2]!,
    /^fine: its expected rows .* differ from its figures; update them: expected but not reported: fine \/ p99; reported but not expected: fine \/ new$/,
  );

  const dir = mkdtempSync(join(tmpdir(), "drover-bench-report-"));
  try {
    const md = writeReport(join(dir, "results"), outcome.figures, outcome.notes, "partial");
    assert.match(md, /\| broken bench \| p99 \| n\/a \| — \| — \| ≤ 20 ms \| \*\*no\*\* \|/);
    assert.match(
      md,
      /- \*\*broken bench, p99\*\*: misses ≤ 20 ms: nothing was measured\. Why: the bench failed: broken failed: no cluster/,
    );
    assert.match(md, /- \*\*stuck bench, wall time\*\*: misses ≤ 1\.05×: nothing was measured\./);
    assert.match(md, /- \*\*broken bench, count\*\*: misses reported: nothing was measured\./);
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
  assert.deepEqual(failedRows([], "x"), []);
});

test("a late failure of a timed-out bench is blamed on it, not on the bench running when it comes", () => {
  // In a process of its own: the test runner would take the stray rejection as this test's failure.
  const script = `
    const { runBenches } = await import(${JSON.stringify(new URL("../../../bench/dist/runner.js", import.meta.url).href)});
    const outcome = await runBenches({
      stuck: () => { new Promise((_, reject) => { globalThis.failLate = reject; }); return new Promise(() => {}); },
      next: () => new Promise((resolve) => { process.once("unhandledRejection", () => resolve([])); globalThis.failLate(new Error("late child failure")); }),
    }, ["stuck", "next"], { timeoutMs: 10, log: () => undefined });
    console.log(JSON.stringify(outcome));`;
  const child = spawnSync(process.execPath, ["--input-type=module", "-e", script], { encoding: "utf8" });
  assert.equal(child.status, 0, child.stderr);
  const outcome = JSON.parse(child.stdout) as Runner.BenchOutcome;
  // Only the notes are asserted: on a loaded machine `next` may itself outlast the 10 ms timeout.
  assert.ok(
    outcome.notes.includes(
      "stuck: a failure outside the bench's own flow (after it was abandoned, while next ran): late child failure",
    ),
    JSON.stringify(outcome.notes),
  );
  assert.ok(!outcome.notes.some((n) => n.startsWith("next: a failure outside")), JSON.stringify(outcome.notes));
  assert.ok(outcome.failed.includes("stuck"));
});

test("a promise a bench leaves rejected behind it is a note, not the end of the run", () => {
  // In a process of its own: the test runner would take the stray rejection as this test's failure.
  const script = `
    const { runBenches } = await import(${JSON.stringify(new URL("../../../bench/dist/runner.js", import.meta.url).href)});
    const outcome = await runBenches({
      leaky: async () => { void Promise.reject(new Error("late child failure")); await new Promise((r) => setImmediate(r)); return []; },
      next: async () => [{ bench: "next" }],
    }, ["leaky", "next"], { timeoutMs: 10000, log: () => undefined });
    console.log(JSON.stringify(outcome));`;
  const child = spawnSync(process.execPath, ["--input-type=module", "-e", script], { encoding: "utf8" });
  assert.equal(child.status, 0, child.stderr);
  const outcome = JSON.parse(child.stdout) as Runner.BenchOutcome;
  assert.deepEqual(outcome.notes, ["leaky: a failure outside the bench's own flow: late child failure"]);
  assert.deepEqual(outcome.failed, ["leaky"]);
  assert.equal(outcome.figures[0]!.bench, "next");
});

test("a missed target says by how much: bounds in the figure's unit and ratios to the baseline", () => {
  assert.equal(missedBy(figure({ value: 12, target: "≤ 20 ms", met: true })), undefined);
  assert.equal(
    missedBy(figure({ value: 333, target: "≤ 20 ms", met: false })),
    "333 ms against ≤ 20 ms: over by 313 ms (16.65× off)",
  );
  assert.equal(
    missedBy(figure({ value: 37, unit: "MB/s", target: "≥ 100 MB/s", met: false })),
    "37.00 MB/s against ≥ 100 MB/s: short by 63.00 MB/s (2.70× off)",
  );
  assert.equal(
    missedBy(figure({ value: 920, baseline: 800, target: "≤ 1.05×", met: false })),
    "1.15× against ≤ 1.05×: over by 0.10× (1.10× off); 920 ms against 840 ms allowed",
  );
  assert.equal(
    missedBy(figure({ value: 15, target: "≤ 20 ms", met: false })),
    "meets ≤ 20 ms by its value (15.00 ms), but its correctness check failed (see its note)",
  );
  assert.equal(missedBy(figure({ value: NaN, target: "≤ 20 ms", met: false })), "misses ≤ 20 ms: nothing was measured");
});

test("a full run writes latest, one history line and the README's table; a partial run none of these", () => {
  const dir = mkdtempSync(join(tmpdir(), "drover-bench-report-"));
  try {
    const readme = join(dir, "README.md");
    const start = "<!-- bench:latest (written by a full `npm run bench`; edit bench/src/report.ts, not this table) -->";
    writeFileSync(readme, `# Title\n\nbefore\n${start}\nold table\n<!-- /bench:latest -->\nafter\n`);
    const figures = [
      figure({
        bench: "dispatch",
        metric: "p99",
        value: 333,
        baseline: 700,
        baselineLabel: "1 s polling",
        target: "≤ 20 ms",
        met: false,
        why: "the profile in its note",
      }),
      figure({ bench: "throughput", metric: "runs per minute", unit: "runs/min", value: 200, target: "reported" }),
    ];
    const results = join(dir, "results");
    writeReport(results, figures, ["x failed: boom"], "partial", readme);
    assert.throws(() => readFileSync(join(results, "history.jsonl")));
    assert.match(readFileSync(readme, "utf8"), /old table/);

    const md = writeReport(results, figures, ["x failed: boom"], "latest", readme);
    assert.match(
      md,
      /## Missed targets\n\n- \*\*dispatch, p99\*\*: 333 ms against ≤ 20 ms: over by 313 ms \(16\.65× off\)\. Why: the profile in its note/,
    );
    assert.match(md, /- x failed: boom/);
    const history = readFileSync(join(results, "history.jsonl"), "utf8").trim().split("\n");
    assert.equal(history.length, 1);
    const line = JSON.parse(history[0]!) as { date: string; machine: string; figures: unknown[] };
    assert.equal(line.figures.length, 2);
    assert.ok(line.date && line.machine);
    const text = readFileSync(readme, "utf8");
    assert.doesNotMatch(text, /old table/);
    assert.match(text, /^before\n<!-- bench:latest/m);
    assert.match(text, /\| dispatch \| p99 \| 333 ms \| 700 ms \(1 s polling\) \| ≤ 20 ms \| no \|/);
    assert.match(text, /<!-- \/bench:latest -->\nafter\n$/);

    writeFileSync(readme, "no markers\n");
    assert.match(quoteInReadme(readme, figures, new Date().toISOString(), "1.0"), /no bench markers/);
    assert.equal(readFileSync(readme, "utf8"), "no markers\n");
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
});
