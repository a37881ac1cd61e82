import assert from "node:assert/strict";
import { constants } from "node:buffer";
import { createHash } from "node:crypto";
import { after, before, test } from "node:test";
import { routes } from "@drover/protocol";
import { statusBeforeBody } from "../support/answer-before-body.js";
import { rawTarGz } from "../support/archives.js";
import { startTestServer, type TestServer } from "../support/server.js";

/*
 * The TFE-compatible API's frame, as go-tfe reads it: the headers of every answer, JSON:API
 * errors (unknown paths included), the one organization, lenient request bodies.
 */

let server: TestServer;
before(async () => {
  server = await startTestServer({ DROVER_TFE_ORGANIZATION: "acme" });
});
after(() => server?.stop());

async function call(method: string, path: string, body?: string, token: string | null = server.adminToken) {
  // The TFE API is not in the protocol's route table (decision 0068): the typed client cannot call it.
  // eslint-disable-next-line no-restricted-globals
  const res = await fetch(`${server.url}${path}`, {
    method,
    headers: {
      ...(token === null ? {} : { authorization: `Bearer ${token}` }),
      ...(body === undefined ? {} : { "content-type": "application/vnd.api+json" }),
    },
    ...(body === undefined ? {} : { body }),
  });
  const text = await res.text();
  return { status: res.status, headers: res.headers, text, json: text === "" ? undefined : (JSON.parse(text) as any) };
}

test("discovery names the TFE services (no versions.v1), as application/json", async () => {
  const res = await call("GET", "/.well-known/terraform.json", undefined, null);
  assert.equal(res.status, 200);
  assert.match(res.headers.get("content-type") ?? "", /^application\/json/);
  assert.deepEqual(res.json, {
    "tfe.v2": "/api/v2/",
    "tfe.v2.1": "/api/v2/",
    "tfe.v2.2": "/api/v2/",
    "state.v2": "/api/v2/",
  });
});

test("the ping carries TFP-API-Version 2.5 and a rate limit go-tfe's limiter can use, and no X-TFE-Version", async () => {
  const res = await call("GET", "/api/v2/ping", undefined, null);
  assert.equal(res.status, 204);
  assert.equal(res.headers.get("tfp-api-version"), "2.5");
  assert.ok(Number(res.headers.get("x-ratelimit-limit")) >= 4);
  assert.equal(res.headers.get("x-tfe-version"), null);
  assert.equal(res.headers.get("tfp-appname"), null);
});

test("account details: the caller as a user with a username; no token is a JSON:API 401", async () => {
  const me = await call("GET", "/api/v2/account/details");
  assert.equal(me.status, 200);
  assert.match(me.headers.get("content-type") ?? "", /^application\/vnd\.api\+json/);
  assert.equal(me.json.data.type, "users");
  assert.equal(typeof me.json.data.attributes.username, "string");
  const anonymous = await call("GET", "/api/v2/account/details", undefined, null);
  assert.equal(anonymous.status, 401);
  assert.equal(anonymous.json.errors[0].status, "401");
  assert.equal(anonymous.headers.get("tfp-api-version"), "2.5", "errors carry the headers too");
});

test("the one organization answers; another name is a JSON:API 404 on each of its paths", async () => {
  const org = await call("GET", "/api/v2/organizations/acme");
  assert.equal(org.status, 200);
  assert.deepEqual([org.json.data.type, org.json.data.id], ["organizations", "acme"]);
  const ent = await call("GET", "/api/v2/organizations/acme/entitlement-set");
  assert.equal(ent.json.data.type, "entitlement-sets");
  assert.equal(ent.json.data.attributes.operations, true);
  assert.equal(ent.json.data.attributes["state-storage"], true);
  const queue = await call("GET", "/api/v2/organizations/acme/runs/queue");
  assert.deepEqual(queue.json.data, []);
  assert.equal(queue.json.meta.pagination["total-pages"], 1);
  const capacity = await call("GET", "/api/v2/organizations/acme/capacity");
  assert.equal(capacity.json.data.type, "organization-capacity");
  for (const path of ["", "/entitlement-set", "/runs/queue", "/capacity", "/workspaces", "/workspaces/w"]) {
    const other = await call("GET", `/api/v2/organizations/other${path}`);
    assert.equal(other.status, 404, path);
    assert.equal(other.json.errors[0].status, "404", path);
  }
});

test("an unknown /api/v2 path is a JSON:API 404, not Drover's error body", async () => {
  const res = await call("GET", "/api/v2/no-such-thing");
  assert.equal(res.status, 404);
  assert.equal(res.json.errors[0].title, "not found");
  assert.equal(res.headers.get("tfp-api-version"), "2.5");
});

test("a body that is not JSON is a JSON:API 400; one without a resource, or with a bad attribute, a 422", async () => {
  const notJson = await call("POST", "/api/v2/organizations/acme/workspaces", "{not json");
  assert.equal(notJson.status, 400);
  assert.equal(notJson.json.errors[0].status, "400");
  const noData = await call("POST", "/api/v2/organizations/acme/workspaces", JSON.stringify({ data: 5 }));
  assert.equal(noData.status, 422);
  assert.equal(noData.json.errors[0].title, "invalid document");
  const badName = await call(
    "POST",
    "/api/v2/organizations/acme/workspaces",
    JSON.stringify({ data: { type: "workspaces", attributes: { name: 42 } } }),
  );
  assert.equal(badName.status, 422);
  assert.match(badName.json.errors[0].detail, /name/);
});

test("creating a workspace without the DROVER_TFE_POOL pool says which pool to create", async () => {
  const res = await call(
    "POST",
    "/api/v2/organizations/acme/workspaces",
    JSON.stringify({ data: { attributes: { name: "nopool" } } }),
  );
  assert.equal(res.status, 422);
  assert.match(res.json.errors[0].detail, /drover pool create default/);
});

test("unknown attributes and include values are ignored; lists page as go-tfe reads them; search by name and tags", async () => {
  await server.api(routes.createPool, { body: { name: "default" } });
  for (const [name, tags] of [
    ["page-a", ["x"]],
    ["page-b", ["x", "y"]],
    ["page-c", ["y"]],
  ] as const) {
    const res = await call(
      "POST",
      "/api/v2/organizations/acme/workspaces",
      JSON.stringify({
        data: {
          type: "workspaces",
          attributes: { name, "no-such-attribute": true, "source-name": "x" },
          relationships: { tags: { data: tags.map((t) => ({ type: "tags", attributes: { name: t } })) } },
        },
        meta: { unknown: 1 },
      }),
    );
    assert.equal(res.status, 201, res.text);
    assert.equal(res.json.data.attributes["execution-mode"], "remote");
    assert.ok(res.json.data.attributes.permissions["can-queue-run"]);
  }
  const read = await call(
    "GET",
    "/api/v2/organizations/acme/workspaces/page-a?include=no_such,task_stages,current_run",
  );
  assert.equal(read.status, 200);
  assert.equal(read.json.data.attributes.name, "page-a");

  const first = await call("GET", "/api/v2/organizations/acme/workspaces?search%5Bname%5D=page-&page%5Bsize%5D=2");
  assert.deepEqual(
    first.json.data.map((w: any) => w.attributes.name),
    ["page-a", "page-b"],
  );
  assert.deepEqual(first.json.meta.pagination, {
    "current-page": 1,
    "next-page": 2,
    "prev-page": null,
    "total-pages": 2,
    "total-count": 3,
  });
  const second = await call(
    "GET",
    "/api/v2/organizations/acme/workspaces?search%5Bname%5D=page-&page%5Bsize%5D=2&page%5Bnumber%5D=2",
  );
  assert.deepEqual(
    second.json.data.map((w: any) => w.attributes.name),
    ["page-c"],
  );
  assert.equal(second.json.meta.pagination["next-page"], null);
  const tagged = await call("GET", "/api/v2/organizations/acme/workspaces?search%5Btags%5D=x%2Cy");
  assert.deepEqual(
    tagged.json.data.map((w: any) => w.attributes.name),
    ["page-b"],
  );
});

test("a working directory outside the configuration is a 422 on create and update; the stored one stays", async () => {
  await server.api(routes.createPool, { body: { name: "default" } }).catch(() => undefined);
  const workspaces = "/api/v2/organizations/acme/workspaces";
  const withDirectory = (dir: string, name?: string) =>
    JSON.stringify({
      data: { type: "workspaces", attributes: { ...(name ? { name } : {}), "working-directory": dir } },
    });
  for (const dir of ["../../etc", "/abs/path", "infra/../../x"]) {
    const res = await call("POST", workspaces, withDirectory(dir, "wd-bad"));
    assert.equal(res.status, 422, dir);
    assert.match(res.json.errors[0].detail, /working-directory: the working directory must be a relative path/);
  }
  const made = await call("POST", workspaces, withDirectory("infra/app", "wd-ok"));
  assert.equal(made.status, 201, made.text);
  for (const path of [`${workspaces}/wd-ok`, `/api/v2/workspaces/${made.json.data.id}`]) {
    const res = await call("PATCH", path, withDirectory("../outside"));
    assert.equal(res.status, 422, path);
  }
  const read = await call("GET", `${workspaces}/wd-ok`);
  assert.equal(read.json.data.attributes["working-directory"], "infra/app");
  assert.equal((await call("GET", `${workspaces}/wd-bad`)).status, 404, "no refused create was stored");
});

test("an inline state version too large to read as one JSON string is a 413 before its body is sent", async () => {
  const status = await statusBeforeBody(
    `${server.url}/api/v2/workspaces/ws-any/state-versions`,
    "POST",
    { authorization: `Bearer ${server.adminToken}`, "content-type": "application/vnd.api+json" },
    constants.MAX_STRING_LENGTH + 1,
  );
  assert.equal(status, 413);
});

test("a state version without inline state is given signed upload URLs: the PUT stores it once, checked like any write; no state is outputs []", async () => {
  const ws = await call("GET", "/api/v2/organizations/acme/workspaces/page-a");
  const id = ws.json.data.id as string;
  const outputs = await call("GET", `/api/v2/workspaces/${id}/current-state-version-outputs`);
  assert.equal(outputs.status, 200);
  assert.deepEqual(outputs.json.data, []);
  assert.equal((await call("GET", `/api/v2/workspaces/${id}/current-state-version`)).status, 404);

  const state = JSON.stringify({ version: 4, serial: 1, lineage: "lin-1", outputs: {}, resources: [] });
  const md5 = createHash("md5").update(state).digest("hex");
  const post = (attributes: Record<string, unknown>) =>
    call(
      "POST",
      `/api/v2/workspaces/${id}/state-versions`,
      JSON.stringify({ data: { type: "state-versions", attributes } }),
    );
  const res = await post({ serial: 1, md5, lineage: "lin-1", force: false });
  assert.equal(res.status, 201, res.text);
  const version = res.json.data;
  assert.equal(version.attributes.status, "pending");
  const upload = version.attributes["hosted-state-upload-url"] as string;
  const jsonUpload = version.attributes["hosted-json-state-upload-url"] as string;
  assert.ok(upload.startsWith(server.url) && jsonUpload.startsWith(server.url), "absolute URLs");
  const path = (url: string) => ((u) => `${u.pathname}${u.search}`)(new URL(url));

  assert.equal((await call("GET", path(upload), undefined, null)).status, 404, "no GET route: the URL is for PUT");
  const tampered = path(upload).replace(version.id, `${version.id}x`);
  assert.equal((await call("PUT", tampered, state, null)).status, 403, "bound to its version");
  const otherTicket = Buffer.from(JSON.stringify({ workspaceId: "ws-other", md5: "" })).toString("base64url");
  const retargeted = path(upload).replace(/ticket=[^&]+/, `ticket=${otherTicket}`);
  assert.equal((await call("PUT", retargeted, state, null)).status, 403, "its ticket cannot be changed");
  // Another body than the one whose MD5 was posted is refused; the URL is spent by that first use.
  const other = JSON.stringify({ version: 4, serial: 1, lineage: "lin-1", outputs: {}, resources: [], x: 1 });
  const corrupted = await call("PUT", path(upload), other, null);
  assert.equal(corrupted.status, 400, corrupted.text);
  assert.match(corrupted.text, /Content-MD5 does not match/);
  assert.equal((await call("PUT", path(upload), state, null)).status, 403, "single use, even after a refused body");

  const second = await post({ serial: 1, md5, lineage: "lin-1" });
  const upload2 = path(second.json.data.attributes["hosted-state-upload-url"] as string);
  assert.equal((await call("PUT", upload2, state, null)).status, 200);
  assert.equal((await call("PUT", upload2, state, null)).status, 403, "a replayed PUT is refused");
  const jsonUpload2 = second.json.data.attributes["hosted-json-state-upload-url"] as string;
  // The JSON state is read and dropped, within its limit (twice the raw state's 256 MiB) all the same.
  const declared = await statusBeforeBody(jsonUpload2, "PUT", {}, 512 * 1024 * 1024 + 1);
  assert.equal(declared, 413, "a JSON state over its limit is refused before its body");
  assert.equal((await call("PUT", path(jsonUpload2), "{}", null)).status, 200);
  const stored = await call("GET", `/api/v2/state-versions/${second.json.data.id as string}`);
  assert.equal(stored.status, 200);
  assert.deepEqual([stored.json.data.attributes.status, stored.json.data.attributes.serial], ["finalized", 1]);
  const current = (await server.api(routes.readState, { params: { ws: "page-a" } })).body as any;
  assert.deepEqual([current.serial, current.lineage], [1, "lin-1"], "stored as Drover's state");

  // The write takes the same checks as the http backend's: another lineage is refused.
  const foreign = JSON.stringify({ version: 4, serial: 2, lineage: "lin-2", outputs: {}, resources: [] });
  const third = await post({ serial: 2, md5: createHash("md5").update(foreign).digest("hex"), lineage: "lin-2" });
  const refused = await call(
    "PUT",
    path(third.json.data.attributes["hosted-state-upload-url"] as string),
    foreign,
    null,
  );
  assert.equal(refused.status, 409, refused.text);
});

test("a state whose outputs hold entries that are not objects is stored whole, and its outputs read without a 500", async () => {
  await server.api(routes.createPool, { body: { name: "odd-outputs" } });
  await server.api(routes.createWorkspace, { body: { name: "odd-outputs", pool: "odd-outputs" } });
  const id = (await call("GET", "/api/v2/organizations/acme/workspaces/odd-outputs")).json.data.id as string;
  const outputs = { gone: null, text: "not an output", kept: { value: 7, type: "number" } };
  const state = JSON.stringify({ version: 4, serial: 1, lineage: "lin-odd", outputs, resources: [] });
  const created = await call(
    "POST",
    `/api/v2/workspaces/${id}/state-versions`,
    JSON.stringify({
      data: {
        type: "state-versions",
        attributes: { serial: 1, lineage: "lin-odd", state: Buffer.from(state).toString("base64") },
      },
    }),
  );
  assert.equal(created.status, 201, created.text);
  const listed = await call("GET", `/api/v2/workspaces/${id}/current-state-version-outputs`);
  assert.equal(listed.status, 200, listed.text);
  assert.deepEqual(
    listed.json.data.map((o: any) => [o.attributes.name, o.attributes.value]),
    [
      ["gone", null],
      ["text", null],
      ["kept", 7],
    ],
  );
  const mine = await server.api(routes.workspaceOutputs, { params: { ws: "odd-outputs" } });
  assert.equal(mine.status, 200, JSON.stringify(mine.body));
});

test("a plan's json-output and json-output-redacted: a JSON:API 404 for a run without them or an id of another shape, 401 without a token", async () => {
  await server.api(routes.createPool, { body: { name: "json-output" } });
  const ws = await server.api(routes.createWorkspace, { body: { name: "json-output", pool: "json-output" } });
  assert.equal(ws.status, 201, JSON.stringify(ws.body));
  const cv = await server.api(routes.uploadConfiguration, {
    params: { ws: "json-output" },
    body: rawTarGz([{ path: "main.tf", content: "" }]),
  });
  const run = await server.api(routes.createRun, {
    body: { workspace: "json-output", configurationVersionId: cv.body.id },
  });
  assert.equal(run.status, 201, JSON.stringify(run.body));
  const planId = `plan-${String(run.body.id).replace(/^run-/, "")}`;
  for (const output of ["json-output", "json-output-redacted"]) {
    for (const path of [`/api/v2/plans/${planId}/${output}`, `/api/v2/plans/run-x/${output}`]) {
      const missing = await call("GET", path);
      assert.equal(missing.status, 404, path);
      assert.equal(missing.json.errors[0].status, "404", path);
    }
    const anonymous = await call("GET", `/api/v2/plans/${planId}/${output}`, undefined, null);
    assert.equal(anonymous.status, 401);
  }
});

test("workspace delete: safe-delete (by name and id) deletes a workspace managing nothing, and refuses with go-tfe's 409s one with resources, a lock or an active run; DELETE forces all but the run", async () => {
  await server.api(routes.createPool, { body: { name: "default" } }); // 409 when an earlier test made it
  const make = async (name: string) => {
    const res = await call(
      "POST",
      "/api/v2/organizations/acme/workspaces",
      JSON.stringify({ data: { type: "workspaces", attributes: { name } } }),
    );
    assert.equal(res.status, 201, res.text);
    return res.json.data as { id: string; attributes: { permissions: Record<string, unknown> } };
  };
  const state = (resources: unknown[]) =>
    Buffer.from(JSON.stringify({ version: 4, serial: 1, lineage: "l", outputs: {}, resources }));
  const exists = async (name: string) =>
    (await call("GET", `/api/v2/organizations/acme/workspaces/${name}`)).status === 200;
  const refusal = (res: Awaited<ReturnType<typeof call>>, detail: RegExp) => {
    assert.equal(res.status, 409, res.text);
    assert.match(res.headers.get("content-type") ?? "", /^application\/vnd\.api\+json/);
    assert.deepEqual([res.json.errors[0].status, res.json.errors[0].title], ["409", "conflict"]);
    assert.match(res.json.errors[0].detail, detail);
  };
  const byName = (name: string) => `/api/v2/organizations/acme/workspaces/${name}`;

  // Permissions tell terraform it may delete, and `can-force-delete` makes it use safe-delete.
  const empty = await make("del-empty");
  assert.equal(empty.attributes.permissions["can-destroy"], true);
  assert.equal(empty.attributes.permissions["can-force-delete"], true);
  const del = await call("POST", `${byName("del-empty")}/actions/safe-delete`);
  assert.equal(del.status, 204, del.text);
  assert.equal(await exists("del-empty"), false);
  assert.equal((await server.api(routes.getWorkspace, { params: { ws: "del-empty" } })).status, 404);

  // A state whose resources are data sources only, or have no instances, manages nothing.
  const dataOnly = await make("del-data");
  const written = await server.api(routes.writeState, {
    params: { ws: "del-data" },
    body: state([
      { mode: "data", type: "terraform_remote_state", name: "x", instances: [{ attributes: {} }] },
      { mode: "managed", type: "terraform_data", name: "gone", instances: [] },
    ]),
  });
  assert.equal(written.status, 200, JSON.stringify(written.body));
  assert.equal((await call("POST", `/api/v2/workspaces/${dataOnly.id}/actions/safe-delete`)).status, 204);
  assert.equal(await exists("del-data"), false);

  // Managing resources: both safe-delete forms refuse, with no "locked" (go-tfe would misread it).
  const full = await make("del-full");
  await server.api(routes.writeState, {
    params: { ws: "del-full" },
    body: state([{ mode: "managed", type: "terraform_data", name: "a", instances: [{ attributes: {} }] }]),
  });
  for (const path of [
    `${byName("del-full")}/actions/safe-delete`,
    `/api/v2/workspaces/${full.id}/actions/safe-delete`,
  ]) {
    const res = await call("POST", path);
    refusal(res, /managing 1 resource/);
    assert.doesNotMatch(res.json.errors[0].detail, /locked|being processed/);
  }
  assert.equal(await exists("del-full"), true, "refused: nothing deleted");
  assert.equal((await call("DELETE", `/api/v2/workspaces/${full.id}`)).status, 204, "DELETE forces it");
  assert.equal(await exists("del-full"), false);
  assert.equal((await server.api(routes.getWorkspace, { params: { ws: "del-full" } })).status, 404);

  // An encrypted OpenTofu state may manage anything: a safe delete fails closed.
  await make("del-encrypted");
  const encrypted = await server.api(routes.writeState, {
    params: { ws: "del-encrypted" },
    body: Buffer.from(
      JSON.stringify({ serial: 1, lineage: "l", meta: {}, encrypted_data: "AAAA", encryption_version: "v0" }),
    ),
  });
  assert.equal(encrypted.status, 200, JSON.stringify(encrypted.body));
  refusal(await call("POST", `${byName("del-encrypted")}/actions/safe-delete`), /cannot be read.*-force/);
  assert.equal((await call("DELETE", byName("del-encrypted"))).status, 204);

  // Locked: safe-delete refuses naming the lock (go-tfe's "locked" message); DELETE by name forces it.
  const locked = await make("del-locked");
  assert.equal((await call("POST", `/api/v2/workspaces/${locked.id}/actions/lock`, "{}")).status, 200);
  refusal(await call("POST", `${byName("del-locked")}/actions/safe-delete`), /locked/);
  assert.equal(await exists("del-locked"), true);
  assert.equal((await call("DELETE", byName("del-locked"))).status, 204);
  assert.equal(await exists("del-locked"), false);

  // An active run: refused by every form, as Drover's own delete refuses it.
  await make("del-run");
  const cv = await server.api(routes.uploadConfiguration, {
    params: { ws: "del-run" },
    body: rawTarGz([{ path: "main.tf", content: "" }]),
  });
  const run = await server.api(routes.createRun, {
    body: { workspace: "del-run", configurationVersionId: cv.body.id },
  });
  assert.equal(run.status, 201, JSON.stringify(run.body));
  const runWs = (await call("GET", byName("del-run"))).json.data.id as string;
  for (const [method, path] of [
    ["POST", `${byName("del-run")}/actions/safe-delete`],
    ["POST", `/api/v2/workspaces/${runWs}/actions/safe-delete`],
    ["DELETE", byName("del-run")],
    ["DELETE", `/api/v2/workspaces/${runWs}`],
  ] as const)
    refusal(await call(method, path), new RegExp(`locked by Run ${run.body.id}.*cancel`));
  assert.equal(await exists("del-run"), true);

  // Missing, another organization, or no token.
  for (const [method, path] of [
    ["POST", `${byName("del-none")}/actions/safe-delete`],
    ["DELETE", byName("del-none")],
    ["POST", "/api/v2/workspaces/ws-none/actions/safe-delete"],
    ["DELETE", "/api/v2/workspaces/ws-none"],
    ["DELETE", "/api/v2/organizations/other/workspaces/del-run"],
  ] as const) {
    const res = await call(method, path);
    assert.equal(res.status, 404, `${method} ${path}`);
    assert.equal(res.json.errors[0].status, "404");
  }
  assert.equal((await call("DELETE", `/api/v2/workspaces/${runWs}`, undefined, null)).status, 401);
  assert.equal((await call("POST", `${byName("del-run")}/actions/safe-delete`, undefined, null)).status, 401);
});
