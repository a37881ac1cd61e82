import { appendFileSync, existsSync, mkdirSync, readFileSync, writeFileSync } from "node:fs";
import { cpus, loadavg, totalmem } from "node:os";
import { join } from "node:path";

/** One measured figure beside its baseline and target. */
export interface Figure {
  bench: string;
  metric: string;
  unit: string;
  value: number;
  baseline: number | null;
  baselineLabel: string;
  /**
   * The issue-18 target as text (`≤ 20 ms`, `≥ 100 MB/s`, `≤ 1.05×` of the baseline, `reported`
   * or `—`) and whether the value meets it.
   */
  target: string;
  met: boolean | null;
  note?: string;
  /** Where a miss is explained: the profile summary of this run, or the bench notes' section. */
  why?: string;
}

/** A row a bench reports, its measurement aside: what stands in the report when the bench fails. */
export type ExpectedRow = Pick<Figure, "bench" | "metric" | "unit" | "target">;

/**
 * The rows of a bench that failed: no value (n/a), not met, the failure as their note and
 * their why, so a broken bench stays in the table, the missed targets and the README.
 */
export function failedRows(rows: ExpectedRow[], failure: string): Figure[] {
  return rows.map((row) => ({
    ...row,
    value: NaN,
    baseline: null,
    baselineLabel: "",
    met: false,
    note: failure,
    why: `the bench failed: ${failure}`,
  }));
}

export function percentile(values: number[], p: number): number {
  if (values.length === 0) return NaN;
  const sorted = [...values].sort((a, b) => a - b);
  const idx = Math.min(sorted.length - 1, Math.max(0, Math.ceil((p / 100) * sorted.length) - 1));
  return sorted[idx]!;
}

export function median(values: number[]): number {
  return percentile(values, 50);
}

const fmt = (n: number | null) =>
  n === null || Number.isNaN(n) ? "—" : Math.abs(n) >= 100 ? n.toFixed(0) : n.toFixed(2);
/** A figure's value with its unit; n/a when nothing was measured (its bench failed). */
const shown = (f: Figure) => (Number.isNaN(f.value) ? "n/a" : `${fmt(f.value)} ${f.unit}`);

/**
 * By how much a missed figure misses its target, read from the target's text: a `×` target
 * compares value / baseline, any other the value in its own unit. Undefined when the figure
 * met its target or the target is not a bound.
 */
export function missedBy(f: Figure): string | undefined {
  if (f.met !== false) return undefined;
  if (Number.isNaN(f.value)) return `misses ${f.target}: nothing was measured`;
  const m = /^([≤≥])\s*([\d.,]+)\s*(×)?/.exec(f.target);
  if (!m) return `misses ${f.target}`;
  const limit = Number(m[2]!.replace(/,/g, ""));
  const ratio = m[3] === "×";
  if (ratio && !f.baseline) return `misses ${f.target} (no baseline to compare with)`;
  const measured = ratio ? f.value / f.baseline! : f.value;
  if (Number.isNaN(measured)) return `misses ${f.target}: nothing was measured`;
  const show = (n: number) => (ratio ? `${n.toFixed(2)}×` : `${fmt(n)} ${f.unit}`);
  const over = m[1] === "≤" ? measured - limit : limit - measured;
  const times = m[1] === "≤" ? measured / limit : limit / measured;
  const absolute = ratio ? `; ${fmt(f.value)} ${f.unit} against ${fmt(limit * f.baseline!)} ${f.unit} allowed` : "";
  if (over <= 0)
    return `meets ${f.target} by its value (${show(measured)}), but its correctness check failed (see its note)`;
  return `${show(measured)} against ${f.target}: ${m[1] === "≤" ? "over" : "short"} by ${show(over)} (${times.toFixed(2)}× off)${absolute}`;
}

export function machine(): string {
  const cpu = cpus();
  return `${cpu.length} × ${cpu[0]?.model.trim() ?? "cpu"}, ${(totalmem() / 2 ** 30).toFixed(0)} GiB, Node ${process.versions.node}`;
}

/** The machine's 1-minute load average at the end of the run: other work on a shared machine shows here. */
const load = () => loadavg()[0]!.toFixed(1);

/** The report's list of missed targets: by how much each misses, and where its profile or notes say why. */
function missedSection(figures: Figure[]): string[] {
  const missed = figures.filter((f) => f.met === false);
  if (missed.length === 0) return [];
  return [
    ``,
    `## Missed targets`,
    ``,
    ...missed.map(
      (f) =>
        `- **${f.bench}, ${f.metric}**: ${missedBy(f)}. Why: ${f.why ?? "no profile was taken in this run; see bench/notes/"}`,
    ),
  ];
}

/**
 * Prints the table and writes bench/results/<name>.{json,md}; a full run ("latest") also
 * appends one line to history.jsonl (date, machine, load, every figure), so a regression
 * shows against the runs before it, and, given `readme`, quotes the run there (quoteInReadme).
 */
export function writeReport(dir: string, figures: Figure[], notes: string[], name = "latest", readme?: string): string {
  const date = new Date().toISOString();
  const lines = [
    `# Drover benchmarks`,
    ``,
    `Run ${date} on ${machine()}; load average ${load()} at the end (the machine is shared: other work shows in the figures).`,
    ``,
    `| bench | metric | value | baseline | ratio | target | met |`,
    `|---|---|---|---|---|---|---|`,
    ...figures.map(
      (f) =>
        `| ${f.bench} | ${f.metric} | ${shown(f)} | ${f.baseline === null ? "—" : `${fmt(f.baseline)} ${f.unit} (${f.baselineLabel})`} | ${
          f.baseline ? (f.value / f.baseline).toFixed(2) + "×" : "—"
        } | ${f.target} | ${f.met === null ? "—" : f.met ? "yes" : "**no**"} |`,
    ),
    ``,
    ...figures.filter((f) => f.note).map((f) => `- ${f.bench}, ${f.metric}: ${f.note}`),
    ...notes.map((n) => `- ${n}`),
    ...missedSection(figures),
    ``,
  ];
  const md = lines.join("\n");
  mkdirSync(dir, { recursive: true });
  writeFileSync(join(dir, `${name}.md`), md);
  writeFileSync(
    join(dir, `${name}.json`),
    JSON.stringify({ date, machine: machine(), load: Number(load()), figures, notes }, null, 2) + "\n",
  );
  if (name === "latest") {
    const compact = figures.map((f) => ({
      bench: f.bench,
      metric: f.metric,
      unit: f.unit,
      value: f.value,
      baseline: f.baseline,
      met: f.met,
    }));
    appendFileSync(
      join(dir, "history.jsonl"),
      JSON.stringify({ date, machine: machine(), load: Number(load()), figures: compact }) + "\n",
    );
    if (readme) process.stderr.write(`${quoteInReadme(readme, figures, date, load())}\n`);
  }
  return md;
}

const readmeStart =
  "<!-- bench:latest (written by a full `npm run bench`; edit bench/src/report.ts, not this table) -->";
const readmeEnd = "<!-- /bench:latest -->";

/**
 * Replaces the README's block between the bench markers with the figures of a full run, so
 * the README quotes latest.md and never a run of some benches. Returns what it did, for the
 * run's output; a README without the markers is left alone.
 */
export function quoteInReadme(readme: string, figures: Figure[], date: string, loadAverage: string): string {
  if (!existsSync(readme)) return `${readme} not found: not updated`;
  const text = readFileSync(readme, "utf8");
  const start = text.indexOf(readmeStart);
  const end = text.indexOf(readmeEnd);
  if (start < 0 || end < start) return `${readme} has no bench markers: not updated`;
  const cell = (s: string) => s.replace(/\|/g, "\\|");
  const block = [
    readmeStart,
    `Figures of the latest full run (${date.slice(0, 10)}, ${machine()}, load average ${loadAverage} at its end), copied from`,
    `[\`bench/results/latest.md\`](bench/results/latest.md), where each figure's note and the missed targets' explanations are:`,
    ``,
    `| bench | figure | Drover | baseline in the same run | target | met |`,
    `|---|---|---|---|---|---|`,
    ...figures.map(
      (f) =>
        `| ${cell(f.bench)} | ${cell(f.metric)} | ${shown(f)} | ${f.baseline === null ? "—" : `${fmt(f.baseline)} ${f.unit} (${cell(f.baselineLabel)})`} | ${cell(f.target)} | ${
          f.met === null ? "—" : f.met ? "yes" : "no"
        } |`,
    ),
    readmeEnd,
  ].join("\n");
  writeFileSync(readme, text.slice(0, start) + block + text.slice(end + readmeEnd.length));
  return `${readme}: the benchmarks table now quotes this run`;
}
