import assert from "node:assert/strict";
import { test } from "node:test";
import { DatabaseHealth, isConnectionError } from "@drover/server";

// The availability tracker on its own, with an injected clock and probe.

function coded(code: string, message = "x"): Error {
  return Object.assign(new Error(message), { code });
}

async function settle(): Promise<void> {
  for (let i = 0; i < 5; i++) await new Promise((r) => setImmediate(r));
}

test("connection errors are told apart from query errors", () => {
  for (const err of [
    coded("57P01"),
    coded("57P03"),
    coded("08006"),
    coded("ECONNREFUSED"),
    coded("ECONNRESET"),
    new Error("Connection terminated unexpectedly"),
    new Error("Query read timeout"),
  ]) {
    assert.ok(isConnectionError(err), err.message);
  }
  for (const err of [coded("23505"), coded("42P01"), coded("57014"), new Error("syntax error")])
    assert.ok(!isConnectionError(err), err.message);
});

test("one failed connection is only a suspicion: the state turns unavailable only if the probe fails too", async () => {
  let probeFails = false;
  const health = new DatabaseHealth(async () => {
    if (probeFails) throw coded("ECONNREFUSED", "connect ECONNREFUSED");
  });
  const states: string[] = [];
  health.onChange((s) => states.push(s));
  const mapped = health.failure(coded("57P01", "terminating connection due to administrator command"));
  assert.equal(
    (mapped as { code?: string }).code,
    "database_unavailable",
    "the call itself fails with the coded error",
  );
  await settle();
  assert.equal(health.state, "available", "the probe succeeded: a single terminated backend is no outage");
  probeFails = true;
  health.failure(coded("ECONNREFUSED"));
  await settle();
  assert.equal(health.state, "unavailable");
  assert.throws(() => health.assertAvailable(), /database is unavailable/);
  assert.deepEqual(states, ["unavailable"]);
  const query = coded("23505", "duplicate key");
  assert.equal(health.failure(query), query, "other errors pass through unchanged");
  health.close();
});

test("a gap between successful round trips longer than stallMs restarts the grace", () => {
  let now = 1_000;
  const health = new DatabaseHealth(async () => undefined, { now: () => now, stallMs: 500 });
  const gaps: number[] = [];
  health.onStall((g) => gaps.push(g));
  assert.equal(health.since, 1_000);
  health.noteSuccess();
  now += 400;
  health.noteSuccess();
  assert.equal(health.since, 1_000, "a short gap changes nothing");
  now += 2_000;
  health.noteSuccess();
  assert.equal(health.since, 3_400, "the grace starts over at the end of the stall");
  assert.deepEqual(gaps, [2_000]);
  health.close();
});
