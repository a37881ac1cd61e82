import assert from "node:assert/strict";
import { spawn } from "node:child_process";
import { mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { after, before, test } from "node:test";
import { runTerraform, terraformEnv } from "../support/terraform.js";
import { startTestServer, type TestServer } from "../support/server.js";
import { routePath, routes } from "@drover/protocol";

// The real terraform CLI against the server's `http` state backend.

let server: TestServer;
let dir: string;
let wsId: string;
let env: NodeJS.ProcessEnv;

before(async () => {
  server = await startTestServer();
  await server.api(routes.createPool, { body: { name: "tf" } });
  const ws = await server.api(routes.createWorkspace, { body: { name: "state-test", pool: "tf" } });
  wsId = ws.body.id;
  dir = mkdtempSync(join(tmpdir(), "drover-tfstate-"));
  writeFileSync(
    join(dir, "main.tf"),
    `terraform {
  backend "http" {}
}
variable "pause" {
  type    = number
  default = 0
}
resource "terraform_data" "slow" {
  input = "v1"
  provisioner "local-exec" {
    command = "sleep \${var.pause}"
  }
}
output "value" {
  value = terraform_data.slow.output
}
`,
  );
  const address = server.url + routePath(routes.readState, { ws: wsId });
  env = terraformEnv(dir, {
    TF_HTTP_ADDRESS: address,
    TF_HTTP_LOCK_ADDRESS: address,
    TF_HTTP_UNLOCK_ADDRESS: address,
    TF_HTTP_USERNAME: "drover",
    TF_HTTP_PASSWORD: server.adminToken,
  });
  const init = await runTerraform(["init", "-input=false", "-no-color"], dir, env);
  assert.equal(init.code, 0, init.output);
});

after(async () => {
  await server?.stop();
  if (dir) rmSync(dir, { recursive: true, force: true });
});

test("terraform apply stores a state version through the http backend", async () => {
  const apply = await runTerraform(["apply", "-auto-approve", "-input=false", "-no-color"], dir, env);
  assert.equal(apply.code, 0, apply.output);
  const versions = await server.api(routes.listStateVersions, { params: { ws: wsId } });
  assert.equal(versions.status, 200);
  assert.ok(versions.body.items.length >= 1);
  const latest = await server.api(routes.downloadStateVersion, { params: { id: versions.body.items[0].id } });
  assert.equal(latest.body.resources[0].type, "terraform_data");
  assert.equal(latest.body.outputs.value.value, "v1");
  const ws = await server.api(routes.getWorkspace, { params: { ws: wsId } });
  assert.equal(ws.body.stateLocked, false, "terraform released its lock");
});

test("a second terraform run while the lock is held fails with terraform's lock error; state intact", async () => {
  const before = await server.api(routes.listStateVersions, { params: { ws: wsId } });
  // The first run holds the lock while its provisioner sleeps (replace forces the provisioner to run).
  const first = spawn(
    "terraform",
    ["apply", "-auto-approve", "-input=false", "-no-color", "-var", "pause=4", "-replace=terraform_data.slow"],
    { cwd: dir, env },
  );
  let firstOutput = "";
  first.stdout.on("data", (d: Buffer) => (firstOutput += d.toString()));
  first.stderr.on("data", (d: Buffer) => (firstOutput += d.toString()));
  const firstDone = new Promise<number>((resolve) => first.on("exit", (code) => resolve(code ?? 1)));

  for (let i = 0; i < 100; i++) {
    if ((await server.api(routes.getWorkspace, { params: { ws: wsId } })).body.stateLocked) break;
    await new Promise((r) => setTimeout(r, 100));
  }
  assert.equal(
    (await server.api(routes.getWorkspace, { params: { ws: wsId } })).body.stateLocked,
    true,
    "the first run holds the lock",
  );

  const second = await runTerraform(
    ["apply", "-auto-approve", "-input=false", "-no-color", "-replace=terraform_data.slow"],
    dir,
    env,
  );
  assert.notEqual(second.code, 0);
  assert.match(second.output, /Error acquiring the state lock/);
  assert.match(second.output, /OperationTypeApply/, "terraform shows the holder's lock info");

  assert.equal(await firstDone, 0, firstOutput);
  const afterRun = await server.api(routes.listStateVersions, { params: { ws: wsId } });
  assert.ok(afterRun.body.items.length > before.body.items.length, "the first run wrote its state");
  const latest = await server.api(routes.downloadStateVersion, { params: { id: afterRun.body.items[0].id } });
  assert.equal(latest.body.resources.length, 1, "the refused run wrote nothing");
  assert.equal((await server.api(routes.getWorkspace, { params: { ws: wsId } })).body.stateLocked, false);
});
