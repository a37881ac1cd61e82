// Started by scripts/run-tests.mjs (with the timeout preload as --import, which the runner passes
// on to every test file): runs the test files it is given, in the order given, `--concurrency`
// at a time, with the spec reporter on stdout. Node's `--test` command line would sort them by
// path; the runner's run() API keeps the order (see test-order.mjs). Each file's wall time is
// merged into the last-run record for scripts/test-durations.mjs.
//
//   node --import scripts/test-timeout.mjs scripts/test-files.mjs --concurrency=N file.test.js ...
import { writeFileSync, mkdirSync } from "node:fs";
import { dirname, resolve } from "node:path";
import { run } from "node:test";
import { spec } from "node:test/reporters";
import { durationKey, lastRunDurations, readDurations } from "./test-order.mjs";

const concurrencyArg = process.argv.find((a) => a.startsWith("--concurrency="));
const concurrency = concurrencyArg ? Number(concurrencyArg.slice("--concurrency=".length)) : 1;
// Absolute: the runner names a file's test by the path it was given but reports the file's
// absolute path, and a file's wall time is recognised by the two being equal.
const files = process.argv
  .slice(2)
  .filter((a) => !a.startsWith("--"))
  .map((f) => resolve(f));

const measured = {};
/** Files with a failed test: their time (a timeout, a test cut short) says nothing of their usual one. */
const failed = new Set();
const stream = run({ files, concurrency });
stream.on("test:complete", (data) => {
  // A file is reported as a test named by its path; its duration is the file's wall time.
  if (data.nesting === 0 && data.name === data.file && data.details?.duration_ms !== undefined) {
    measured[durationKey(data.file)] = Math.round(data.details.duration_ms / 100) / 10;
  }
});
// What `node --test` does: a failure fails the run unless the test is marked todo.
stream.on("test:fail", (data) => {
  if (data.todo === undefined || data.todo === false) {
    process.exitCode = 1;
    if (data.file) failed.add(durationKey(data.file));
  }
});
stream.once("end", () => {
  if (Object.keys(measured).length === 0) return;
  try {
    const record = { ...readDurations(lastRunDurations), ...measured };
    for (const file of failed) delete record[file];
    mkdirSync(dirname(lastRunDurations), { recursive: true });
    writeFileSync(lastRunDurations, JSON.stringify(record, null, 1) + "\n");
  } catch (err) {
    process.stderr.write(
      `[run-tests] could not record the files' durations in ${lastRunDurations}: ${err instanceof Error ? err.message : String(err)}\n`,
    );
  }
});
stream.compose(spec).pipe(process.stdout);
