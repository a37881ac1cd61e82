import assert from "node:assert/strict";
import { test } from "node:test";
import { DroverError, type JobVariable } from "@drover/protocol";
import { tfvarsFiles } from "@drover/agent";
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
    { name: "drover.auto.tfvars.json", content: JSON.stringify({ region: "eu" }, null, 2) },
    { name: "drover-hcl-tags.auto.tfvars", content: 'tags = {a = "b"}\n' },
    { name: "drover-hcl-zones.auto.tfvars", content: 'zones = ["x"]\n' },
  ]);
  assert.deepEqual(tfvarsFiles([v("E", "x", { kind: "env" })]), []);
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
