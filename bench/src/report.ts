import { appendFileSync, mkdirSync, writeFileSync } from "node:fs";
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
  /** The SPEC §8 target, as text, and whether the value meets it. */
  target: string;
  met: boolean | null;
  note?: string;
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

const fmt = (n: number | null) => (n === null || Number.isNaN(n) ? "—" : Math.abs(n) >= 100 ? n.toFixed(0) : n.toFixed(2));

export function machine(): string {
  const cpu = cpus();
  return `${cpu.length} × ${cpu[0]?.model.trim() ?? "cpu"}, ${(totalmem() / 2 ** 30).toFixed(0)} GiB, Node ${process.versions.node}`;
}

/** The machine's 1-minute load average at the end of the run: other work on a shared machine shows here. */
const load = () => loadavg()[0]!.toFixed(1);

/**
 * Prints the table and writes bench/results/<name>.{json,md}; a full run ("latest") also
 * appends one line to history.jsonl (date, machine, load, every figure), so a regression
 * shows against the runs before it.
 */
export function writeReport(dir: string, figures: Figure[], notes: string[], name = "latest"): string {
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
        `| ${f.bench} | ${f.metric} | ${fmt(f.value)} ${f.unit} | ${f.baseline === null ? "—" : `${fmt(f.baseline)} ${f.unit} (${f.baselineLabel})`} | ${
          f.baseline ? (f.value / f.baseline).toFixed(2) + "×" : "—"
        } | ${f.target} | ${f.met === null ? "—" : f.met ? "yes" : "**no**"} |`,
    ),
    ``,
    ...figures.filter((f) => f.note).map((f) => `- ${f.bench}, ${f.metric}: ${f.note}`),
    ...notes.map((n) => `- ${n}`),
    ``,
  ];
  const md = lines.join("\n");
  mkdirSync(dir, { recursive: true });
  writeFileSync(join(dir, `${name}.md`), md);
  writeFileSync(join(dir, `${name}.json`), JSON.stringify({ date, machine: machine(), load: Number(load()), figures, notes }, null, 2) + "\n");
  if (name === "latest") {
    const compact = figures.map((f) => ({ bench: f.bench, metric: f.metric, unit: f.unit, value: f.value, baseline: f.baseline, met: f.met }));
    appendFileSync(join(dir, "history.jsonl"), JSON.stringify({ date, machine: machine(), load: Number(load()), figures: compact }) + "\n");
  }
  return md;
}
