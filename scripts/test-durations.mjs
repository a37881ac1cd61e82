// Refreshes scripts/test-durations.json (the order run-tests.mjs starts test files in) from
// what the last runs measured (test/dist/test-durations.last.json, written by every run), and
// drops files that no longer exist. Run it after a full `npm test` on a quiet machine, and
// commit the table. `--plan` changes nothing: it prints the order and the lanes' predicted ends.
//
//   node scripts/test-durations.mjs [--plan] [--concurrency=N]
import { existsSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import {
  durationsTable,
  lastRunDurations,
  orderByDuration,
  readDurations,
  repoRoot,
  simulateLanes,
} from "./test-order.mjs";

const plan = process.argv.includes("--plan");
const concurrencyArg = process.argv.find((a) => a.startsWith("--concurrency="));
const lanes = concurrencyArg ? Number(concurrencyArg.slice("--concurrency=".length)) : 3;

const table = readDurations(durationsTable);
if (!plan) {
  const last = readDurations(lastRunDurations);
  const merged = { ...table };
  for (const [file, seconds] of Object.entries(last)) {
    // Only test files of this repository: the runner's own tests run fixture files too.
    if (file.endsWith(".test.js") && existsSync(join(repoRoot, file)) && typeof seconds === "number")
      merged[file] = seconds;
  }
  for (const file of Object.keys(merged)) if (!existsSync(join(repoRoot, file))) delete merged[file];
  const sorted = Object.fromEntries(Object.entries(merged).sort(([a], [b]) => (a < b ? -1 : 1)));
  writeFileSync(durationsTable, JSON.stringify(sorted, null, 1) + "\n");
  const changed = Object.keys(last).filter((f) => sorted[f] !== undefined && table[f] !== sorted[f]).length;
  console.log(`${durationsTable}: ${Object.keys(sorted).length} files, ${changed} changed`);
}
const current = readDurations(durationsTable);
const files = Object.keys(current).map((f) => join(repoRoot, f));
const ordered = orderByDuration(files, current);
const ends = simulateLanes(ordered, current, lanes);
const total = Object.values(current).reduce((a, b) => a + b, 0);
console.log(
  `sum ${total.toFixed(0)} s over ${files.length} files; sum/${lanes} ${(total / lanes).toFixed(0)} s; longest file ${Math.max(...Object.values(current)).toFixed(0)} s`,
);
console.log(`lanes end at ${ends.map((e) => e.toFixed(0)).join(" / ")} s with the longest first (${lanes} at a time)`);
const byPath = simulateLanes([...files].sort(), current, lanes);
console.log(`lanes end at ${byPath.map((e) => e.toFixed(0)).join(" / ")} s in path order (what node --test does)`);
