import { after, test } from "node:test";
import assert from "node:assert/strict";
import { spawn, type ChildProcess } from "node:child_process";
import { randomUUID } from "node:crypto";
import { killTagged, processStartTicks } from "@drover/agent";

// The end of a job kills every process carrying its tag, including ones that left its process
// groups (their own session here). Only processes started from the job's first one on are
// looked at: reading every process's environment is what made this slow on a busy host.

const children: ChildProcess[] = [];
after(() => {
  for (const c of children) c.kill("SIGKILL");
});

/** A tagged process in a session of its own, and its exit (listened to from the start: it may come at any turn). */
function tagged(tag: string): { child: ChildProcess; exited: Promise<unknown> } {
  const child = spawn("sleep", ["60"], {
    detached: true,
    stdio: "ignore",
    env: { ...process.env, DROVER_AGENT_PROCESS_TAG: tag },
  });
  children.push(child);
  return { child, exited: new Promise((r) => child.once("exit", r)) };
}

const alive = (pid: number): boolean => {
  try {
    process.kill(pid, 0);
    return processStartTicks(pid) !== undefined;
  } catch {
    return false;
  }
};

test("processes started before the job's first one are not candidates; those after are killed, in another session too", async () => {
  const tag = `test:${randomUUID()}`;
  const older = tagged(tag);
  const olderStart = processStartTicks(older.child.pid!);
  assert.ok(olderStart !== undefined);
  // The job's first process: one that started at least a clock tick after the older one.
  let first: number | undefined;
  while (first === undefined) {
    const probe = spawn("true");
    const probed = new Promise((r) => probe.once("exit", r));
    const ticks = processStartTicks(probe.pid!);
    await probed;
    if (ticks !== undefined && ticks > olderStart) first = ticks;
  }
  const later = tagged(tag);
  assert.equal(await killTagged(tag, [], 10_000, first), 1);
  await later.exited;
  assert.ok(alive(older.child.pid!), "the older process was not looked at");
  // Without a start, every process is a candidate.
  assert.equal(await killTagged(tag, [], 10_000), 1);
  await older.exited;
  assert.equal(await killTagged(tag, [], 10_000), 0);
});
