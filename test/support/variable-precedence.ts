import assert from "node:assert/strict";
import { routes } from "@drover/protocol";
import { runLog, writeConfig, type Stack } from "./stack.js";

/**
 * A configuration whose own terraform.tfvars and zz.auto.tfvars (a name sorting after the
 * agent's files) set the variables the workspace sets too.
 */
const files = {
  "main.tf": `
variable "greeting" {
  type = string
}
variable "zones" {
  type = list(string)
}
output "greeting" {
  value = var.greeting
}
output "zones" {
  value = var.zones
}
`,
  "terraform.tfvars": 'greeting = "fromtfvars"\nzones = ["fromtfvars"]\n',
  "zz.auto.tfvars": 'greeting = "fromzauto"\nzones = ["fromzauto"]\n',
};

/**
 * Plans that configuration on the existing workspace `ws` with a string and an HCL variable set
 * on it; the plan must show the workspace's values. Returns the plan's log.
 */
export async function planWithWorkspaceVariables(stack: Stack, ws: string, timeoutMs?: number): Promise<string> {
  for (const [key, value, hcl] of [
    ["greeting", "fromws", false],
    ["zones", '["fromws"]', true],
  ] as const) {
    const res = await stack.server.api(routes.setVariable, { params: { ws, key }, body: { value, hcl } });
    assert.equal(res.status, 200, JSON.stringify(res.body));
  }
  const runId = await stack.startRun(writeConfig(stack.dir, `vars-${ws}`, files), ws, ["--plan-only"]);
  const run = await stack.waitForRun(runId, ["planned_and_finished", "errored", "canceled"], timeoutMs);
  const log = await runLog(stack.server, runId, "plan");
  assert.equal(run.status, "planned_and_finished", `${run.errorMessage}\n${log}`);
  assert.match(log, /-var-file=drover\.tfvars\.json -var-file=drover-hcl-zones\.tfvars/);
  assert.match(log, /\+ greeting = "fromws"/, log);
  assert.match(log, /\+ zones\s+= \[\s+\+ "fromws",\s+\]/, log);
  return log;
}
