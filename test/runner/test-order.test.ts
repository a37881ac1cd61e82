import assert from "node:assert/strict";
import { spawn } from "node:child_process";
import { readFileSync } from "node:fs";
import { dirname, join } from "node:path";
import { fileURLToPath, pathToFileURL } from "node:url";
import { test } from "node:test";

// The order scripts/run-tests.mjs gives the test files to its lanes (scripts/test-order.mjs), and
// scripts/test-files.mjs, which runs them in that order and records how long each took.

const root = join(dirname(fileURLToPath(import.meta.url)), "..", "..", "..");
const fixture = (name: string) => join(root, "test", "fixtures", "runner", name);

interface TestOrder {
  orderByDuration(files: string[], durations: Record<string, number>): string[];
  simulateLanes(files: string[], durations: Record<string, number>, lanes: number): number[];
  readDurations(path?: string): Record<string, number>;
  durationsTable: string;
  lastRunDurations: string;
}
const order = (await import(pathToFileURL(join(root, "scripts", "test-order.mjs")).href)) as TestOrder;

test("files the table does not know run first, then the known ones longest first; ties keep path order", () => {
  const f = (name: string) => join(root, "test", "dist", name);
  const durations = {
    "test/dist/short.test.js": 2,
    "test/dist/long.test.js": 90,
    "test/dist/mid-b.test.js": 30,
    "test/dist/mid-a.test.js": 30,
  };
  const files = ["short", "mid-b", "new-b", "long", "mid-a", "new-a"].map((n) => f(`${n}.test.js`));
  assert.deepEqual(
    order.orderByDuration(files, durations).map((p) => p.slice(f("x").length - 1)),
    ["new-a.test.js", "new-b.test.js", "long.test.js", "mid-a.test.js", "mid-b.test.js", "short.test.js"],
  );
});

test("longest first ends the lanes together where path order leaves one running alone", () => {
  const durations: Record<string, number> = {
    "a.test.js": 10,
    "b.test.js": 10,
    "c.test.js": 10,
    "d.test.js": 10,
    "z.test.js": 40,
  };
  const files = Object.keys(durations).map((k) => join(root, k));
  assert.deepEqual(order.simulateLanes(files, durations, 2), [60, 20]);
  assert.deepEqual(order.simulateLanes(order.orderByDuration(files, durations), durations, 2), [40, 40]);
});

test("the committed table names only compiled test files, each with a positive number of seconds", () => {
  const table = order.readDurations(order.durationsTable);
  assert.ok(Object.keys(table).length > 50, "the table has the suite's files");
  for (const [file, seconds] of Object.entries(table)) {
    assert.match(file, /^(test\/dist|packages\/[^/]+\/dist\/test|deploy\/pulumi\/dist\/test)\/.+\.test\.js$/);
    assert.ok(typeof seconds === "number" && seconds > 0, `${file}: ${seconds}`);
  }
});

test("test-files.mjs runs the files in the order given (node --test would sort them) and records each one's time", async () => {
  const env = { ...process.env };
  delete env.NODE_TEST_CONTEXT;
  const child = spawn(
    process.execPath,
    [join(root, "scripts", "test-files.mjs"), "--concurrency=1", fixture("z-first.js"), fixture("a-second.js")],
    { cwd: root, env, stdio: ["ignore", "pipe", "pipe"] },
  );
  let output = "";
  child.stdout.on("data", (d: Buffer) => (output += d.toString()));
  child.stderr.on("data", (d: Buffer) => (output += d.toString()));
  const code = await new Promise<number | null>((resolve) => child.on("close", resolve));
  assert.equal(code, 0, output);
  assert.match(output, /z-first runs first[\s\S]*a-second runs second/);
  const last = JSON.parse(readFileSync(order.lastRunDurations, "utf8")) as Record<string, number>;
  for (const name of ["z-first.js", "a-second.js"]) {
    const seconds = last[`test/fixtures/runner/${name}`];
    assert.ok(typeof seconds === "number" && seconds > 0, `${name} recorded: ${JSON.stringify(last)}`);
  }
});

test("test-files.mjs fails the run when a test fails, and does not record that file's time", async () => {
  const env = { ...process.env };
  delete env.NODE_TEST_CONTEXT;
  const child = spawn(
    process.execPath,
    [join(root, "scripts", "test-files.mjs"), "--concurrency=1", fixture("fails.js")],
    { cwd: root, env, stdio: ["ignore", "pipe", "pipe"] },
  );
  let output = "";
  child.stdout.on("data", (d: Buffer) => (output += d.toString()));
  const code = await new Promise<number | null>((resolve) => child.on("close", resolve));
  assert.equal(code, 1, output);
  assert.match(output, /✖ this test fails/);
  const last = JSON.parse(readFileSync(order.lastRunDurations, "utf8")) as Record<string, number>;
  assert.equal(last["test/fixtures/runner/fails.js"], undefined, "a file that failed is not timed");
  assert.match(output, /a todo test that fails does not fail the run \([\d.]+ms\) # TODO/);
});
