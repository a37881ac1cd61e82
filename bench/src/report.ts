import { mkdirSync, writeFileSync } from "node:fs";
import { cpus, totalmem } from "node:os";
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

/** Prints the table and writes bench/results/latest.{json,md}. */
export function writeReport(dir: string, figures: Figure[], notes: string[], name = "latest"): string {
  const date = new Date().toISOString();
  const lines = [
    `# Drover benchmarks`,
    ``,
    `Run ${date} on ${machine()}.`,
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
  writeFileSync(join(dir, `${name}.json`), JSON.stringify({ date, machine: machine(), figures, notes }, null, 2) + "\n");
  return md;
}
