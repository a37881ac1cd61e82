import assert from "node:assert/strict";
import { writeFileSync } from "node:fs";
import { join } from "node:path";
import { after, before, test } from "node:test";
import { routes } from "@drover/protocol";
import { runLog, startStack, writeConfig, type Stack } from "../support/stack.js";
import { routeCall } from "../support/typed-api.js";

// HCL variables reaching terraform typed through a real agent, sensitive outputs shown only on
// request, and the workspace's default for the destroy-all guard.

let stack: Stack;
before(async () => {
  stack = await startStack();
  await stack.startAgent("options-agent");
});
after(() => stack?.stop());

const secret = "hunter2-hcl-secret";

const typedConfig = `
variable "tags" {
  type = map(string)
}
variable "zones" {
  type = list(string)
}
variable "db" {
  type = object({ name = string, port = number })
}
variable "untyped" {}
variable "creds" {
  type = map(string)
}
variable "plain" {
  type = string
}
variable "deploy-name" {
  type = string
}
variable "deploy-zones" {
  type = list(string)
}
output "deploy" {
  value = "\${var.deploy-name} in \${join(",", var.deploy-zones)}"
}
resource "terraform_data" "x" {
  input = var.tags
}
output "tag_a" {
  value = var.tags["a"]
}
output "zones" {
  value = var.zones
}
output "db_port" {
  value = var.db.port + 1
}
output "untyped_keys" {
  value = keys(var.untyped)
}
output "plain" {
  value = var.plain
}
output "token" {
  value = var.creds["token"]
}
output "declared" {
  value     = "shown-on-request"
  sensitive = true
}
`;

async function setVar(ws: string, assignment: string, ...flags: string[]) {
  const res = await stack.cli(["workspace", "set-var", ws, assignment, ...flags]);
  assert.equal(res.code, 0, res.stdout + res.stderr);
  return res;
}

test("set-var --hcl: a map, a list and an object reach terraform typed; sensitive parts stay masked", async () => {
  const created = await stack.cli(["workspace", "create", "typed", "--pool", stack.pool, "--auto-apply"]);
  assert.equal(created.code, 0, created.stderr);
  const set = await setVar("typed", 'tags={a = "b", c = "d"}', "--hcl");
  assert.match(set.stdout, /Set terraform variable tags \(HCL\) on typed/);
  await setVar("typed", 'zones=["eu-1", "eu-2", "eu-3"]', "--hcl");
  await setVar("typed", 'db={ name = "main", port = 5432 }', "--hcl");
  await setVar("typed", "untyped={k1 = 1, k2 = 2}", "--hcl");
  await setVar("typed", `creds={user = "admin", token = "${secret}"}`, "--hcl", "--sensitive");
  // Without --hcl the same text stays a string, as before.
  await setVar("typed", 'plain={a="b"}');
  // Terraform's names may hold '-'; an environment variable's may not.
  await setVar("typed", "deploy-name=blue");
  await setVar("typed", 'deploy-zones=["eu-1", "eu-2"]', "--hcl");
  const env = await stack.server.api(routes.setVariable, {
    params: { ws: "typed", key: "MY-VAR" },
    body: { value: "1", kind: "env" },
  });
  assert.equal(env.status, 400);
  assert.match(env.body.message, /"MY-VAR" is not an environment variable name/);

  const shown = await stack.cli(["workspace", "show", "typed"]);
  assert.match(shown.stdout, /KEY\s+KIND\s+HCL\s+VALUE/);
  assert.match(shown.stdout, /tags\s+terraform\s+yes\s+\{a = "b", c = "d"\}/);
  assert.match(shown.stdout, /plain\s+terraform\s+no\s+\{a="b"\}/);
  assert.match(shown.stdout, /creds\s+terraform\s+yes\s+<sensitive>/);

  const dir = writeConfig(stack.dir, "typed", { "main.tf": typedConfig });
  const runId = await stack.startRun(dir, "typed");
  const run = await stack.waitForRun(runId, ["applied", "errored", "planned"]);
  const planLog = await runLog(stack.server, runId, "plan");
  assert.equal(run.status, "applied", run.errorMessage + "\n" + planLog);
  const applyLog = await runLog(stack.server, runId, "apply");
  assert.ok(!planLog.includes(secret) && !applyLog.includes(secret), "the secret is masked:\n" + planLog);
  assert.match(planLog, /token\s+= "\*\*\*"|token\s+= \(sensitive value\)/, planLog);
  // The stored plan JSON holds every variable's value: the secret inside the map is redacted there too.
  const planJson = await stack.server.api(routes.runPlan, { params: { id: runId } });
  assert.equal(planJson.status, 200);
  assert.ok(!JSON.stringify(planJson.body).includes(secret), "the plan JSON holds no secret");
  assert.ok(JSON.stringify(planJson.body).includes("admin"), "only the secret: the map's other values stay");

  const hidden = await stack.cli(["output", "--workspace", "typed", "--json"]);
  assert.equal(hidden.code, 0, hidden.stderr);
  const byName = Object.fromEntries(JSON.parse(hidden.stdout).map((o: any) => [o.name, o]));
  assert.equal(byName.tag_a.value, "b");
  assert.deepEqual(byName.zones.value, ["eu-1", "eu-2", "eu-3"]);
  assert.equal(byName.db_port.value, 5433);
  assert.deepEqual(byName.untyped_keys.value, ["k1", "k2"], "an untyped variable gets the map, not a string");
  assert.equal(byName.plain.value, '{a="b"}');
  assert.equal(byName.deploy.value, "blue in eu-1,eu-2");
  // Built from a sensitive variable: sensitive whatever the configuration says, and hidden.
  assert.equal(byName.token.sensitive, true);
  assert.equal(byName.token.value, null);
  assert.equal(byName.declared.value, null);
  assert.ok(!hidden.stdout.includes(secret));
  const table = await stack.cli(["output", "--workspace", "typed"]);
  assert.match(table.stdout, /declared\s+<sensitive>/);
  assert.ok(!table.stdout.includes("shown-on-request"));
});

test("output --reveal shows sensitive values, in the table and with --json; the API only on ?reveal=true", async () => {
  const revealed = await stack.cli(["output", "--workspace", "typed", "--json", "--reveal"]);
  assert.equal(revealed.code, 0, revealed.stderr);
  const byName = Object.fromEntries(JSON.parse(revealed.stdout).map((o: any) => [o.name, o]));
  assert.equal(byName.token.value, secret);
  assert.equal(byName.token.sensitive, true, "still marked sensitive");
  assert.equal(byName.declared.value, "shown-on-request");
  const table = await stack.cli(["output", "--workspace", "typed", "--reveal"]);
  assert.match(table.stdout, /declared\s+"shown-on-request"/);

  const plain = await stack.server.api(routes.workspaceOutputs, { params: { ws: "typed" } });
  assert.equal(plain.body.items.find((o: any) => o.name === "declared").value, null, "never by default");
  const asked = await stack.server.api(routes.workspaceOutputs, { params: { ws: "typed" }, query: { reveal: "true" } });
  assert.equal(asked.body.items.find((o: any) => o.name === "declared").value, "shown-on-request");
  // A pool token is no user: refused as for every user route.
  const res = await routeCall(stack.server.url, routes.workspaceOutputs, {
    params: { ws: "typed" },
    query: { reveal: "true" },
    token: stack.poolToken,
  });
  assert.equal(res.status, 403, "a pool token is refused on user routes");
  assert.ok(!JSON.stringify(res.body).includes("shown-on-request"));
});

test("--hcl is refused for environment variables and for values that could end their assignment", async () => {
  await stack.server.api(routes.createWorkspace, { body: { name: "hcl-refusals", pool: stack.pool } });
  const env = await stack.cli(["workspace", "set-var", "hcl-refusals", "TF_LOG={a=1}", "--env", "--hcl"]);
  assert.equal(env.code, 1, env.stderr);
  assert.match(env.stderr, /--hcl is for terraform variables: an environment variable \(--env\) is always a string/);
  const direct = await stack.server.api(routes.setVariable, {
    params: { ws: "hcl-refusals", key: "E" },
    body: { value: "{a = 1}", kind: "env", hcl: true },
  });
  assert.equal(direct.status, 400);
  assert.match(direct.body.message, /an environment variable is always a string/);

  const attacks = [
    '{a = "b"}\ninjected = "pwned"',
    '"x"\n}\ninjected = "pwned"',
    "<<EOT\npwned\nEOT",
    '"x"\rinjected = "pwned"',
  ];
  for (const [i, value] of attacks.entries()) {
    const file = join(stack.dir, `attack-${i}`);
    writeFileSync(file, value);
    const res = await stack.cli(["workspace", "set-var", "hcl-refusals", "a", "--hcl", "--value-file", file]);
    assert.notEqual(res.code, 0, `refused: ${JSON.stringify(value)}`);
    assert.match(res.stderr, /an HCL value is one expression on one line, without line breaks, heredocs/);
    assert.match(res.stderr, /write a map or an object on one line: \{a = "b", c = "d"\}/);
  }
  const vars = await stack.server.api(routes.listVariables, { params: { ws: "hcl-refusals" } });
  assert.deepEqual(vars.body.items, [], "nothing was stored");
});

test("an HCL value on one line cannot assign another variable or swallow the next one's", async () => {
  await stack.server.api(routes.createWorkspace, { body: { name: "hcl-attack", pool: stack.pool, autoApply: true } });
  // In one shared file, `a = {` followed by `b = "y"}` would make a = {b = "y"} and drop b.
  await setVar("hcl-attack", "a={", "--hcl");
  await setVar("hcl-attack", 'b="y"}', "--hcl");
  const dir = writeConfig(stack.dir, "hcl-attack", {
    "main.tf":
      'variable "a" {\n  type = any\n  default = "default-a"\n}\nvariable "b" {\n  default = "default-b"\n}\n' +
      'output "a" {\n  value = var.a\n}\n',
  });
  const swallowing = await stack.startRun(dir, "hcl-attack");
  const first = await stack.waitForRun(swallowing, ["applied", "errored", "planned"]);
  assert.equal(first.status, "errored", "terraform refuses the lone `{`");

  // A second assignment on the value's own line is a syntax error, never a variable.
  await stack.server.api(routes.deleteVariable, { params: { ws: "hcl-attack", key: "b" }, query: {} });
  await setVar("hcl-attack", 'a="x" injected = "pwned"', "--hcl");
  const injecting = await stack.startRun(
    writeConfig(stack.dir, "hcl-inject", {
      "main.tf":
        'variable "a" {}\nvariable "injected" {\n  default = "safe"\n}\noutput "i" {\n  value = var.injected\n}\n',
    }),
    "hcl-attack",
  );
  const second = await stack.waitForRun(injecting, ["applied", "errored", "planned"]);
  assert.equal(second.status, "errored", await runLog(stack.server, injecting, "plan"));
  assert.match(await runLog(stack.server, injecting, "plan"), /drover-hcl-a\.tfvars/);
  const outs = await stack.server.api(routes.workspaceOutputs, { params: { ws: "hcl-attack" } });
  assert.ok(!JSON.stringify(outs.body.items).includes("pwned"));
});

test("a workspace's allowDestroyAll auto-applies a destroy-everything plan; the default holds it", async () => {
  const created = await stack.cli(["workspace", "create", "ws-guard", "--pool", stack.pool, "--auto-apply"]);
  assert.equal(created.code, 0, created.stderr);
  const full = writeConfig(stack.dir, "ws-guard-full", {
    "main.tf": 'resource "terraform_data" "a" {}\nresource "terraform_data" "b" {}\n',
  });
  const emptied = writeConfig(stack.dir, "ws-guard-empty", { "main.tf": 'output "left" {\n  value = "none"\n}\n' });
  const applyFull = async () => {
    const id = await stack.startRun(full, "ws-guard");
    assert.equal((await stack.waitForRun(id, ["applied", "errored", "planned"])).status, "applied");
  };
  const destroyAll = async (flags: string[] = []) => {
    const id = await stack.startRun(emptied, "ws-guard", flags);
    return stack.waitForRun(id, ["applied", "errored", "planned"]);
  };

  await applyFull();
  const held = await destroyAll();
  assert.equal(held.status, "planned", "the default holds it");
  assert.match(
    await runLog(stack.server, held.id, "plan"),
    /a workspace allows it for all its runs with: drover workspace update <ws> --allow-destroy-all true/,
  );
  await stack.server.api(routes.discardRun, { params: { id: held.id } });

  const updated = await stack.cli(["workspace", "update", "ws-guard", "--allow-destroy-all", "true"]);
  assert.equal(updated.code, 0, updated.stderr);
  const shown = await stack.cli(["workspace", "show", "ws-guard"]);
  assert.match(shown.stdout, /allow destroy-all: true/);
  assert.equal((await destroyAll()).status, "applied", "the workspace's setting lets it apply");

  // A run may still ask to be held.
  await applyFull();
  const optedOut = await destroyAll(["--no-allow-destroy-all"]);
  assert.equal(optedOut.status, "planned");
  await stack.server.api(routes.discardRun, { params: { id: optedOut.id } });

  const bad = await stack.cli(["workspace", "update", "ws-guard", "--allow-destroy-all", "yes"]);
  assert.equal(bad.code, 2, `a bad flag value is a usage error: ${bad.stderr}`);
  assert.match(bad.stderr, /--allow-destroy-all takes true or false, got "yes"/);
  const viaCreate = await stack.cli([
    "workspace",
    "create",
    "ws-guard-2",
    "--pool",
    stack.pool,
    "--allow-destroy-all",
    "true",
    "--json",
  ]);
  assert.equal(JSON.parse(viaCreate.stdout).allowDestroyAll, true);
});
