import assert from "node:assert/strict";
import { exponentialBackoff, KeyedWorkQueue, type WorkQueueOptions } from "@drover/agent/kubernetes";
import { test } from "node:test";

// The controller's per-Job work queue: events of one Job one at a time and in order, different
// Jobs in parallel, failures retried with bounded backoff without holding other Jobs up. Time is
// injected: a "sleep" resolves only when the test releases it.

/** A promise the test resolves by hand. */
function gate(): { promise: Promise<void>; open: () => void } {
  let open!: () => void;
  const promise = new Promise<void>((r) => (open = r));
  return { promise, open };
}

interface Sleeps {
  requested: number[];
  release: () => void;
  sleep: WorkQueueOptions["sleep"];
  waiting: () => number;
}

function manualSleeps(): Sleeps {
  const requested: number[] = [];
  const waiters: (() => void)[] = [];
  return {
    requested,
    sleep: (ms) => {
      requested.push(ms);
      return new Promise<void>((r) => waiters.push(r));
    },
    release: () => waiters.splice(0).forEach((w) => w()),
    waiting: () => waiters.length,
  };
}

/** Resolves once `cond` holds, checking after each turn of the event loop. */
async function eventually(cond: () => boolean): Promise<void> {
  for (let i = 0; i < 10_000 && !cond(); i++) await new Promise((r) => setImmediate(r));
  assert.ok(cond(), "condition never held");
}

function queue(over: Partial<WorkQueueOptions> = {}): {
  q: KeyedWorkQueue;
  errors: [string, number, number | undefined][];
  ac: AbortController;
} {
  const ac = new AbortController();
  const errors: [string, number, number | undefined][] = [];
  const q = new KeyedWorkQueue({
    parallelism: 4,
    maxAttempts: 3,
    backoffMs: exponentialBackoff(500, 30_000),
    sleep: () => Promise.resolve(),
    onError: (key, _err, attempt, retryInMs) => errors.push([key, attempt, retryInMs]),
    signal: ac.signal,
    ...over,
  });
  return { q, errors, ac };
}

test("items of one key never run at the same time and run in the order added; other keys run meanwhile", async () => {
  const { q } = queue();
  let running = 0;
  let most = 0;
  const order: number[] = [];
  const blockers = Array.from({ length: 20 }, () => gate());
  const all = blockers.map((g, i) =>
    q.add("job-a", async () => {
      running++;
      most = Math.max(most, running);
      order.push(i);
      await g.promise;
      running--;
    }),
  );
  await eventually(() => order.length === 1);
  // job-a is blocked in its first item; job-b is not held up by it.
  let bRan = false;
  await q.add("job-b", async () => {
    bRan = true;
  });
  assert.ok(bRan);
  assert.equal(order.length, 1, "the second item of job-a started while the first was running");
  // Release out of order: completion order must still follow the order of addition.
  for (let i = blockers.length - 1; i >= 0; i--) blockers[i]!.open();
  await Promise.all(all);
  assert.equal(most, 1);
  assert.deepEqual(
    order,
    blockers.map((_, i) => i),
  );
});

test("an item added for a key while its last one runs waits for it", async () => {
  const { q } = queue();
  const g = gate();
  const log: string[] = [];
  const first = q.add("k", async () => {
    log.push("first start");
    await g.promise;
    log.push("first end");
  });
  await eventually(() => log.length === 1);
  const second = q.add("k", async () => {
    log.push("second");
  });
  await eventually(() => q.activeKeys === 1);
  g.open();
  await Promise.all([first, second]);
  assert.deepEqual(log, ["first start", "first end", "second"]);
});

test("a failing key is retried with growing backoff while other keys proceed, and given up after maxAttempts", async () => {
  const sleeps = manualSleeps();
  const { q, errors } = queue({ sleep: sleeps.sleep, maxAttempts: 4 });
  let badAttempts = 0;
  const bad = q.add("job-bad", async () => {
    badAttempts++;
    throw new Error("server unreachable");
  });
  let laterBad = false;
  const afterBad = q.add("job-bad", async () => {
    laterBad = true;
  });
  await eventually(() => sleeps.waiting() === 1);
  // While job-bad waits out its backoff, other Jobs are handled.
  const done: string[] = [];
  await Promise.all(["job-1", "job-2", "job-3"].map((k) => q.add(k, async () => void done.push(k))));
  assert.deepEqual(done.sort(), ["job-1", "job-2", "job-3"]);
  assert.equal(laterBad, false, "a later item of the failing key ran before the failing one was done");
  for (let round = 0; round < 2; round++) {
    sleeps.release();
    await eventually(() => sleeps.waiting() === 1);
  }
  sleeps.release();
  await bad;
  await afterBad;
  assert.equal(badAttempts, 4);
  assert.deepEqual(sleeps.requested, [500, 1000, 2000]);
  assert.deepEqual(errors, [
    ["job-bad", 1, 500],
    ["job-bad", 2, 1000],
    ["job-bad", 3, 2000],
    ["job-bad", 4, undefined],
  ]);
  assert.ok(laterBad, "the key's next item runs once the failing one is given up");
});

test("an item that fails then succeeds is retried, not given up", async () => {
  const { q, errors } = queue();
  let attempts = 0;
  await q.add("k", async () => {
    if (++attempts < 3) throw new Error("transient");
  });
  assert.equal(attempts, 3);
  assert.deepEqual(errors, [
    ["k", 1, 500],
    ["k", 2, 1000],
  ]);
});

test("parallelism bounds the keys processed at once", async () => {
  const { q } = queue({ parallelism: 2 });
  const gates = [gate(), gate(), gate()];
  let running = 0;
  let most = 0;
  const all = gates.map((g, i) =>
    q.add(`k${i}`, async () => {
      running++;
      most = Math.max(most, running);
      await g.promise;
      running--;
    }),
  );
  await eventually(() => running === 2);
  gates.forEach((g) => g.open());
  await Promise.all(all);
  assert.equal(most, 2);
});

test("stopping drops queued items and ends a backoff", async () => {
  const ac = new AbortController();
  const { q } = queue({
    sleep: (ms, signal) =>
      signal.aborted
        ? Promise.resolve()
        : new Promise<void>((r) => signal.addEventListener("abort", () => r(), { once: true })),
    signal: ac.signal,
  });
  let failing = 0;
  const first = q.add("k", async () => {
    failing++;
    throw new Error("down");
  });
  let ranQueued = false;
  const queued = q.add("k", async () => {
    ranQueued = true;
  });
  await eventually(() => failing === 1);
  ac.abort();
  await Promise.all([first, queued]);
  assert.equal(failing, 1);
  assert.equal(ranQueued, false);
  await q.add("k", async () => {
    ranQueued = true;
  });
  assert.equal(ranQueued, false, "a stopped queue takes no new work");
});

test("exponentialBackoff doubles from its base and stops at its cap", () => {
  const b = exponentialBackoff(500, 3000);
  assert.deepEqual([1, 2, 3, 4, 5].map(b), [500, 1000, 2000, 3000, 3000]);
});

test("items added with keepOnStop survive a stop: one waiting for a slot still runs, a failing one is still retried, and they can be added after it", async () => {
  const ac = new AbortController();
  const { q, errors } = queue({ parallelism: 1, signal: ac.signal });
  const busy = gate();
  const running = q.add("a", () => busy.promise);
  const ran: string[] = [];
  const dropped = q.add("b", async () => void ran.push("b"));
  let attempts = 0;
  const kept = q.add(
    "c",
    async () => {
      attempts++;
      if (attempts === 1) throw new Error("timeout");
      ran.push("c");
    },
    { keepOnStop: true },
  );
  await eventually(() => q.activeKeys === 1);
  ac.abort();
  await dropped;
  busy.open();
  await Promise.all([running, kept]);
  assert.deepEqual(ran, ["c"], "the kept item ran after the stop (retried once); the other was dropped");
  assert.equal(attempts, 2);
  assert.deepEqual(errors, [["c", 1, 500]]);
  await q.add("d", async () => void ran.push("d"), { keepOnStop: true });
  assert.deepEqual(ran, ["c", "d"]);
});
