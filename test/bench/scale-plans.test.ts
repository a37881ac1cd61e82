import assert from "node:assert/strict";
import { test } from "node:test";
// The bench's types from the project reference, its code from the compiled output (bench/ is not an npm workspace).
import type * as Scale from "../../bench/src/scale.js";

const { scalePlans } = (await import(new URL("../../../bench/dist/scale.js", import.meta.url).href)) as typeof Scale;

test("BENCH_SCALE_DATABASES selects the scale bench's fleets by database; unset runs both; a typo is refused", () => {
  assert.deepEqual(
    scalePlans(undefined).map((p) => [p.db, p.agents]),
    [
      ["sqlite", 1000],
      ["postgres", 5000],
    ],
  );
  assert.deepEqual(
    scalePlans("postgres").map((p) => [p.db, p.agents]),
    [["postgres", 5000]],
  );
  assert.deepEqual(
    scalePlans(" sqlite , postgres").map((p) => p.db),
    ["sqlite", "postgres"],
  );
  assert.throws(() => scalePlans("postgre"), /BENCH_SCALE_DATABASES: unknown database postgre/);
});
