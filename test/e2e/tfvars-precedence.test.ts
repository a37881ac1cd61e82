import assert from "node:assert/strict";
import { after, before, test } from "node:test";
import { routes } from "@drover/protocol";
import { runLog, startStack, writeConfig, type Stack } from "../support/stack.js";

// The workspace's variables win over the configuration's own terraform.tfvars and
// *.auto.tfvars, as on HCP Terraform, whatever those files are named: terraform loads
// *.auto.tfvars in lexical order, the later winning, so a file of the agent's among them would
// lose to any name sorting after it. Real terraform on a real agent.

let stack: Stack;
before(async () => {
  stack = await startStack();
  await stack.startAgent("tfvars-agent");
});
after(() => stack?.stop());

const config = {
  "main.tf": `
variable "greeting" {
  type = string
}
variable "tags" {
  type = map(string)
}
variable "region" {
  type = string
}
variable "only_in_files" {
  type = string
}
output "greeting" {
  value = var.greeting
}
output "tag" {
  value = var.tags["team"]
}
output "region" {
  value = var.region
}
output "only_in_files" {
  value = var.only_in_files
}
`,
  "terraform.tfvars": 'greeting = "fromtfvars"\ntags = { team = "fromtfvars" }\nonly_in_files = "fromtfvars"\n',
  "prod.auto.tfvars": 'greeting = "fromprodauto"\n',
  "zz.auto.tfvars": 'greeting = "fromzauto"\ntags = { team = "fromzauto" }\nonly_in_files = "fromzauto"\n',
};

async function setVar(ws: string, assignment: string, ...flags: string[]): Promise<void> {
  const res = await stack.cli(["workspace", "set-var", ws, assignment, ...flags]);
  assert.equal(res.code, 0, res.stdout + res.stderr);
}

test("workspace variables, strings and HCL, win over the configuration's terraform.tfvars and *.auto.tfvars", async () => {
  const created = await stack.cli(["workspace", "create", "precedence", "--pool", stack.pool, "--auto-apply"]);
  assert.equal(created.code, 0, created.stderr);
  await setVar("precedence", "greeting=fromws");
  await setVar("precedence", 'tags={team = "fromws"}', "--hcl");
  // Required, with no file of the configuration's setting it: the plan must read the agent's file.
  await setVar("precedence", "region=eu-ws");

  const runId = await stack.startRun(writeConfig(stack.dir, "precedence", config), "precedence");
  const run = await stack.waitForRun(runId, ["applied", "errored", "planned"]);
  assert.equal(run.status, "applied", run.errorMessage + "\n" + (await runLog(stack.server, runId, "plan")));
  const res = await stack.server.api(routes.workspaceOutputs, { params: { ws: "precedence" } });
  const outputs = Object.fromEntries(res.body.items.map((o: { name: string; value: unknown }) => [o.name, o.value]));
  assert.deepEqual(outputs, {
    greeting: "fromws",
    tag: "fromws",
    region: "eu-ws",
    // What the workspace does not set, the configuration's files still do, in terraform's order.
    only_in_files: "fromzauto",
  });
});

test("a destroy plan reads the workspace's variables too", async () => {
  const runId = await stack.startRun(writeConfig(stack.dir, "precedence", config), "precedence", ["--destroy"]);
  const run = await stack.waitForRun(runId, ["applied", "errored", "planned"]);
  const log = await runLog(stack.server, runId, "plan");
  assert.equal(run.status, "applied", run.errorMessage + "\n" + log);
  assert.match(log, /greeting\s+= "fromws" -> null/);
});
