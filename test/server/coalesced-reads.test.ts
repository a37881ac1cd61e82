import assert from "node:assert/strict";
import { test } from "node:test";
import { CoalescedReads } from "@drover/server";

// Every caller of a coalesced read is answered, whatever goes wrong with its batch, and a failed
// batch does not hold a slot: the reads after it still run.

test("coalesced reads: a batch whose result cannot be read rejects its callers, and the next batch is read", async () => {
  let calls = 0;
  const reads = new CoalescedReads<number, string>(
    async (keys) => {
      calls++;
      if (calls === 1)
        return {
          get: () => {
            throw new Error("unreadable result");
          },
        } as unknown as Map<number, string>;
      return new Map(keys.map((k) => [k, `v${k}`]));
    },
    10,
    1,
  );
  const results = await Promise.allSettled([reads.get(1), reads.get(2), reads.get(1)]);
  assert.deepEqual(
    results.map((r) => r.status),
    ["rejected", "rejected", "rejected"],
  );
  assert.equal(await reads.get(3), "v3");
});

test("coalesced reads: a read that throws before returning a promise rejects its callers, and the next batch is read", async () => {
  let calls = 0;
  const reads = new CoalescedReads<number, string>(
    (keys) => {
      calls++;
      if (calls === 1) throw new Error("no connection");
      return Promise.resolve(new Map(keys.map((k) => [k, `v${k}`])));
    },
    10,
    1,
  );
  await assert.rejects(reads.get(1), /no connection/);
  assert.equal(await reads.get(2), "v2");
});
