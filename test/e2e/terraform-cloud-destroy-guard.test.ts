import assert from "node:assert/strict";
import { writeFileSync } from "node:fs";
import { join } from "node:path";
import { after, before, describe, test } from "node:test";
import { routes } from "@drover/protocol";
import { startTerraformCloud, type TerraformCloud } from "../support/terraform-cloud.js";
import { rawCall } from "../support/typed-api.js";

/*
 * The destroy-all guard seen from terraform 1.11.4's `cloud` block: `apply -auto-approve` of a
 * configuration emptied of its resources must not wait for ever for an apply the guard holds
 * (terraform never confirms an auto-approved run); it fails at once, says why and how to go on,
 * and destroys nothing. The workspace's allowDestroyAll lets the same apply through.
 */

let tc: TerraformCloud;
before(async () => {
  tc = await startTerraformCloud();
  await tc.stack.startAgent("guard-cloud-agent");
});
after(() => tc?.stop());

const full = `
resource "terraform_data" "a" { input = "a" }
resource "terraform_data" "b" { input = "b" }
`;
// An upload without a .tf file is refused: what is left of the configuration is an output.
const emptied = `
output "left" { value = "nothing" }
`;

/** How long terraform gets: a hang would otherwise last until the test runner's own timeout. */
const applyLimitMs = 120_000;

async function apply(dir: string): Promise<{ code: number; output: string }> {
  const proc = tc.spawnTerraform(["apply", "-auto-approve", "-input=false"], dir);
  let timer: NodeJS.Timeout | undefined;
  const limit = new Promise<never>((_, reject) => {
    timer = setTimeout(() => {
      proc.child.kill("SIGKILL");
      reject(new Error(`terraform apply -auto-approve still running after ${applyLimitMs} ms:\n${proc.output()}`));
    }, applyLimitMs);
  });
  try {
    return await Promise.race([proc.done, limit]);
  } finally {
    clearTimeout(timer);
  }
}

async function resourcesInState(workspace: string): Promise<string[]> {
  const res = await tc.stack.server.api(routes.readState, { params: { ws: workspace } });
  if (res.status !== 200) return [];
  const state = res.body as { resources?: { type: string; name: string }[] };
  return (state.resources ?? []).map((r) => `${r.type}.${r.name}`).sort();
}

async function latestRun(workspace: string): Promise<{ id: string; status: string; errorMessage: string | null }> {
  const res = await tc.stack.server.api(routes.listRuns, { query: { workspace, limit: 1 } });
  const run = res.body.items[0];
  assert.ok(run, `workspace ${workspace} has a run`);
  return run;
}

describe("terraform apply -auto-approve and the destroy-all guard", () => {
  const ws = "guarded-cloud";
  let dir: string;

  test("two resources applied through the cloud block", async () => {
    dir = tc.config("guarded-cloud", { name: ws }, { "main.tf": full });
    const init = await tc.terraform(["init", "-input=false"], dir);
    assert.equal(init.code, 0, init.output);
    const first = await apply(dir);
    assert.equal(first.code, 0, first.output);
    assert.match(first.output, /Resources: 2 added, 0 changed, 0 destroyed/);
    assert.deepEqual(await resourcesInState(ws), ["terraform_data.a", "terraform_data.b"]);
  });

  test("the emptied configuration: terraform exits non-zero at once, names the guard, destroys nothing", async () => {
    writeFileSync(join(dir, "main.tf"), emptied);
    const held = await apply(dir);
    assert.notEqual(held.code, 0, held.output);
    assert.match(held.output, /terraform_data\.a will be destroyed/, "the plan is shown");
    assert.match(held.output, /Drover's destroy-all guard did not apply it/);
    assert.match(held.output, /run terraform apply without -auto-approve and answer yes/);
    assert.match(held.output, /drover workspace update guarded-cloud --allow-destroy-all true/);
    assert.doesNotMatch(held.output, /Apply complete/);
    const run = await latestRun(ws);
    assert.equal(run.status, "errored");
    assert.match(run.errorMessage ?? "", /destroy-all guard/);
    assert.deepEqual(await resourcesInState(ws), ["terraform_data.a", "terraform_data.b"], "state unchanged");
    // The run ended errored; its plan had finished, and the TFE API says so.
    const { url, adminToken } = tc.stack.server;
    const tfeRun = await rawCall(url, "GET", `/api/v2/runs/${run.id}`, adminToken);
    const planId = tfeRun.body.data.relationships.plan.data.id as string;
    const plan = await rawCall(url, "GET", `/api/v2/plans/${planId}`, adminToken);
    assert.equal(plan.body.data.attributes.status, "finished", JSON.stringify(plan.body));
    assert.equal(tfeRun.body.data.attributes.status, "errored");
  });

  test("with the workspace's allowDestroyAll, the same apply destroys both", async () => {
    const allow = await tc.stack.cli(["workspace", "update", ws, "--allow-destroy-all", "true"]);
    assert.equal(allow.code, 0, allow.stdout + allow.stderr);
    const destroyed = await apply(dir);
    assert.equal(destroyed.code, 0, destroyed.output);
    assert.match(destroyed.output, /Resources: 0 added, 0 changed, 2 destroyed/);
    assert.equal((await latestRun(ws)).status, "applied");
    assert.deepEqual(await resourcesInState(ws), []);
  });
});
