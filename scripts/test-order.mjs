// The order scripts/run-tests.mjs hands test files to the runner's lanes, from the durations
// recorded in scripts/test-durations.json (refresh it with `node scripts/test-durations.mjs`
// after a full run). Node's own `--test` sorts the files by path, which left the longest files
// to start late and one lane running alone at the end of the run.
import { existsSync, readFileSync } from "node:fs";
import { dirname, join, relative, sep } from "node:path";
import { fileURLToPath } from "node:url";

/** The repository root (this file lives in scripts/). */
export const repoRoot = join(dirname(fileURLToPath(import.meta.url)), "..");
/** The committed table: compiled test file (repository-relative, `/`-separated) to seconds. */
export const durationsTable = join(repoRoot, "scripts", "test-durations.json");
/** What the last runs measured (build output, not committed); the refresh script reads it. */
export const lastRunDurations = join(repoRoot, "test", "dist", "test-durations.last.json");

/** A file's key in the tables: its path from the repository root with `/` separators. */
export function durationKey(file) {
  return relative(repoRoot, file).split(sep).join("/");
}

/** Reads a durations table; a missing or unreadable one is empty (every file is then new). */
export function readDurations(path = durationsTable) {
  if (!existsSync(path)) return {};
  try {
    const table = JSON.parse(readFileSync(path, "utf8"));
    return table && typeof table === "object" ? table : {};
  } catch {
    return {};
  }
}

/**
 * Longest processing time first: files the table does not know (new, so possibly long) first,
 * then the known ones longest first, so the short files fill the lanes at the end and the lanes
 * finish close together. Ties keep path order, so the order is stable.
 */
export function orderByDuration(files, durations) {
  const seconds = (f) => {
    const s = durations[durationKey(f)];
    return typeof s === "number" && Number.isFinite(s) ? s : Infinity;
  };
  return [...files].sort(
    (a, b) =>
      seconds(b) - seconds(a) || (durationKey(a) < durationKey(b) ? -1 : durationKey(a) > durationKey(b) ? 1 : 0),
  );
}

/**
 * The end of a run if the files, in this order, each take the table's time and each of `lanes`
 * lanes takes the next file as soon as it is free (what the runner does); new files count as
 * `unknownSeconds`. Returns the lanes' finishing times, in seconds.
 */
export function simulateLanes(files, durations, lanes, unknownSeconds = 0) {
  const ends = new Array(lanes).fill(0);
  for (const f of files) {
    const s = durations[durationKey(f)];
    const i = ends.indexOf(Math.min(...ends));
    ends[i] += typeof s === "number" ? s : unknownSeconds;
  }
  return ends;
}
