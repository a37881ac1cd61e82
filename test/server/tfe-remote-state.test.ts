import assert from "node:assert/strict";
import { after, before, test } from "node:test";
import { routes, type JobAssignment } from "@drover/protocol";
import { DroverClient } from "@drover/runtime";
import { rawTarGz } from "../support/archives.js";
import { startTestServer, type TestServer } from "../support/server.js";

/*
 * What a run's job token may do on the TFE API (decision 0072): the reads terraform_remote_state
 * makes, for its own workspace and those that list it (or allow all), each other workspace
 * answered as one that does not exist; nothing else. A token whose job has ended is a 401.
 */

let server: TestServer;
let admin: DroverClient;
const archive = rawTarGz([{ path: "main.tf", content: "" }]);
const ids: Record<string, string> = {};
/** The running plan job of a run in rs-a. */
let job: JobAssignment;

const stateOf = (serial: number, greeting: string) =>
  Buffer.from(
    JSON.stringify({
      version: 4,
      terraform_version: "1.11.4",
      serial,
      lineage: "l-remote-state",
      outputs: { greeting: { value: greeting, type: "string" } },
      resources: [],
    }),
  );

before(async () => {
  server = await startTestServer({ DROVER_TFE_ORGANIZATION: "acme" });
  admin = new DroverClient({ baseUrl: server.url, token: server.adminToken });
  await admin.call(routes.createPool, { body: { name: "rs" } });
  for (const name of ["rs-a", "rs-b", "rs-c"]) {
    ids[name] = (await admin.call(routes.createWorkspace, { body: { name, pool: "rs" } })).id;
    await admin.call(routes.writeState, { params: { ws: name }, body: stateOf(1, `hello from ${name}`) });
  }
  const cv = await admin.call(routes.uploadConfiguration, { params: { ws: "rs-a" }, body: archive });
  await admin.call(routes.createRun, { body: { workspace: "rs-a", configurationVersionId: cv.id } });
  const tok = await admin.call(routes.createPoolToken, { params: { pool: "rs" }, body: { description: "rs" } });
  const reg = await admin.call(routes.register, {
    token: tok.token,
    body: { name: "rs-agent", version: "test", driver: "local", capacity: 1 },
  });
  const polled = await admin.call(routes.pollJob, { token: reg.sessionToken, query: { wait: 0 } });
  assert.ok(polled.job, "the agent gets rs-a's plan job");
  job = polled.job;
  await new DroverClient({ baseUrl: server.url, token: job.jobToken }).call(routes.startJob, {
    params: { id: job.jobId },
    body: { starter: "test" },
  });
});
after(async () => {
  await admin?.close();
  await server?.stop();
});

async function call(method: string, path: string, token: string, body?: unknown) {
  // The TFE API is not in the protocol's route table (decision 0068): the typed client cannot call it.
  // eslint-disable-next-line no-restricted-globals
  const res = await fetch(`${server.url}/api/v2${path}`, {
    method,
    headers: {
      authorization: `Bearer ${token}`,
      ...(body === undefined ? {} : { "content-type": "application/vnd.api+json" }),
    },
    ...(body === undefined ? {} : { body: JSON.stringify(body) }),
  });
  const text = await res.text();
  let json: any;
  try {
    json = text === "" ? undefined : JSON.parse(text);
  } catch {
    json = undefined;
  }
  return { status: res.status, text, json };
}

/** The three reads of terraform_remote_state, by the job token: the workspace, its current version, its bytes. */
async function readAs(token: string, name: string) {
  const ws = await call("GET", `/organizations/acme/workspaces/${name}`, token);
  const current = await call("GET", `/workspaces/${ids[name]}/current-state-version`, token);
  const versionId = (await call("GET", `/workspaces/${ids[name]}/current-state-version`, server.adminToken)).json.data
    .id as string;
  const download = await call("GET", `/state-versions/${versionId}/download`, token);
  return { ws, current, download, versionId };
}

test("a job token reads its own workspace's state; another's is a 404 exactly like a missing workspace", async () => {
  const own = await readAs(job.jobToken, "rs-a");
  assert.equal(own.ws.status, 200);
  assert.equal(own.current.status, 200);
  assert.equal(own.download.status, 200);
  assert.equal(JSON.parse(own.download.text).outputs.greeting.value, "hello from rs-a");
  assert.equal((await call("GET", "/organizations/acme/entitlement-set", job.jobToken)).status, 200);

  const other = await readAs(job.jobToken, "rs-b");
  const missing = await call("GET", "/organizations/acme/workspaces/rs-none", job.jobToken);
  assert.equal(other.ws.status, 404);
  assert.equal(other.ws.text, missing.text.replace("rs-none", "rs-b"), "no existence leak");
  assert.equal(other.current.status, 404);
  const missingById = await call("GET", "/workspaces/ws-none/current-state-version", job.jobToken);
  assert.equal(other.current.text, missingById.text.replace("ws-none", ids["rs-b"] ?? ""));
  assert.equal(other.download.status, 404);
  const missingVersion = await call("GET", "/state-versions/sv-none/download", job.jobToken);
  assert.equal(other.download.text, missingVersion.text.replace("sv-none", other.versionId));
});

test("a job token gets nothing else from /api/v2: no lists, writes, runs, locks or other reads", async () => {
  const a = ids["rs-a"] ?? "";
  const attempts: [string, string, unknown?][] = [
    ["GET", "/organizations/acme/workspaces"],
    ["POST", "/organizations/acme/workspaces", { data: { type: "workspaces", attributes: { name: "rs-new" } } }],
    ["PATCH", `/workspaces/${a}`, { data: { type: "workspaces", attributes: { "auto-apply": true } } }],
    ["GET", `/workspaces/${a}`],
    ["POST", `/workspaces/${a}/state-versions`, { data: { type: "state-versions", attributes: { serial: 2 } } }],
    ["POST", `/workspaces/${a}/actions/lock`, {}],
    [
      "POST",
      "/runs",
      { data: { type: "runs", relationships: { workspace: { data: { type: "workspaces", id: a } } } } },
    ],
    ["POST", `/workspaces/${a}/configuration-versions`, { data: { type: "configuration-versions" } }],
    ["GET", `/workspaces/${a}/current-state-version-outputs`],
    ["GET", `/workspaces/${a}/vars`],
    ["GET", "/account/details"],
    ["GET", "/organizations/acme"],
    [
      "POST",
      `/workspaces/${ids["rs-b"]}/relationships/remote-state-consumers`,
      { data: [{ type: "workspaces", id: a }] },
    ],
  ];
  for (const [method, path, body] of attempts) {
    const res = await call(method, path, job.jobToken, body);
    assert.equal(res.status, 403, `${method} ${path}: ${res.text}`);
    assert.match(res.json.errors[0].detail, /remote state consumer/);
  }
  const b = await readAs(job.jobToken, "rs-b");
  assert.equal(b.ws.status, 404, "still refused after all that");
});

test("listing a workspace, the relationship endpoints and global-remote-state open and close the reads", async () => {
  await admin.call(routes.updateWorkspace, { params: { ws: "rs-b" }, body: { remoteStateConsumers: ["rs-a"] } });
  const b = await readAs(job.jobToken, "rs-b");
  assert.deepEqual([b.ws.status, b.current.status, b.download.status], [200, 200, 200]);
  assert.equal(JSON.parse(b.download.text).outputs.greeting.value, "hello from rs-b");
  assert.equal((await readAs(job.jobToken, "rs-c")).ws.status, 404, "rs-c allows no one");

  const c = ids["rs-c"] ?? "";
  const consumers = `/workspaces/${c}/relationships/remote-state-consumers`;
  const add = await call("POST", consumers, server.adminToken, { data: [{ type: "workspaces", id: ids["rs-a"] }] });
  assert.equal(add.status, 204, add.text);
  const listed = await call("GET", consumers, server.adminToken);
  assert.deepEqual(
    listed.json.data.map((w: any) => w.attributes.name),
    ["rs-a"],
  );
  assert.equal((await readAs(job.jobToken, "rs-c")).download.status, 200);
  const unknown = await call("POST", consumers, server.adminToken, { data: [{ type: "workspaces", id: "ws-none" }] });
  assert.equal(unknown.status, 404);
  const remove = await call("DELETE", consumers, server.adminToken, {
    data: [{ type: "workspaces", id: ids["rs-a"] }],
  });
  assert.equal(remove.status, 204, remove.text);
  assert.equal((await readAs(job.jobToken, "rs-c")).ws.status, 404);

  const patch = await call("PATCH", `/workspaces/${c}`, server.adminToken, {
    data: { type: "workspaces", attributes: { "global-remote-state": true } },
  });
  assert.equal(patch.status, 200, patch.text);
  assert.equal(patch.json.data.attributes["global-remote-state"], true);
  assert.equal((await readAs(job.jobToken, "rs-c")).ws.status, 200);
  const shown = await admin.call(routes.getWorkspace, { params: { ws: "rs-c" } });
  assert.deepEqual([shown.globalRemoteState, shown.remoteStateConsumers], [true, []]);
  const self = await call("PATCH", consumers, server.adminToken, { data: [{ type: "workspaces", id: c }] });
  assert.equal(self.status, 422, "a workspace always reads its own state");
});

test("a finished job's token, or a made-up one, is a 401 on the read routes", async () => {
  const forged = await call("GET", "/organizations/acme/workspaces/rs-a", `${job.jobToken.slice(0, -4)}xxxx`);
  assert.equal(forged.status, 401);
  const client = new DroverClient({ baseUrl: server.url, token: job.jobToken });
  await client.call(routes.finishJob, { params: { id: job.jobId }, body: { outcome: "failed", message: "done" } });
  await client.close();
  for (const path of [
    "/organizations/acme/workspaces/rs-a",
    `/workspaces/${ids["rs-a"]}/current-state-version`,
    "/organizations/acme/entitlement-set",
  ]) {
    const res = await call("GET", path, job.jobToken);
    assert.equal(res.status, 401, `${path}: ${res.text}`);
    assert.equal(res.json.errors[0].status, "401");
  }
});
