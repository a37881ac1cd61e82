import assert from "node:assert/strict";
import { readFileSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { after, before, test } from "node:test";
import { routes } from "@drover/protocol";
import { startTerraformCloud, type TerraformCloud } from "../support/terraform-cloud.js";

/*
 * The real terraform 1.11.4 with a `cloud` block against Drover, over plain HTTP through a CLI
 * config `host` block: workspaces by name and by tags, local execution with the state in
 * Drover, the state commands, and one lock shared with Drover's http backend.
 */

let tc: TerraformCloud;
before(async () => {
  tc = await startTerraformCloud();
});
after(() => tc?.stop());

const config = {
  "main.tf": [
    'resource "terraform_data" "a" { input = "one" }',
    'output "greeting" { value = "hello" }',
    // Holds the value of the workspace's sensitive variable below, without saying so.
    'output "echo" { value = "hunter2-workspace-secret" }',
    'output "secret" {',
    '  value     = "s3cret"',
    "  sensitive = true",
    "}",
    // A long name: terraform asks for its value by an id that must still fit a URL path segment.
    'output "database_cluster_primary_endpoint_admin_password_for_the_billing_app" {',
    '  value     = "long-s3cret"',
    "  sensitive = true",
    "}",
    "",
  ].join("\n"),
};

/** The workspace through the TFE API, as terraform reads it. */
async function tfeWorkspace(name: string): Promise<{ id: string; attributes: Record<string, unknown> }> {
  // The TFE API is not in the protocol's route table (decision 0068).
  // eslint-disable-next-line no-restricted-globals
  const res = await fetch(`${tc.stack.server.url}/api/v2/organizations/acme/workspaces/${name}`, {
    headers: { authorization: `Bearer ${tc.stack.server.adminToken}` },
  });
  assert.equal(res.status, 200, `workspace ${name}`);
  return ((await res.json()) as { data: { id: string; attributes: Record<string, unknown> } }).data;
}

async function tfeCall(method: string, path: string, body?: unknown): Promise<number> {
  // eslint-disable-next-line no-restricted-globals
  const res = await fetch(`${tc.stack.server.url}/api/v2${path}`, {
    method,
    headers: { authorization: `Bearer ${tc.stack.server.adminToken}`, "content-type": "application/vnd.api+json" },
    ...(body === undefined ? {} : { body: JSON.stringify(body) }),
  });
  await res.arrayBuffer();
  return res.status;
}

/** Drover's own view of the workspace's current state (its http backend route). */
async function droverState(name: string): Promise<{ serial: number; lineage: string; resources: unknown[] }> {
  const res = await tc.stack.server.api(routes.readState, { params: { ws: name } });
  assert.equal(res.status, 200);
  return res.body as { serial: number; lineage: string; resources: unknown[] };
}

test("init by name creates the workspace; local execution keeps the state in Drover; state commands and output agree with drover", async () => {
  const dir = tc.config("by-name", { name: "app-local" }, config);
  const init = await tc.terraform(["init", "-input=false"], dir);
  assert.equal(init.code, 0, init.output);
  assert.match(init.output, /HCP Terraform has been successfully initialized|has been successfully initialized/);
  const ws = await tc.stack.server.api(routes.getWorkspace, { params: { ws: "app-local" } });
  assert.equal(ws.status, 200, "init created the Drover workspace");
  assert.equal(ws.body.poolName, "e2e", "in DROVER_TFE_POOL's pool");
  assert.ok(
    tc.requests.some((r) => r.method === "POST" && r.url === "/api/v2/organizations/acme/workspaces" && r.authorized),
  );

  const { id } = await tfeWorkspace("app-local");
  assert.equal(
    await tfeCall("PATCH", `/workspaces/${id}`, {
      data: { type: "workspaces", attributes: { "execution-mode": "local" } },
    }),
    200,
  );
  const secretVar = await tc.stack.server.api(routes.setVariable, {
    params: { ws: "app-local", key: "token" },
    body: { value: "hunter2-workspace-secret", sensitive: true },
  });
  assert.equal(secretVar.status, 200, JSON.stringify(secretVar.body));
  const apply = await tc.terraform(["apply", "-auto-approve", "-input=false"], dir);
  assert.equal(apply.code, 0, apply.output);
  assert.match(apply.output, /Apply complete! Resources: 1 added/);
  const stored = await droverState("app-local");
  assert.equal(stored.resources.length, 1, "the state terraform wrote is Drover's current state");
  assert.equal((await tfeWorkspace("app-local")).attributes.locked, false, "the lock is released after apply");

  const out = await tc.terraform(["output", "-json"], dir);
  assert.equal(out.code, 0, out.output);
  const outputs = JSON.parse(out.output) as Record<string, { value: unknown; sensitive: boolean }>;
  assert.equal(outputs.greeting?.value, "hello");
  assert.deepEqual([outputs.secret?.value, outputs.secret?.sensitive], ["s3cret", true]);
  assert.equal(outputs.database_cluster_primary_endpoint_admin_password_for_the_billing_app?.value, "long-s3cret");
  // Drover lists an output holding a sensitive variable's value as sensitive; terraform then asks
  // for its value by id like any sensitive one, and prints it marked.
  assert.deepEqual([outputs.echo?.value, outputs.echo?.sensitive], ["hunter2-workspace-secret", true]);
  const shown = await tc.terraform(["output"], dir);
  assert.equal(shown.code, 0, shown.output);
  assert.match(shown.output, /echo = <sensitive>/);
  assert.doesNotMatch(shown.output, /hunter2/);
  assert.ok(
    tc.requests.some((r) => /\/state-version-outputs\/svo\./.test(r.url)),
    "the sensitive value was fetched",
  );

  // The download URL is absolute, as every URL the API hands out (a relative one drops a path
  // prefix of DROVER_PUBLIC_URL), and serves the state.
  // eslint-disable-next-line no-restricted-globals
  const current = await fetch(`${tc.stack.server.url}/api/v2/workspaces/${id}/current-state-version`, {
    headers: { authorization: `Bearer ${tc.stack.server.adminToken}` },
  });
  const download = ((await current.json()) as { data: { attributes: Record<string, string> } }).data.attributes[
    "hosted-state-download-url"
  ];
  assert.match(download ?? "", /^http:\/\/[^/]+\/api\/v2\/state-versions\/[^/]+\/download$/);
  // eslint-disable-next-line no-restricted-globals
  const downloaded = await fetch(download!, { headers: { authorization: `Bearer ${tc.stack.server.adminToken}` } });
  assert.equal(((await downloaded.json()) as { serial: number }).serial, stored.serial);

  const list = await tc.terraform(["state", "list"], dir);
  assert.equal(list.code, 0, list.output);
  assert.equal(list.output.trim(), "terraform_data.a");
  const pull = await tc.terraform(["state", "pull"], dir);
  assert.equal(pull.code, 0, pull.output);
  const pulled = JSON.parse(pull.output) as { serial: number; lineage: string };
  assert.deepEqual([pulled.serial, pulled.lineage], [stored.serial, stored.lineage], "one history: the same serial");

  const rm = await tc.terraform(["state", "rm", "terraform_data.a"], dir);
  assert.equal(rm.code, 0, rm.output);
  const afterRm = await droverState("app-local");
  assert.equal(afterRm.resources.length, 0);
  assert.ok(afterRm.serial > stored.serial, "state rm wrote a newer serial");

  // Push back the state pulled before rm, with a serial above the stored one.
  const file = join(dir, "pushed.tfstate");
  writeFileSync(file, JSON.stringify({ ...JSON.parse(pull.output), serial: afterRm.serial + 1 }));
  const push = await tc.terraform(["state", "push", file], dir);
  assert.equal(push.code, 0, push.output);
  const afterPush = await droverState("app-local");
  assert.equal(afterPush.resources.length, 1, "the pushed state is current");
  assert.equal(afterPush.lineage, stored.lineage);
  assert.equal((await tfeWorkspace("app-local")).attributes.locked, false, "state push unlocked");
});

test("a lock held through Drover's http backend blocks terraform until force-unlock, and a cloud-block lock blocks the http backend", async () => {
  const dir = tc.config("locked", { name: "app-locked" }, config);
  assert.equal((await tc.terraform(["init", "-input=false"], dir)).code, 0);
  const { id } = await tfeWorkspace("app-locked");
  assert.equal(
    await tfeCall("PATCH", `/workspaces/${id}`, { data: { attributes: { "execution-mode": "local" } } }),
    200,
  );
  const info = { ID: "http-backend-lock", Operation: "OperationTypeApply", Who: "someone@else", Version: "1.11.4" };
  const lock = await tc.stack.server.api(routes.lockState, {
    params: { ws: "app-locked" },
    body: JSON.stringify(info),
  });
  assert.equal(lock.status, 200);
  assert.equal((await tfeWorkspace("app-locked")).attributes.locked, true, "the TFE API sees the http backend's lock");

  const blocked = await tc.terraform(["apply", "-auto-approve", "-input=false"], dir);
  assert.equal(blocked.code, 1, blocked.output);
  assert.match(blocked.output, /Error acquiring the state lock|locked/i);
  assert.equal((await droverState("app-locked").catch(() => null)) === null, true, "nothing was written");

  const wrongId = await tc.terraform(["force-unlock", "-force", "someone/else"], dir);
  assert.notEqual(wrongId.code, 0, "force-unlock with another lock ID is refused by terraform");
  const unlock = await tc.terraform(["force-unlock", "-force", "acme/app-locked"], dir);
  assert.equal(unlock.code, 0, unlock.output);
  assert.match(unlock.output, /successfully unlocked/i);
  assert.equal((await tfeWorkspace("app-locked")).attributes.locked, false);
  assert.ok(tc.requests.some((r) => r.method === "POST" && r.url === `/api/v2/workspaces/${id}/actions/force-unlock`));

  // The other way: a cloud-block lock refuses the http backend's LOCK with the holder's LockInfo.
  assert.equal(
    await tfeCall("POST", `/workspaces/${id}/actions/lock`, { data: { type: "", attributes: { reason: "r" } } }),
    200,
  );
  const refused = await tc.stack.server.api(routes.lockState, {
    params: { ws: "app-locked" },
    body: JSON.stringify({ ...info, ID: "another" }),
  });
  assert.equal(refused.status, 423);
  assert.match(JSON.stringify(refused.body), /terraform cloud block/);
  assert.equal(await tfeCall("POST", `/workspaces/${id}/actions/lock`), 409, "a second lock is a conflict");
  assert.equal(await tfeCall("POST", `/workspaces/${id}/actions/unlock`), 200);
  assert.equal(await tfeCall("POST", `/workspaces/${id}/actions/unlock`), 409, "not locked any more");
  const apply = await tc.terraform(["apply", "-auto-approve", "-input=false"], dir);
  assert.equal(apply.code, 0, apply.output);
});

test("init by tags creates the workspace named at the prompt with the tags; workspace new, list and select", async () => {
  const dir = tc.config("by-tags", { tags: ["app", "drover"] }, config);
  const init = await tc.terraform(["init"], dir, { input: "tagged-one\n" });
  assert.equal(init.code, 0, init.output);
  const one = await tfeWorkspace("tagged-one");
  assert.deepEqual(one.attributes["tag-names"], ["app", "drover"]);
  assert.ok(tc.requests.some((r) => r.url.includes("search%5Btags%5D=app%2Cdrover") || r.url.includes("search[tags]")));

  const created = await tc.terraform(["workspace", "new", "tagged-two"], dir);
  assert.equal(created.code, 0, created.output);
  assert.deepEqual((await tfeWorkspace("tagged-two")).attributes["tag-names"], ["app", "drover"]);
  // A workspace without both tags is not listed.
  assert.equal(
    (await tc.stack.server.api(routes.createWorkspace, { body: { name: "untagged", pool: "e2e" } })).status,
    201,
  );

  const select = await tc.terraform(["workspace", "select", "tagged-one"], dir);
  assert.equal(select.code, 0, select.output);
  const list = await tc.terraform(["workspace", "list"], dir);
  assert.equal(list.code, 0, list.output);
  const names = list.output
    .split("\n")
    .map((l) => l.trim())
    .filter((l) => l !== "");
  assert.deepEqual(names, ["* tagged-one", "tagged-two"]);
  assert.equal(readFileSync(join(dir, ".terraform", "environment"), "utf8"), "tagged-one");
});

test("state push and a local-execution apply upload through signed URLs that carry no token and work once", async () => {
  const dir = tc.config("uploads", { name: "app-uploads" }, config);
  assert.equal((await tc.terraform(["init", "-input=false"], dir)).code, 0);
  const { id } = await tfeWorkspace("app-uploads");
  assert.equal(
    await tfeCall("PATCH", `/workspaces/${id}`, { data: { attributes: { "execution-mode": "local" } } }),
    200,
  );
  const uploads = () => tc.requests.filter((r) => r.method === "PUT" && r.url.includes("/state-versions/"));
  const posts = () =>
    tc.requests.filter((r) => r.method === "POST" && r.url === `/api/v2/workspaces/${id}/state-versions`);

  tc.requests.length = 0;
  const apply = await tc.terraform(["apply", "-auto-approve", "-input=false"], dir);
  assert.equal(apply.code, 0, apply.output);
  assert.equal(posts().length, 1, "one POST: the upload flow, not the inline fallback");
  assert.deepEqual(
    uploads()
      .map((r) => (r.url.includes("/json-upload/") ? "json" : "raw"))
      .sort(),
    ["json", "raw"],
    "after an operation terraform uploads the raw and the JSON state",
  );
  assert.ok(
    uploads().every((r) => !r.authorized),
    "upload URLs carry no token",
  );
  const applied = await droverState("app-uploads");
  assert.equal(applied.resources.length, 1);

  const file = join(dir, "pushed.tfstate");
  const pull = await tc.terraform(["state", "pull"], dir);
  writeFileSync(file, JSON.stringify({ ...JSON.parse(pull.output), serial: applied.serial + 1 }));
  tc.requests.length = 0;
  const push = await tc.terraform(["state", "push", file], dir);
  assert.equal(push.code, 0, push.output);
  assert.equal(posts().length, 1);
  const raw = uploads().find((r) => r.url.includes("/upload/"));
  assert.ok(raw && !raw.authorized, "state push's upload carries no token");
  const pushed = await droverState("app-uploads");
  assert.ok(pushed.serial > applied.serial, "the pushed state is current");
  assert.equal((await tfeWorkspace("app-uploads")).attributes.locked, false);

  // The URL terraform used, replayed with the same body, is refused.
  // eslint-disable-next-line no-restricted-globals
  const replay = await fetch(`${tc.url}${raw.url}`, { method: "PUT", body: readFileSync(file) });
  assert.equal(replay.status, 403, await replay.text());
  assert.equal((await droverState("app-uploads")).serial, pushed.serial, "the replay wrote nothing");
});

test("workspace delete by tags: an empty workspace goes (safe-delete), one managing resources stays unless -force, a locked one stays unless -force", async () => {
  const dir = tc.config("deletes", { tags: ["deletes"] }, config);
  assert.equal((await tc.terraform(["init"], dir, { input: "del-keep\n" })).code, 0);
  for (const name of ["del-empty", "del-locked", "del-full"])
    assert.equal((await tc.terraform(["workspace", "new", name], dir)).code, 0, name);
  const full = await tfeWorkspace("del-full");
  assert.equal(
    await tfeCall("PATCH", `/workspaces/${full.id}`, { data: { attributes: { "execution-mode": "local" } } }),
    200,
  );
  const apply = await tc.terraform(["apply", "-auto-approve", "-input=false"], dir);
  assert.equal(apply.code, 0, apply.output);
  assert.equal((await tc.terraform(["workspace", "select", "del-keep"], dir)).code, 0);
  const inDrover = async (name: string) =>
    (await tc.stack.server.api(routes.getWorkspace, { params: { ws: name } })).status;
  const listed = async () => {
    const list = await tc.terraform(["workspace", "list"], dir);
    assert.equal(list.code, 0, list.output);
    return list.output
      .split("\n")
      .map((l) => l.trim())
      .filter((l) => l !== "");
  };

  tc.requests.length = 0;
  const empty = await tc.terraform(["workspace", "delete", "del-empty"], dir);
  assert.equal(empty.code, 0, empty.output);
  assert.match(empty.output, /Deleted workspace "del-empty"/);
  assert.ok(
    tc.requests.some(
      (r) => r.method === "POST" && r.url === "/api/v2/organizations/acme/workspaces/del-empty/actions/safe-delete",
    ),
    "without -force terraform asks for a safe delete",
  );
  assert.equal(await inDrover("del-empty"), 404, "gone from Drover");
  assert.deepEqual(await listed(), ["del-full", "* del-keep", "del-locked"]);

  const kept = await tc.terraform(["workspace", "delete", "del-full"], dir);
  assert.equal(kept.code, 1, kept.output);
  assert.match(kept.output, /Workspace is not empty/);
  assert.match(kept.output, /terraform_data\.a/);
  assert.equal(await inDrover("del-full"), 200, "the workspace managing resources stays");

  // Held by someone else's lock: past terraform's own lock (-lock=false), the server refuses.
  const locked = await tfeWorkspace("del-locked");
  assert.equal(await tfeCall("POST", `/workspaces/${locked.id}/actions/lock`, { data: { attributes: {} } }), 200);
  const refused = await tc.terraform(["workspace", "delete", "-lock=false", "del-locked"], dir);
  assert.equal(refused.code, 1, refused.output);
  assert.match(refused.output, /error deleting workspace del-locked/i);
  assert.match(refused.output, /Workspace is currently locked/);
  assert.equal(await inDrover("del-locked"), 200, "the locked workspace stays");

  tc.requests.length = 0;
  const forced = await tc.terraform(["workspace", "delete", "-force", "del-full"], dir);
  assert.equal(forced.code, 0, forced.output);
  assert.match(forced.output, /Deleted workspace "del-full"/);
  assert.ok(
    tc.requests.some((r) => r.method === "DELETE" && r.url === "/api/v2/organizations/acme/workspaces/del-full"),
    "-force deletes outright",
  );
  assert.equal(await inDrover("del-full"), 404);
  const forcedLocked = await tc.terraform(["workspace", "delete", "-force", "-lock=false", "del-locked"], dir);
  assert.equal(forcedLocked.code, 0, forcedLocked.output);
  assert.equal(await inDrover("del-locked"), 404);
  assert.deepEqual(await listed(), ["* del-keep"]);
});
