import assert from "node:assert/strict";
import { spawn } from "node:child_process";
import { once } from "node:events";
import { test } from "node:test";
// The bench's types from the project reference, its code from the compiled output (bench/ is not an npm workspace).
import type * as Harness from "../../bench/src/harness.js";

const { stopTracked, track, trackStop } = (await import(new URL("../../../bench/dist/harness.js", import.meta.url).href)) as typeof Harness;

test("stopTracked kills every tracked process still running and runs the recorded stops, once; a forgotten stop is not run", async () => {
  const child = track(spawn(process.execPath, ["-e", "setInterval(() => {}, 1000)"], { stdio: "ignore" }));
  const exited = once(child, "exit");
  const stops: string[] = [];
  trackStop(() => stops.push("cluster"));
  const forget = trackStop(() => stops.push("stopped by its bench already"));
  forget();
  assert.equal(stopTracked(), 2);
  const [, signal] = await exited;
  assert.equal(signal, "SIGKILL");
  assert.deepEqual(stops, ["cluster"]);
  assert.equal(stopTracked(), 0, "nothing is ended twice");
});

test("a tracked process that ended on its own is not counted", async () => {
  const child = track(spawn(process.execPath, ["-e", ""], { stdio: "ignore" }));
  await once(child, "exit");
  assert.equal(stopTracked(), 0);
});
