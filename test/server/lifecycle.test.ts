import assert from "node:assert/strict";
import { test } from "node:test";
import {
  DroverError,
  finishedJobStatuses,
  jobStatuses,
  jobTakenAway,
  jobTransitions,
  leasedJobStatuses,
  runStatuses,
  runTransitions,
  terminalRunStatuses,
  unfinishedJobStatuses,
} from "@drover/protocol";

// The lifecycle table (packages/protocol/src/lifecycle.ts) is the one place statuses are related.

test("terminal statuses are those without successors, and every status is reachable from the first", () => {
  assert.deepEqual([...terminalRunStatuses].sort(), [
    "applied",
    "canceled",
    "discarded",
    "errored",
    "planned_and_finished",
  ]);
  assert.deepEqual([...finishedJobStatuses].sort(), ["canceled", "errored", "failed", "succeeded"]);
  for (const [table, all, first] of [
    [runTransitions as Record<string, readonly string[]>, runStatuses as readonly string[], "pending"],
    [jobTransitions as Record<string, readonly string[]>, jobStatuses as readonly string[], "queued"],
  ] as const) {
    const seen = new Set<string>([first]);
    const todo: string[] = [first];
    while (todo.length > 0) {
      for (const next of table[todo.pop() as string] ?? []) {
        if (seen.has(next)) continue;
        seen.add(next);
        todo.push(next);
      }
    }
    assert.deepEqual([...seen].sort(), [...all].sort());
    for (const [from, tos] of Object.entries(table)) assert.ok(!tos.includes(from), `${from} does not follow itself`);
  }
});

test("the job lists the store queries by, and the agent's reading of a refused job call, come from the table", () => {
  assert.deepEqual([...unfinishedJobStatuses].sort(), ["assigned", "queued", "running"]);
  for (const s of leasedJobStatuses) assert.ok(unfinishedJobStatuses.includes(s) && s !== "queued", s);
  assert.deepEqual(jobTakenAway(new DroverError("stale_attempt", "reassigned")), { why: "superseded" });
  assert.deepEqual(jobTakenAway(new DroverError("job_finished", "over", { details: { status: "canceled" } })), {
    why: "finished",
    status: "canceled",
  });
  // A status that is not a finished one (or none) is not trusted as the job's end.
  assert.deepEqual(jobTakenAway(new DroverError("job_finished", "over", { details: { status: "running" } })), {
    why: "finished",
    status: undefined,
  });
  // A job token the server no longer knows (its tokens purged) never works again.
  assert.deepEqual(jobTakenAway(new DroverError("unauthorized", "unknown job token")), { why: "forgotten" });
  assert.equal(jobTakenAway(new DroverError("server_unreachable", "away")), undefined);
  assert.equal(jobTakenAway(new Error("plain")), undefined);
});
