import assert from "node:assert/strict";
import { mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { test } from "node:test";
import { PlanLineScanner, planSucceededCodes, summaryOfPlanOutput } from "@drover/agent";
import { jobAssignmentSchema, summarizePlan } from "@drover/protocol";
import { runTerraform, terraformEnv } from "../support/terraform.js";

/** The `Plan:` line of `output` fed to a scanner in pieces of `size` bytes. */
function scan(output: string, size: number): string | undefined {
  const scanner = new PlanLineScanner();
  const bytes = Buffer.from(output);
  for (let i = 0; i < bytes.length; i += size) scanner.push(bytes.subarray(i, i + size));
  return scanner.end();
}

test("the summary line's counts, as terraform and OpenTofu print them, in any chunking", () => {
  const lines: Array<[string, { add: number; change: number; destroy: number }]> = [
    ["Plan: 3 to add, 0 to change, 0 to destroy.", { add: 3, change: 0, destroy: 0 }],
    ["Plan: 1 to import, 2 to add, 1 to change, 4 to destroy.", { add: 2, change: 1, destroy: 4 }],
    ["Plan: 0 to add, 0 to change, 0 to destroy, 1 to forget.", { add: 0, change: 0, destroy: 0 }],
    ["Plan: 10 to add, 20 to change, 30 to destroy.", { add: 10, change: 20, destroy: 30 }],
  ];
  for (const [line, counts] of lines) {
    const output = `Terraform will perform the following actions:\n\n  # x will be created\n${"y".repeat(2000)}\n${line}\n\nChanges to Outputs:\n  + a = 1\n`;
    for (const size of [1, 7, 64, 100_000]) {
      assert.equal(scan(output, size), line, `pieces of ${size}`);
      assert.deepEqual(summaryOfPlanOutput(2, scan(output, size)), { ...counts, hasChanges: true });
    }
  }
  // The last line counts even without its newline; a resource named like the line inside a long line does not.
  assert.equal(scan("a\nPlan: 1 to add, 0 to change, 0 to destroy.", 5), "Plan: 1 to add, 0 to change, 0 to destroy.");
  assert.equal(scan(`${"z".repeat(1000)}Plan: 9 to add\nNo changes.\n`, 3), undefined);
  // Exit 0 is no changes, whatever the output says; exit 2 without a line (outputs only) is a change of nothing counted.
  assert.deepEqual(summaryOfPlanOutput(0, "Plan: 1 to add, 0 to change, 0 to destroy."), {
    add: 0,
    change: 0,
    destroy: 0,
    hasChanges: false,
  });
  assert.deepEqual(summaryOfPlanOutput(2, undefined), { add: 0, change: 0, destroy: 0, hasChanges: true });
  assert.deepEqual([...planSucceededCodes], [0, 2]);
});

test("real terraform: -detailed-exitcode and the summary line agree with the plan's JSON (adds, updates, replaces, destroys, moves, outputs)", async (t) => {
  const dir = mkdtempSync(join(tmpdir(), "drover-plan-line-"));
  t.after(() => rmSync(dir, { recursive: true, force: true }));
  const env = terraformEnv(dir);
  const tf = async (ok: number[], ...args: string[]) => {
    const r = await runTerraform(args, dir, env);
    assert.ok(ok.includes(r.code), `${args.join(" ")} exited ${r.code}: ${r.output}`);
    return r;
  };
  const both = async (): Promise<void> => {
    const plan = await tf([0, 2], "plan", "-input=false", "-no-color", "-detailed-exitcode", "-out=p.tfplan");
    const fromLine = summaryOfPlanOutput(plan.code, scan(plan.output, 13));
    const fromJson = summarizePlan(JSON.parse((await tf([0], "show", "-json", "p.tfplan")).output));
    assert.deepEqual(fromLine, fromJson, plan.output);
    await tf([0], "apply", "-input=false", "-no-color", "p.tfplan");
  };
  writeFileSync(
    join(dir, "main.tf"),
    'resource "terraform_data" "keep" {\n  input = "a"\n}\nresource "terraform_data" "gone" {\n  count = 2\n}\nresource "terraform_data" "swap" {\n  triggers_replace = "1"\n}\n',
  );
  await tf([0], "init", "-input=false", "-no-color");
  await both();
  writeFileSync(
    join(dir, "main.tf"),
    'resource "terraform_data" "kept" {\n  input = "b"\n}\nmoved {\n  from = terraform_data.keep\n  to   = terraform_data.kept\n}\nresource "terraform_data" "swap" {\n  triggers_replace = "2"\n}\nresource "terraform_data" "new" {}\n',
  );
  await both();
  // Moves only, then an output only: changes that count nothing.
  writeFileSync(
    join(dir, "main.tf"),
    'resource "terraform_data" "k" {\n  input = "b"\n}\nmoved {\n  from = terraform_data.kept\n  to   = terraform_data.k\n}\nresource "terraform_data" "swap" {\n  triggers_replace = "2"\n}\nresource "terraform_data" "new" {}\n',
  );
  await both();
  writeFileSync(
    join(dir, "main.tf"),
    'resource "terraform_data" "k" {\n  input = "b"\n}\nresource "terraform_data" "swap" {\n  triggers_replace = "2"\n}\nresource "terraform_data" "new" {}\noutput "o" {\n  value = 1\n}\n',
  );
  await both();
  await both();
});

test("the planJson an older server still sends is ignored: the plan job renders the JSON whatever it says", () => {
  const assignment = {
    jobId: "job_1",
    attempt: 1,
    jobToken: "t",
    phase: "plan",
    runId: "run_1",
    planOnly: false,
    isDestroy: false,
    workspace: {
      id: "ws_1",
      name: "w",
      engine: "terraform",
      engineVersion: null,
      workingDirectory: "",
      runnerImage: null,
    },
    configurationVersionId: "cv_1",
    statePath: "/s",
    leaseTtlMs: 30_000,
  };
  for (const planJson of ["plan-unless-changes", "apply", "none", "render-somewhere-new"]) {
    const older = jobAssignmentSchema.safeParse({ ...assignment, planJson });
    assert.ok(older.success, older.success ? "" : older.error.message);
    assert.ok(!("planJson" in older.data), `planJson ${planJson} is no part of the assignment`);
  }
});
