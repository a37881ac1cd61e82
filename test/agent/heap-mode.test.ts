import assert from "node:assert/strict";
import { spawnSync } from "node:child_process";
import { fileURLToPath } from "node:url";
import { test } from "node:test";
import { operatorHeapFlags } from "@drover/agent/heap-mode";

// Idle heap mode (heap-mode.ts) sets V8 flags at run time and sets V8's defaults back when the
// first job arrives: an operator's own setting of one of those flags would be lost, so with one
// set the agent keeps out of idle mode. Checked in real processes, since the flags are Node's own.

const repo = fileURLToPath(new URL("../../../", import.meta.url));

/** Whether a fresh process started with `nodeArgs` enters idle heap mode as `drover agent run` does. */
function entersIdleMode(nodeArgs: string[]): boolean {
  const script =
    'import { enterIdleHeapMode, inIdleHeapMode } from "@drover/agent/heap-mode"; enterIdleHeapMode(); console.log(JSON.stringify(inIdleHeapMode()));';
  const r = spawnSync(process.execPath, [...nodeArgs, "--input-type=module", "-e", script], {
    cwd: repo,
    encoding: "utf8",
    env: { ...process.env, NODE_OPTIONS: "" },
  });
  assert.equal(r.status, 0, r.stderr);
  return JSON.parse(r.stdout.trim()) as boolean;
}

test("without the operator's own heap flags the agent enters idle heap mode", () => {
  assert.equal(entersIdleMode([]), true);
});

for (const flag of [
  "--max-opt=2",
  "--semi-space-growth-factor=4",
  "--liftoff-only",
  "--no-liftoff-only",
  "--max_opt=3",
]) {
  test(`with ${flag} on node's command line the agent keeps out of idle heap mode (leaving it would reset the flag)`, () => {
    assert.equal(entersIdleMode([flag]), false);
  });
}

test("the operator's heap flags are found in execArgv and NODE_OPTIONS, and only those flags", () => {
  assert.deepEqual(
    operatorHeapFlags(
      ["--max-old-space-size=64", "--max-opt=2"],
      "--max-semi-space-size=2 --semi_space_growth_factor=3",
    ),
    ["--max-opt=2", "--semi_space_growth_factor=3"],
  );
  assert.deepEqual(operatorHeapFlags(["--import", "x.js"], undefined), []);
  assert.deepEqual(operatorHeapFlags([], "  "), []);
});
