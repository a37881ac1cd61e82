import assert from "node:assert/strict";
import { test } from "node:test";
// The bench's types from the project reference, its code from the compiled output (bench/ is not an npm workspace).
import type * as Dispatch from "../../bench/src/dispatch.js";

const { measure } = (await import(new URL("../../../bench/dist/dispatch.js", import.meta.url).href)) as typeof Dispatch;

// The bench's servers run as shipped, without DROVER_DIAGNOSTICS_VALIDATE_RESPONSES (a schema
// check per answer would be part of every figure). So that the bench's traffic still meets the
// route table, one small dispatch pass runs here with the check on: an answer outside its
// response schema would be a 500, and the bench's client would fail the pass.

test("a dispatch bench pass against a server checking every answer: every job started once, on its first attempt", async () => {
  const jobs = 30;
  const result = await measure("long-poll", jobs, 5, 2, [], { DROVER_DIAGNOSTICS_VALIDATE_RESPONSES: "true" });
  assert.equal(result.latencies.length, jobs);
  assert.equal(result.duplicates, 0);
  assert.equal(result.reclaimed, 0);
});
