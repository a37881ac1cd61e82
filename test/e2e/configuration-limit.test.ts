import assert from "node:assert/strict";
import { randomBytes } from "node:crypto";
import { closeSync, openSync, writeSync } from "node:fs";
import { join } from "node:path";
import { after, before, test } from "node:test";
import { routes } from "@drover/protocol";
import { startStack, writeConfig, type Stack } from "../support/stack.js";

// DROVER_MAX_CONFIGURATION_MB raised past its default of 100: a configuration the server takes
// is one the agent unpacks and runs. The real server, CLI, agent and terraform.

let stack: Stack;
before(async () => {
  stack = await startStack({ DROVER_MAX_CONFIGURATION_MB: "120" });
  await stack.startAgent("large-config");
});
after(() => stack?.stop());

test("a configuration over 100 MiB, under a raised DROVER_MAX_CONFIGURATION_MB, runs", async () => {
  const created = await stack.server.api(routes.createWorkspace, { body: { name: "large", pool: stack.pool } });
  assert.equal(created.status, 201, JSON.stringify(created.body));
  const dir = writeConfig(stack.dir, "large", { "main.tf": 'resource "terraform_data" "x" {}\n' });
  // Random bytes do not compress: the archive is over 100 MiB too.
  const blob = openSync(join(dir, "blob.bin"), "w");
  for (let i = 0; i < 101; i++) writeSync(blob, randomBytes(1024 * 1024));
  closeSync(blob);
  const runId = await stack.startRun(dir, "large", ["--auto-apply"]);
  const run = await stack.waitForRun(runId, ["applied", "errored"], 180_000);
  assert.equal(run.status, "applied", run.errorMessage ?? "");
});
