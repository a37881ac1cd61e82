import assert from "node:assert/strict";
import { readFileSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { after, before, test } from "node:test";
import { startStack, writeConfig, type Stack } from "../support/stack.js";
import { routes } from "@drover/protocol";

let stack: Stack;
before(async () => {
  stack = await startStack();
  await stack.startAgent("one");
  await stack.startAgent("two");
});
after(() => stack?.stop());

test("two agents, 10 runs over 10 workspaces: all complete, none executed twice", async () => {
  const ledger = join(stack.dir, "executions.log");
  writeFileSync(ledger, "");
  const runs: string[] = [];
  for (let i = 0; i < 10; i++) {
    const name = `fleet-${i}`;
    await stack.server.api(routes.createWorkspace, { body: { name, pool: stack.pool } });
    const dir = writeConfig(stack.dir, name, {
      "main.tf": `resource "terraform_data" "n" {\n  provisioner "local-exec" {\n    command = "echo ${name} $DROVER_RUN_ID >> ${ledger}"\n  }\n}\n`,
    });
    runs.push(await stack.startRun(dir, name, ["--auto-apply"]));
  }
  for (const id of runs)
    assert.equal((await stack.waitForRun(id, ["applied", "errored", "canceled"], 180_000)).status, "applied");
  const lines = readFileSync(ledger, "utf8").trim().split("\n");
  assert.equal(lines.length, 10, "each apply executed exactly once");
  assert.equal(new Set(lines).size, 10);
  for (const id of runs)
    assert.ok(
      lines.some((l) => l.endsWith(id)),
      `run ${id} saw DROVER_RUN_ID`,
    );
  const agentsUsed = new Set<string>();
  for (const id of runs) {
    for (const job of (await stack.server.api(routes.listRunJobs, { params: { id } })).body.items) {
      assert.equal(job.attempt, 1, "no job was handed out twice");
      agentsUsed.add(job.agentId);
    }
  }
  assert.equal(agentsUsed.size, 2, "both agents took work");
});
