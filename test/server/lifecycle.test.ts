import assert from "node:assert/strict";
import { test } from "node:test";
import { finishedJobStatuses, jobStatuses, jobTransitions, runStatuses, runTransitions, terminalRunStatuses } from "@drover/protocol";

// The lifecycle table (packages/protocol/src/lifecycle.ts) is the one place statuses are related.

test("terminal statuses are those without successors, and every status is reachable from the first", () => {
  assert.deepEqual([...terminalRunStatuses].sort(), ["applied", "canceled", "discarded", "errored", "planned_and_finished"]);
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
