import assert from "node:assert/strict";
import { after, before, test } from "node:test";
import { routes } from "@drover/protocol";
import { startStack, writeConfig, type Stack } from "../support/stack.js";

// Targeted, replacing and refresh-only runs with the real CLI, server, agent and terraform: the
// options reach terraform's plan, and an address that is not one never reaches it.

let stack: Stack;
let config: string;
before(async () => {
  stack = await startStack();
  await stack.startAgent("options-agent");
  config = writeConfig(stack.dir, "two", {
    "main.tf": [
      'resource "terraform_data" "a" {\n  input = "a"\n}',
      'resource "terraform_data" "b" {\n  input = "b"\n}',
      'output "a_id" {\n  value = terraform_data.a.id\n}',
    ].join("\n"),
  });
});
after(() => stack?.stop());

async function stateResources(ws: string): Promise<Record<string, string>> {
  const versions = (await stack.server.api(routes.listStateVersions, { params: { ws } })).body.items;
  if (versions.length === 0) return {};
  const state = (await stack.server.api(routes.downloadStateVersion, { params: { id: versions[0].id } })).body as {
    resources: Array<{ name: string; instances: Array<{ attributes: any }> }>;
  };
  return Object.fromEntries(state.resources.map((r) => [r.name, r.instances[0]!.attributes.id as string]));
}

test("--target plans and applies only the targeted resource", async () => {
  await stack.server.api(routes.createWorkspace, { body: { name: "targeted", pool: stack.pool } });
  const res = await stack.cli([
    "run",
    "start",
    config,
    "-w",
    "targeted",
    "--auto-apply",
    "--target",
    "terraform_data.a",
  ]);
  assert.equal(res.code, 0, res.stdout + res.stderr);
  assert.match(res.stdout, /plan: 1 to add, 0 to change, 0 to destroy/);
  assert.match(res.stdout, /-target/, "terraform warns about the targeted plan");
  assert.deepEqual(Object.keys(await stateResources("targeted")), ["a"]);

  const run = (await stack.server.api(routes.listRuns, { query: { workspace: "targeted", limit: 1 } })).body.items[0];
  assert.deepEqual(run.targets, ["terraform_data.a"]);
  const shown = await stack.cli(["run", "show", run.id]);
  assert.match(shown.stdout, /Targets: terraform_data\.a/);
  assert.match(shown.stdout, /options-agent/, "the jobs name their agent");
});

test("--replace replaces one resource; --refresh-only changes nothing", async () => {
  await stack.server.api(routes.createWorkspace, { body: { name: "replaced", pool: stack.pool } });
  const full = await stack.cli(["run", "start", config, "-w", "replaced", "--auto-apply"]);
  assert.equal(full.code, 0, full.stdout + full.stderr);
  const before = await stateResources("replaced");
  assert.deepEqual(Object.keys(before).sort(), ["a", "b"]);

  const replaced = await stack.cli([
    "run",
    "start",
    config,
    "-w",
    "replaced",
    "--auto-apply",
    "--replace",
    "terraform_data.b",
  ]);
  assert.equal(replaced.code, 0, replaced.stdout + replaced.stderr);
  assert.match(replaced.stdout, /plan: 1 to add, 0 to change, 1 to destroy/);
  const afterReplace = await stateResources("replaced");
  assert.equal(afterReplace.a, before.a, "a stays");
  assert.notEqual(afterReplace.b, before.b, "b is a new instance");

  const versionsBefore = (await stack.server.api(routes.listStateVersions, { params: { ws: "replaced" } })).body.items;
  // A configuration a full plan would change (a new input, a third resource): refresh-only leaves it all.
  const changed = writeConfig(stack.dir, "two-changed", {
    "main.tf": [
      'resource "terraform_data" "a" {\n  input = "changed"\n}',
      'resource "terraform_data" "b" {\n  input = "b"\n}',
      'resource "terraform_data" "c" {}',
    ].join("\n"),
  });
  const refreshed = await stack.cli(["run", "start", changed, "-w", "replaced", "--auto-apply", "--refresh-only"]);
  assert.equal(refreshed.code, 0, refreshed.stdout + refreshed.stderr);
  assert.match(refreshed.stdout, /planned_and_finished/);
  assert.doesNotMatch(refreshed.stdout, /terraform apply/, "nothing to apply: terraform changes nothing");
  const versionsAfter = (await stack.server.api(routes.listStateVersions, { params: { ws: "replaced" } })).body.items;
  assert.equal(versionsAfter.length, versionsBefore.length, "no new state version");
  assert.deepEqual(await stateResources("replaced"), afterReplace);
  const run = (await stack.server.api(routes.listRuns, { query: { workspace: "replaced", limit: 1 } })).body.items[0];
  assert.equal(run.refreshOnly, true);
  assert.match((await stack.cli(["run", "show", run.id])).stdout, /Refresh-only/);
});

test("--destroy with --auto-apply destroys what the workspace manages, without the destroy-all guard", async () => {
  await stack.server.api(routes.createWorkspace, { body: { name: "destroyed", pool: stack.pool } });
  const full = await stack.cli(["run", "start", config, "-w", "destroyed", "--auto-apply"]);
  assert.equal(full.code, 0, full.stdout + full.stderr);
  assert.deepEqual(Object.keys(await stateResources("destroyed")).sort(), ["a", "b"]);

  const destroyed = await stack.cli(["run", "start", config, "-w", "destroyed", "--destroy", "--auto-apply"]);
  assert.equal(destroyed.code, 0, destroyed.stdout + destroyed.stderr);
  assert.match(destroyed.stdout, /applied \(plan: 0 to add, 0 to change, 2 to destroy\)/);
  assert.doesNotMatch(destroyed.stdout, /destroy-all guard/, "a destroy run says what it does: not held");
  assert.deepEqual(await stateResources("destroyed"), {});
  const run = (await stack.server.api(routes.listRuns, { query: { workspace: "destroyed", limit: 1 } })).body.items[0];
  assert.equal(run.isDestroy, true);
  assert.match((await stack.cli(["run", "show", run.id])).stdout, /Destroy: plans to destroy every resource/);
});

test("--no-refresh plans from the stored state without reading the resources; not with --refresh-only", async () => {
  await stack.server.api(routes.createWorkspace, { body: { name: "unrefreshed", pool: stack.pool } });
  const full = await stack.cli(["run", "start", config, "-w", "unrefreshed", "--auto-apply"]);
  assert.equal(full.code, 0, full.stdout + full.stderr);
  const refreshed = await stack.cli(["run", "start", config, "-w", "unrefreshed", "--plan-only"]);
  assert.match(refreshed.stdout, /terraform_data\.a: Refreshing state/);
  const unrefreshed = await stack.cli(["run", "start", config, "-w", "unrefreshed", "--plan-only", "--no-refresh"]);
  assert.equal(unrefreshed.code, 0, unrefreshed.stdout + unrefreshed.stderr);
  assert.match(unrefreshed.stdout, /planned_and_finished/);
  assert.doesNotMatch(unrefreshed.stdout, /Refreshing state/);
  const run = (await stack.server.api(routes.listRuns, { query: { workspace: "unrefreshed", limit: 1 } })).body
    .items[0];
  assert.equal(run.refresh, false);
  assert.match((await stack.cli(["run", "show", run.id])).stdout, /No refresh: plans from the stored state/);

  const both = await stack.cli(["run", "start", config, "-w", "unrefreshed", "--refresh-only", "--no-refresh"]);
  assert.notEqual(both.code, 0);
  assert.match(both.stderr, /cannot also skip the refresh/);
});

test("an address that is not one never becomes a terraform flag; refresh-only with destroy is refused", async () => {
  await stack.server.api(routes.createWorkspace, { body: { name: "attacked", pool: stack.pool } });
  const cli = await stack.cli(["run", "start", config, "-w", "attacked", "--target=-destroy"]);
  assert.notEqual(cli.code, 0);
  assert.match(cli.stderr, /must not start with '-'/);

  const cv = (await stack.server.api(routes.listConfigurationVersions, { params: { ws: "attacked" } })).body.items[0];
  const body = { workspace: "attacked", configurationVersionId: cv.id };
  for (const [field, value] of [
    ["targets", ["terraform_data.a\n-destroy"]],
    ["replaces", ["-destroy"]],
    ["targets", ["terraform_data.a -destroy"]],
    ["targets", ["x".repeat(501) + ".a"]],
    ["targets", Array.from({ length: 101 }, (_, i) => `terraform_data.r${i}`)],
  ] as const) {
    const res = await stack.server.api(routes.createRun, { body: { ...body, [field]: value } });
    assert.equal(res.status, 400, `${field} ${JSON.stringify(value).slice(0, 80)}: ${JSON.stringify(res.body)}`);
  }
  const both = await stack.server.api(routes.createRun, { body: { ...body, refreshOnly: true, isDestroy: true } });
  assert.equal(both.status, 400);
  assert.match(both.body.message, /refresh-only or a destroy, not both/);
  const viaCli = await stack.cli(["run", "start", config, "-w", "attacked", "--refresh-only", "--destroy"]);
  assert.notEqual(viaCli.code, 0);
  assert.match(viaCli.stderr, /refresh-only or a destroy, not both/);
  assert.deepEqual((await stack.server.api(routes.listRuns, { query: { workspace: "attacked" } })).body.items, []);

  // Quoted instance keys and modules are addresses.
  const ok = await stack.server.api(routes.createRun, {
    body: { ...body, planOnly: true, targets: ['module.net["a b"].terraform_data.s[0]', "terraform_data.a"] },
  });
  assert.equal(ok.status, 201, JSON.stringify(ok.body));
  await stack.waitForRun(ok.body.id, ["planned_and_finished", "errored"]);
});
