// Runs every compiled test file with Node's test runner, with one throwaway PostgreSQL
// cluster shared by the run (each test file creates its own database in it).
import { spawn } from "node:child_process";
import { readdirSync, statSync, existsSync } from "node:fs";
import { join } from "node:path";
import { startPostgres } from "./postgres.mjs";

function findTests(dir, out = []) {
  if (!existsSync(dir)) return out;
  for (const name of readdirSync(dir)) {
    const path = join(dir, name);
    if (statSync(path).isDirectory()) findTests(path, out);
    else if (name.endsWith(".test.js")) out.push(path);
  }
  return out;
}

const filter = process.argv.slice(2);
let files = [
  ...readdirSync("packages").flatMap((p) => findTests(join("packages", p, "dist", "test"))),
  ...findTests(join("deploy", "pulumi", "dist", "test")),
  ...findTests(join("test", "dist")),
];
if (filter.length > 0) files = files.filter((f) => filter.some((s) => f.includes(s)));
if (files.length === 0) {
  console.error("no test files found; run `tsc -b` first");
  process.exit(1);
}

const pg = await startPostgres();
const env = { ...process.env, DROVER_TEST_PG_URL: pg.url, CHECKPOINT_DISABLE: "1" };
const child = spawn(process.execPath, ["--test", "--test-concurrency=2", "--test-reporter=spec", ...files], { stdio: "inherit", env });
const code = await new Promise((resolve) => child.on("exit", (c, s) => resolve(c ?? (s ? 1 : 0))));
pg.stop();
process.exit(code);
