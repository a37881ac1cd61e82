import assert from "node:assert/strict";
import { spawnSync } from "node:child_process";
import { copyFileSync, mkdirSync, mkdtempSync, rmSync, symlinkSync } from "node:fs";
import { tmpdir } from "node:os";
import { join, resolve } from "node:path";
import { test } from "node:test";

// `drover agent run` loads the CLI from the agent bundle (decision 0037), which `tsc -b` alone
// does not write: this fails when the command then dies on a module path instead of saying
// how to build it. A copy of the entry point beside no bundle stands for such a tree.

test("without the agent bundle, `drover agent run` says to run `npm run build` and exits 1", () => {
  const dir = mkdtempSync(join(tmpdir(), "drover-no-bundle-"));
  try {
    const src = join(dir, "packages", "cli", "dist", "src");
    mkdirSync(src, { recursive: true });
    copyFileSync(resolve("packages/cli/dist/src/main.js"), join(src, "main.js"));
    copyFileSync(resolve("packages/cli/package.json"), join(dir, "packages", "cli", "package.json"));
    symlinkSync(resolve("node_modules"), join(dir, "node_modules"));
    const r = spawnSync(process.execPath, [join(src, "main.js"), "agent", "run"], { encoding: "utf8", env: { ...process.env, DROVER_TOKEN: "" } });
    assert.equal(r.status, 1, r.stderr);
    assert.match(r.stderr, /^drover: the agent bundle is not built \(.*\/packages\/cli\/dist\/agent-bundle\/program\.js is missing\)\. Run `npm run build`/);
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
});
