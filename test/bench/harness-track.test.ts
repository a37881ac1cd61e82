import assert from "node:assert/strict";
import { spawn } from "node:child_process";
import { once } from "node:events";
import { test } from "node:test";
// The bench's types from the project reference, its code from the compiled output (bench/ is not an npm workspace).
import type * as Harness from "../../bench/src/harness.js";

const { stopTracked, track, trackStop } = (await import(
  new URL("../../../bench/dist/harness.js", import.meta.url).href
)) as typeof Harness;

test("stopTracked ends every tracked process still running and runs the recorded stops, once; a forgotten stop is not run", async () => {
  const child = track(spawn(process.execPath, ["-e", "setInterval(() => {}, 1000)"], { stdio: "ignore" }));
  const exited = once(child, "exit");
  const stops: string[] = [];
  trackStop(() => stops.push("cluster"));
  const forget = trackStop(() => stops.push("stopped by its bench already"));
  forget();
  assert.equal(stopTracked(), 2);
  const [, signal] = await exited;
  assert.equal(signal, "SIGTERM");
  assert.deepEqual(stops, ["cluster"]);
  assert.equal(stopTracked(), 0, "nothing is ended twice");
});

test("a tracked process that ended on its own is not counted", async () => {
  const child = track(spawn(process.execPath, ["-e", ""], { stdio: "ignore" }));
  await once(child, "exit");
  assert.equal(stopTracked(), 0);
});

// An abandoned bench's agent ends its steps' process groups only on SIGTERM: a SIGKILL left
// terraform and its provisioners running into the benches after it.
test("stopTracked sends SIGTERM first, which a process can act on, and SIGKILL after the grace to one that ignores it", async () => {
  const graceful = track(
    spawn(
      process.execPath,
      [
        "-e",
        "process.on('SIGTERM', () => { process.stdout.write('cleaned up'); process.exit(0); }); process.stdout.write('ready'); setInterval(() => {}, 1000)",
      ],
      { stdio: ["ignore", "pipe", "ignore"] },
    ),
  );
  const stubborn = track(
    spawn(
      process.execPath,
      ["-e", "process.on('SIGTERM', () => {}); process.stdout.write('ready'); setInterval(() => {}, 1000)"],
      { stdio: ["ignore", "pipe", "ignore"] },
    ),
  );
  let said = "";
  graceful.stdout!.on("data", (d: Buffer) => (said += d.toString()));
  await Promise.all([once(graceful.stdout!, "data"), once(stubborn.stdout!, "data")]);
  const [gracefulExit, stubbornExit] = [once(graceful, "exit"), once(stubborn, "exit")];
  // A grace a loaded machine still lets the graceful one use (50 ms was not, once): the stubborn
  // one is killed when it ends.
  assert.equal(stopTracked(3_000), 2);
  assert.deepEqual(await gracefulExit, [0, null]);
  assert.match(said, /cleaned up/);
  assert.deepEqual(await stubbornExit, [null, "SIGKILL"]);
});
