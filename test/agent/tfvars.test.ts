import assert from "node:assert/strict";
import { test } from "node:test";
import { DroverError, type JobVariable } from "@drover/protocol";
import { tfvarsFiles, varFileArgs } from "@drover/agent";
import { sensitiveValues } from "@drover/runtime";

const v = (key: string, value: string, extra: Partial<JobVariable> = {}): JobVariable => ({
  key,
  value,
  kind: "terraform",
  sensitive: false,
  hcl: false,
  ...extra,
});

test("strings share the JSON file; each HCL value is the one line of its own file; env variables get none", () => {
  const files = tfvarsFiles([
    v("region", "eu"),
    v("tags", '{a = "b"}', { hcl: true }),
    v("zones", '["x"]', { hcl: true }),
    v("TF_LOG", "info", { kind: "env" }),
  ]);
  assert.deepEqual(files, [
    { name: "drover.tfvars.json", content: JSON.stringify({ region: "eu" }, null, 2) },
    { name: "drover-hcl-tags.tfvars", content: 'tags = {a = "b"}\n' },
    { name: "drover-hcl-zones.tfvars", content: 'zones = ["x"]\n' },
  ]);
  assert.deepEqual(tfvarsFiles([v("E", "x", { kind: "env" })]), []);
});

test("terraform never loads the files by itself: the plan names each, in order, so they win over the configuration's", () => {
  const files = tfvarsFiles([v("region", "eu"), v("tags", "{}", { hcl: true }), v("run", '"cli"', { hcl: true })]);
  // terraform auto-loads terraform.tfvars(.json) and *.auto.tfvars(.json) only.
  for (const f of files) assert.doesNotMatch(f.name, /\.auto\.tfvars|^terraform\.tfvars/);
  assert.deepEqual(varFileArgs(files), [
    "-var-file=drover.tfvars.json",
    "-var-file=drover-hcl-tags.tfvars",
    "-var-file=drover-hcl-run.tfvars",
  ]);
  assert.deepEqual(varFileArgs([]), []);
});

test("the agent writes no HCL value holding a line break, whatever the server stored", () => {
  for (const value of ['1\ninjected = "x"', "1\rx = 2", "<<EOT\nx\nEOT"])
    assert.throws(
      () => tfvarsFiles([v("a", value, { hcl: true })]),
      (err) => err instanceof DroverError && /line break/.test(err.message),
    );
  assert.throws(() => tfvarsFiles([v("../x", "1", { hcl: true })]), /not valid/);
});

test("a sensitive HCL value is masked whole and by each quoted string long enough to be a secret", () => {
  const parts = sensitiveValues(v("c", '{user = "admin", token = "hunter2-\\"x\\"", pin = "12"}', { hcl: true }));
  assert.deepEqual(parts, ['{user = "admin", token = "hunter2-\\"x\\"", pin = "12"}', 'hunter2-"x"']);
  assert.deepEqual(sensitiveValues(v("s", '"not hcl"')), ['"not hcl"']);
});
