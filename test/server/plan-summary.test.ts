import assert from "node:assert/strict";
import { mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { test } from "node:test";
import { summarizePlan } from "@drover/protocol";
import { runTerraform, terraformEnv } from "../support/terraform.js";

// The plan summary decides whether a run is applied or ends "planned, no changes": a plan that
// only moves, imports or forgets resources changes the state and must be applied.

test("a plan that only moves a resource (terraform's own JSON) has changes; a plan of nothing has none", async (t) => {
  const dir = mkdtempSync(join(tmpdir(), "drover-plan-summary-"));
  t.after(() => rmSync(dir, { recursive: true, force: true }));
  const env = terraformEnv(dir);
  const tf = async (...args: string[]) => {
    const r = await runTerraform(args, dir, env);
    assert.equal(r.code, 0, r.output);
    return r.output;
  };
  writeFileSync(join(dir, "main.tf"), `resource "terraform_data" "a" { input = "x" }\n`);
  await tf("init", "-input=false");
  await tf("apply", "-auto-approve", "-input=false");
  writeFileSync(
    join(dir, "main.tf"),
    `resource "terraform_data" "b" { input = "x" }\nmoved {\n  from = terraform_data.a\n  to   = terraform_data.b\n}\n`,
  );
  await tf("plan", "-input=false", "-out=moved.plan");
  const moved = JSON.parse(await tf("show", "-json", "moved.plan")) as Record<string, unknown>;
  assert.deepEqual(summarizePlan(moved), { add: 0, change: 0, destroy: 0, hasChanges: true });
  // Output of a terraform that does not say `applyable` is judged from the move itself.
  const { applyable: _dropped, ...older } = moved;
  assert.equal(summarizePlan(older).hasChanges, true);

  await tf("apply", "-auto-approve", "-input=false", "moved.plan");
  await tf("plan", "-input=false", "-out=none.plan");
  const none = JSON.parse(await tf("show", "-json", "none.plan")) as Record<string, unknown>;
  assert.deepEqual(summarizePlan(none), { add: 0, change: 0, destroy: 0, hasChanges: false });
  const { applyable: _none, ...olderNone } = none;
  assert.equal(summarizePlan(olderNone).hasChanges, false);
});

test("without `applyable`, imports and forgets count as changes; a no-op in place does not; a create counts whatever `applyable` says", () => {
  const rc = (change: Record<string, unknown>, extra: Record<string, unknown> = {}) => ({
    resource_changes: [{ address: "x.y", change, ...extra }],
  });
  assert.equal(summarizePlan(rc({ actions: ["no-op"], importing: { id: "i-1" } })).hasChanges, true);
  assert.equal(summarizePlan(rc({ actions: ["forget"] })).hasChanges, true);
  assert.equal(summarizePlan(rc({ actions: ["no-op"] }, { previous_address: "x.y" })).hasChanges, false);
  assert.equal(summarizePlan(rc({ actions: ["no-op"] })).hasChanges, false);
  // A plan that says it is not applyable while it creates something is still applied.
  assert.equal(summarizePlan({ ...rc({ actions: ["create"] }), applyable: false }).hasChanges, true);
  // Output changes alone in a plan terraform will not apply (refresh-only dropping an output) are not applied.
  const dropped = { output_changes: { a_id: { actions: ["delete"] } } };
  assert.equal(summarizePlan({ ...dropped, applyable: false }).hasChanges, false);
  assert.equal(summarizePlan({ ...dropped, applyable: true }).hasChanges, true);
  assert.equal(summarizePlan(dropped).hasChanges, true);
});
