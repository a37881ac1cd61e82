import assert from "node:assert/strict";
import { spawnSync } from "node:child_process";
import { copyFileSync, mkdirSync, mkdtempSync, rmSync, symlinkSync, utimesSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { dirname, join, resolve } from "node:path";
import { test } from "node:test";

// `drover agent run` loads the CLI from the agent bundle (decision 0037), which `tsc -b` alone
// does not write: this fails when the command then dies on a module path instead of saying
// how to build it. A copy of the entry point beside no bundle stands for such a tree.

/** A tree in `dir` with the CLI's compiled entry point and this checkout's node_modules, and no bundle; answers the entry's directory. */
function copyEntryPoint(dir: string): string {
  const src = join(dir, "packages", "cli", "dist", "src");
  mkdirSync(src, { recursive: true });
  copyFileSync(resolve("packages/cli/dist/src/main.js"), join(src, "main.js"));
  copyFileSync(resolve("packages/cli/package.json"), join(dir, "packages", "cli", "package.json"));
  symlinkSync(resolve("node_modules"), join(dir, "node_modules"));
  return src;
}

test("without the agent bundle, `drover agent run` says to run `npm run build` and exits 1", () => {
  const dir = mkdtempSync(join(tmpdir(), "drover-no-bundle-"));
  try {
    const src = copyEntryPoint(dir);
    const r = spawnSync(process.execPath, [join(src, "main.js"), "agent", "run"], {
      encoding: "utf8",
      env: { ...process.env, DROVER_TOKEN: "" },
    });
    assert.equal(r.status, 1, r.stderr);
    assert.match(
      r.stderr,
      /^drover: the agent bundle is not built \(.*\/packages\/cli\/dist\/agent-bundle\/program\.js is missing\)\. Run `npm run build`/,
    );
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
});

// `npx tsc -b` rewrites tsc's output and its .tsbuildinfo but not the bundle: this fails when
// `drover agent run` then runs the old agent silently. File times are set, not waited for.
test("with a bundle older than a package's .tsbuildinfo, `drover agent run` refuses; with a newer one, it runs the bundle", () => {
  const dir = mkdtempSync(join(tmpdir(), "drover-stale-bundle-"));
  try {
    const src = copyEntryPoint(dir);
    const bundle = join(dir, "packages", "cli", "dist", "agent-bundle", "program.js");
    mkdirSync(dirname(bundle));
    writeFileSync(bundle, 'export async function main() { process.stdout.write("the bundle ran\\n"); }\n');
    const info = join(dir, "packages", "agent", "dist", ".tsbuildinfo");
    mkdirSync(dirname(info), { recursive: true });
    writeFileSync(info, "{}");
    const run = () =>
      spawnSync(process.execPath, [join(src, "main.js"), "agent", "run"], {
        encoding: "utf8",
        env: { ...process.env, DROVER_TOKEN: "" },
      });

    utimesSync(bundle, 1_000_000, 1_000_000);
    utimesSync(info, 2_000_000, 2_000_000);
    const stale = run();
    assert.equal(stale.status, 1, stale.stderr);
    assert.equal(stale.stdout, "");
    assert.match(
      stale.stderr,
      /^drover: the agent bundle is older than the compiled packages \(.*\/packages\/agent\/dist\/\.tsbuildinfo was written after .*\/agent-bundle\/program\.js\) \(agent_bundle_stale\) Run `npm ci && npm run build`/,
    );

    utimesSync(bundle, 3_000_000, 3_000_000);
    const fresh = run();
    assert.equal(fresh.status, 0, fresh.stderr);
    assert.equal(fresh.stdout, "the bundle ran\n");
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
});
