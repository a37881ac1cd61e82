import assert from "node:assert/strict";
import { test } from "node:test";
import { setFlagsFromString } from "node:v8";
import { runInNewContext } from "node:vm";
import { LogStream, type JobClient } from "@drover/agent";

// An acknowledged buffer must not stay reachable from LogStream's queue while the rest of the
// queue waits on the server: a producer that outruns the server queues thousands of pipe reads,
// and the acknowledged front of them would otherwise be held until the next compaction.

setFlagsFromString("--expose-gc");
const gc = runInNewContext("gc") as () => void;

test("a buffer the server acknowledged can be collected while later output still waits", async () => {
  let appends = 0;
  let firstLength = 0;
  let releaseHeld: (end: number) => void = () => undefined;
  const job = {
    appendLog(offset: number, data: Buffer): Promise<number> {
      appends++;
      // The first append stores only the first write; the next one is held until the test ends it.
      if (appends === 1) return Promise.resolve(offset + firstLength);
      return new Promise<number>((r) => (releaseHeld = () => r(offset + data.length)));
    },
  } as unknown as JobClient;
  let acked = 0;
  const log = new LogStream(job, { onAcknowledged: (n) => (acked += n) });
  // Written from a function of its own: a block inside this async test would keep `first` alive.
  const ref = ((): WeakRef<Buffer> => {
    // Larger than Buffer's pool, so it is a buffer of its own and not a slice of a shared one.
    const first = Buffer.alloc(64 * 1024, "a");
    firstLength = first.length;
    log.write(first);
    return new WeakRef(first);
  })();
  log.write(Buffer.alloc(64 * 1024, "b"));
  while (appends < 2) await new Promise((r) => setTimeout(r, 10));
  assert.equal(acked, firstLength);
  let collected = false;
  for (let i = 0; i < 50 && !collected; i++) {
    // A WeakRef's target is kept until the current job ends: collect after returning to the loop.
    await new Promise((r) => setImmediate(r));
    gc();
    collected = ref.deref() === undefined;
  }
  assert.ok(collected, "the acknowledged buffer is still reachable from the queue");
  releaseHeld(0);
  await log.close();
  assert.equal(log.acknowledged, firstLength + 64 * 1024);
});
