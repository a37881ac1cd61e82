import assert from "node:assert/strict";
import { spawnSync } from "node:child_process";
import { existsSync, readFileSync } from "node:fs";
import { createRequire } from "node:module";
import { dirname, join } from "node:path";
import { fileURLToPath, pathToFileURL } from "node:url";
import { test } from "node:test";

// The Node 24 smoke (scripts/node24.mjs): what CI runs after npm test, and the preload that gives
// it a better-sqlite3 addon built for Node 24. This file is part of the smoke, so the preload's
// test runs under Node 24 there.

const root = join(dirname(fileURLToPath(import.meta.url)), "..", "..", "..");
const node24 = (await import(pathToFileURL(join(root, "scripts", "node24.mjs")).href)) as {
  smokeFiles: string[];
  nodeRelease: { version: string; integrity: string };
};

test("CI runs the smoke after npm test, and every file of the smoke exists", () => {
  const lines = readFileSync(join(root, ".ci", "run"), "utf8")
    .split("\n")
    .filter((l) => l.trim() && !l.trim().startsWith("#"));
  assert.deepEqual(lines.slice(-2), ["npm test", "node scripts/node24.mjs smoke"]);
  assert.match(node24.nodeRelease.version, /^24\./);
  assert.ok(node24.smokeFiles.includes("test/dist/runner/node24.test.js"));
  for (const file of node24.smokeFiles) assert.ok(existsSync(join(root, file)), `${file} is missing`);
});

test(
  "under Node 24 the preload sends every load of better-sqlite3's addon to DROVER_TEST_SQLITE_ADDON",
  // Synchronous module hooks: Node 22.15 and later (the smoke's Node).
  { skip: createRequire(import.meta.url)("node:module").registerHooks ? false : "this Node has no registerHooks" },
  () => {
    const missing = join(root, "test", "dist", "no-such-addon", "better_sqlite3.node");
    const probe = 'const D = require("better-sqlite3"); new D(":memory:"); console.log("opened")';
    const r = spawnSync(process.execPath, ["--import", join(root, "scripts", "node24-sqlite.mjs"), "-e", probe], {
      cwd: root,
      encoding: "utf8",
      env: { ...process.env, DROVER_TEST_SQLITE_ADDON: missing },
    });
    assert.notEqual(r.status, 0, r.stdout);
    assert.ok(r.stderr.includes(missing), r.stderr);
  },
);
