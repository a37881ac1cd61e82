import assert from "node:assert/strict";
import { test } from "node:test";
// The bench's types from the project reference, its code from the compiled output (bench/ is not an npm workspace).
import type * as Report from "../../bench/src/report.js";
import type * as Scale from "../../bench/src/scale.js";

const { percentile } = (await import(new URL("../../../bench/dist/report.js", import.meta.url).href)) as typeof Report;

const { clientLatencies, heartbeatTimeoutMs, scaleCoversAll, scalePlans, scaleProfileFile, scaleRows } = (await import(
  new URL("../../../bench/dist/scale.js", import.meta.url).href
)) as typeof Scale;

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

test("a run with some scale fleets only (BENCH_SCALE_DATABASES) is not a full run; its rows are those of its fleets", () => {
  assert.equal(scaleCoversAll(undefined), true);
  assert.equal(scaleCoversAll(""), true);
  assert.equal(scaleCoversAll("postgres,sqlite"), true);
  assert.equal(scaleCoversAll("postgres"), false);
  assert.equal(scaleCoversAll("sqlite"), false);
  const rows = scaleRows(scalePlans("postgres"));
  assert.deepEqual(
    rows.map((r) => [r.bench, r.metric, r.target]),
    [
      [
        "scale (5000 agents in 5 processes, long-polling + heartbeating, postgres)",
        "heartbeat p99 (client side)",
        "≤ 50 ms",
      ],
      [
        "scale (5000 agents in 5 processes, long-polling + heartbeating, postgres)",
        "heartbeat p99 (server's histogram, bucket bound)",
        "≤ 50 ms",
      ],
      ["scale (5000 agents in 5 processes, long-polling + heartbeating, postgres)", "server peak RSS", "≤ 500 MB"],
      ["scale (5000 agents in 5 processes, long-polling + heartbeating, postgres)", "server CPU", "—"],
    ],
  );
});

test("failed heartbeats count in the client-side p99 at their timeout: a fleet losing 5% of them misses the target", () => {
  const answered = Array.from({ length: 95 }, () => 5);
  const lossy = clientLatencies([
    { latencies: answered.slice(0, 50), heartbeatFailures: 3 },
    { latencies: answered.slice(50), heartbeatFailures: 2 },
  ]);
  assert.equal(lossy.length, 100);
  assert.equal(percentile(lossy, 99), heartbeatTimeoutMs);
  assert.ok(!(percentile(lossy, 99) <= 50));
  assert.equal(percentile(clientLatencies([{ latencies: answered, heartbeatFailures: 0 }]), 99), 5);
  assert.deepEqual(clientLatencies([{ latencies: [], heartbeatFailures: 2 }], 1000), [1000, 1000]);
});

test("the scale bench's server profiles are told apart by their names (database and fleet size), not their contents", () => {
  const files = [
    "server-sqlite-10-100.cpuprofile",
    "server-sqlite-1000-200.cpuprofile",
    "server-postgres-10-300.cpuprofile",
    "server-postgres-5000-400.cpuprofile",
    "server-postgres-5000-400.txt",
  ];
  assert.equal(scaleProfileFile(files, "sqlite", 1000), "server-sqlite-1000-200.cpuprofile");
  assert.equal(scaleProfileFile(files, "sqlite", 10), "server-sqlite-10-100.cpuprofile");
  assert.equal(scaleProfileFile(files, "postgres", 5000), "server-postgres-5000-400.cpuprofile");
  assert.equal(scaleProfileFile(["server-1.cpuprofile"], "postgres", 5000), undefined);
});
