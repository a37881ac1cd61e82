import assert from "node:assert/strict";
import { writeFileSync } from "node:fs";
import { join } from "node:path";
import { after, before, test } from "node:test";
import { runLog, writeConfig } from "../support/stack.js";
import { cliConfig, startTerraformCloud, type TerraformCloud } from "../support/terraform-cloud.js";

/*
 * `terraform_remote_state` (backend "remote") inside Drover runs, with the real terraform: the
 * agent hands the run's terraform its job token as TF_TOKEN_<host> for the server's public
 * hostname (here 127.0.0.1:<port>, a port in the variable's name), and the server lets that
 * token read only the state of workspaces that allow the run's workspace. The agent's CLI
 * config maps the hostname to the server over plain HTTP, as a user's would.
 */

let tc: TerraformCloud;
/** What users write as `hostname`: the host of the server's public URL. */
let hostname: string;
before(async () => {
  tc = await startTerraformCloud();
  hostname = new URL(tc.url).host;
  const agentConfig = join(tc.stack.dir, "agent.tfrc");
  // A host block and no credentials: the only token the run's terraform has is the one the agent gives.
  writeFileSync(agentConfig, cliConfig(hostname, tc.url, undefined));
  await tc.stack.startAgent("rs-agent", { TF_CLI_CONFIG_FILE: agentConfig });
});
after(() => tc?.stop());

const reader = () => ({
  "main.tf": [
    'data "terraform_remote_state" "b" {',
    '  backend = "remote"',
    "  config = {",
    `    hostname     = ${JSON.stringify(hostname)}`,
    '    organization = "acme"',
    '    workspaces   = { name = "rs-b" }',
    "  }",
    "}",
    'output "from_b" { value = data.terraform_remote_state.b.outputs.greeting }',
    "",
  ].join("\n"),
});

async function cli(...args: string[]) {
  const res = await tc.stack.cli(args);
  assert.equal(res.code, 0, res.stdout + res.stderr);
  return res.stdout;
}

/** Runs `files` in `workspace` (auto-apply) to its end; returns the run and its plan log. */
async function run(workspace: string, files: Record<string, string>) {
  const dir = writeConfig(tc.stack.dir, `${workspace}-${Date.now()}`, files);
  const id = await tc.stack.startRun(dir, workspace);
  const done = await tc.stack.waitForRun(id, ["applied", "errored", "planned", "discarded"]);
  return { run: done, planLog: await runLog(tc.stack.server, id, "plan") };
}

test("a run reads another workspace's outputs only once that workspace lists it; a third still cannot", async () => {
  for (const ws of ["rs-a", "rs-b", "rs-c"])
    await cli("workspace", "create", ws, "--pool", tc.stack.pool, "--auto-apply");
  const b = await run("rs-b", { "main.tf": 'output "greeting" { value = "hello from b" }\n' });
  assert.equal(b.run.status, "applied", b.planLog);

  const refused = await run("rs-a", reader());
  assert.equal(refused.run.status, "errored", refused.planLog);
  // The job token sees no workspace rs-b, the answer for one that does not exist; the remote
  // backend then asks to create it, and that refusal says what to do.
  assert.match(refused.planLog, /Error creating workspace rs-b: forbidden/, refused.planLog);
  assert.match(refused.planLog, /--remote-state-consumers/, refused.planLog);

  const shown = await cli("workspace", "update", "rs-b", "--remote-state-consumers", "rs-a");
  assert.match(shown, /Updated workspace rs-b/);
  assert.match(await cli("workspace", "show", "rs-b"), /state readable by: rs-a/);

  const allowed = await run("rs-a", reader());
  assert.equal(allowed.run.status, "applied", allowed.planLog);
  const outputs = JSON.parse(await cli("output", "--workspace", "rs-a", "--json")) as {
    name: string;
    value: unknown;
  }[];
  assert.equal(outputs.find((o) => o.name === "from_b")?.value, "hello from b");
  // The data source came through the public hostname with a token, and the log shows no token.
  const reads = tc.requests.filter((r) => r.url === "/api/v2/organizations/acme/workspaces/rs-b");
  assert.ok(reads.length >= 2 && reads.every((r) => r.authorized), JSON.stringify(reads));
  for (const log of [refused.planLog, allowed.planLog]) assert.doesNotMatch(log, /drv_j_/);

  const third = await run("rs-c", reader());
  assert.equal(third.run.status, "errored", third.planLog);

  // Every workspace, once B allows all.
  await cli("workspace", "update", "rs-b", "--global-remote-state", "true");
  assert.match(await cli("workspace", "show", "rs-b"), /state readable by: every workspace/);
  const global = await run("rs-c", reader());
  assert.equal(global.run.status, "applied", global.planLog);
});
