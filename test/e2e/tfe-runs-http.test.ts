import assert from "node:assert/strict";
import { writeFileSync } from "node:fs";
import { join } from "node:path";
import { after, before, describe, test } from "node:test";
import { routes } from "@drover/protocol";
import { statusBeforeBody } from "../support/answer-before-body.js";
import { rawTarGz } from "../support/archives.js";
import { pollWait } from "../support/poll.js";
import { startStack, type Stack } from "../support/stack.js";

/*
 * Remote runs through the TFE API over HTTP, as terraform's cloud block makes them (the call
 * order of its plan and apply), with the real server, a real agent and terraform on it: the
 * configuration version and its single-use upload URL, runs with -var values that win over the
 * workspace's, the signed log URLs with STX/ETX and the apply log's three throwaway lines, the
 * engine taken from the client, and each capability URL refused for any other use.
 */

const config = `
terraform {
  cloud {
    hostname     = "drover.test"
    organization = "acme"
    workspaces { name = "w" }
  }
}
variable "greeting" { type = string }
variable "tags" { type = map(string) }
resource "terraform_data" "a" { input = var.greeting }
output "greeting" { value = var.greeting }
output "tags" { value = var.tags }
`;

let stack: Stack;
let wsId: string;
before(async () => {
  stack = await startStack({ DROVER_TFE_ORGANIZATION: "acme" });
  await stack.startAgent("a1");
  const ws = await stack.server.api(routes.createWorkspace, { body: { name: "w", pool: "e2e" } });
  wsId = ws.body.id;
  // The run's own value must win over this one.
  await stack.server.api(routes.setVariable, {
    params: { ws: "w", key: "greeting" },
    body: { value: "from the workspace", kind: "terraform", sensitive: false },
  });
});
after(() => stack?.stop());

interface Answer {
  status: number;
  json: any;
  bytes: Buffer;
}

async function call(
  method: string,
  url: string,
  options: { body?: unknown; raw?: Buffer; token?: string | null; userAgent?: string } = {},
): Promise<Answer> {
  const token = options.token === undefined ? stack.server.adminToken : options.token;
  const headers: Record<string, string> = { "user-agent": options.userAgent ?? "go-tfe" };
  if (token !== null) headers.authorization = `Bearer ${token}`;
  if (options.body !== undefined) headers["content-type"] = "application/vnd.api+json";
  if (options.raw !== undefined) headers["content-type"] = "application/octet-stream";
  // The TFE API is not in the protocol's route table: the typed client cannot call it.
  // eslint-disable-next-line no-restricted-globals
  const res = await fetch(url.startsWith("http") ? url : `${stack.server.url}${url}`, {
    method,
    headers,
    ...(options.body !== undefined ? { body: JSON.stringify(options.body) } : {}),
    ...(options.raw !== undefined ? { body: options.raw } : {}),
  });
  const bytes = Buffer.from(await res.arrayBuffer());
  let json: any;
  try {
    json = bytes.length === 0 ? undefined : JSON.parse(bytes.toString("utf8"));
  } catch {
    json = undefined;
  }
  return { status: res.status, json, bytes };
}

async function uploadedConfiguration(
  speculative: boolean,
  content = config,
): Promise<{ id: string; uploadUrl: string }> {
  const cv = await call("POST", `/api/v2/workspaces/${wsId}/configuration-versions`, {
    body: { data: { type: "configuration-versions", attributes: { "auto-queue-runs": false, speculative } } },
  });
  assert.equal(cv.status, 201, JSON.stringify(cv.json));
  assert.equal(cv.json.data.attributes.status, "pending");
  const uploadUrl: string = cv.json.data.attributes["upload-url"];
  assert.ok(uploadUrl.startsWith(stack.server.url), `absolute: ${uploadUrl}`);
  const put = await call("PUT", uploadUrl, { raw: rawTarGz([{ path: "main.tf", content }]), token: null });
  assert.equal(put.status, 200, put.bytes.toString());
  const read = await call("GET", `/api/v2/configuration-versions/${cv.json.data.id}`);
  assert.equal(read.json.data.attributes.status, "uploaded", "uploaded as soon as the PUT answers");
  return { id: cv.json.data.id, uploadUrl };
}

function runBody(cvId: string, attributes: Record<string, unknown>) {
  return {
    data: {
      type: "runs",
      attributes,
      relationships: {
        workspace: { data: { type: "workspaces", id: wsId } },
        "configuration-version": { data: { type: "configuration-versions", id: cvId } },
      },
    },
  };
}

async function waitForStatus(runId: string, statuses: string[]): Promise<any> {
  const deadline = Date.now() + 120_000;
  for (let attempt = 0; ; attempt++) {
    const run = await call("GET", `/api/v2/runs/${runId}?include=task_stages,unknown`);
    assert.equal(run.status, 200, "unknown includes are ignored");
    if (statuses.includes(run.json.data.attributes.status)) return run.json.data;
    if (Date.now() > deadline) throw new Error(`run ${runId} stayed ${run.json.data.attributes.status}`);
    await pollWait(attempt);
  }
}

/** A phase's whole stream as terraform reads it, in pieces of `limit` bytes. */
async function readStream(url: string, limit: number): Promise<Buffer> {
  const parts: Buffer[] = [];
  let offset = 0;
  for (;;) {
    // terraform replaces the query string: the signature must survive that.
    const res = await call("GET", `${url.split("?")[0]}?limit=${limit}&offset=${offset}`, { token: null });
    assert.equal(res.status, 200, res.bytes.toString());
    parts.push(res.bytes);
    offset += res.bytes.length;
    if (res.bytes.at(-1) === 0x03) return Buffer.concat(parts);
    if (res.bytes.length === 0) throw new Error(`the stream stopped at ${offset} without ETX`);
  }
}

describe("TFE runs over HTTP", () => {
  let runId: string;
  let planUrl: string;
  let applyUrl: string;
  let uploadUrl: string;

  test("an auto-applied run with -var values: HCL values, one a map on several lines, win over the workspace's", async () => {
    const cv = await uploadedConfiguration(false);
    uploadUrl = cv.uploadUrl;
    const created = await call("POST", "/api/v2/runs", {
      body: runBody(cv.id, {
        "auto-apply": true,
        message: "from the test",
        refresh: true,
        variables: [
          { key: "greeting", value: '"bonjour"' },
          // As terraform formats a map value.
          { key: "tags", value: '{\n  "a" = "b"\n  "c" = "d"\n}' },
        ],
      }),
    });
    assert.equal(created.status, 201, JSON.stringify(created.json));
    runId = created.json.data.id;
    assert.ok(created.json.data.attributes.actions, "actions are always there");
    assert.equal(created.json.data.relationships.plan.data.type, "plans");
    assert.equal(created.json.data.relationships.apply.data.type, "applies");
    const events = await call("GET", `/api/v2/runs/${runId}/run-events`);
    assert.deepEqual(events.json.data, []);
    const done = await waitForStatus(runId, ["applied", "errored", "canceled"]);
    assert.equal(done.attributes.status, "applied");
    assert.equal(done.attributes["has-changes"], true);
    const outputs = await stack.server.api(routes.workspaceOutputs, { params: { ws: "w" }, query: {} });
    const byName = Object.fromEntries(outputs.body.items.map((o: any) => [o.name, o.value]));
    assert.deepEqual(byName, { greeting: "bonjour", tags: { a: "b", c: "d" } });
  });

  test("plan and apply logs: STX first, ETX last, the apply's first three lines Drover's own, read in small pieces", async () => {
    const run = await call("GET", `/api/v2/runs/${runId}?include=plan,apply,workspace`);
    const types = run.json.included.map((r: any) => r.type).sort();
    assert.deepEqual(types, ["applies", "plans", "workspaces"]);
    const plan = await call("GET", `/api/v2/plans/${run.json.data.relationships.plan.data.id}`);
    assert.equal(plan.json.data.attributes.status, "finished");
    planUrl = plan.json.data.attributes["log-read-url"];
    const apply = await call("GET", `/api/v2/applies/${run.json.data.relationships.apply.data.id}`);
    assert.equal(apply.json.data.attributes.status, "finished");
    applyUrl = apply.json.data.attributes["log-read-url"];
    const planLog = await readStream(planUrl, 1000);
    assert.equal(planLog[0], 0x02);
    assert.match(planLog.toString(), /terraform_data\.a will be created/);
    const applyLog = await readStream(applyUrl, 65536);
    assert.equal(applyLog[0], 0x02);
    const lines = applyLog.subarray(1).toString().split("\n");
    assert.match(lines[0] ?? "", new RegExp(`^Drover apply of run ${runId}`));
    assert.match(lines[3] ?? "", /^\[drover\] apply of run/, "the job's log starts after the three lines");
    assert.match(applyLog.toString(), /Apply complete!/);
    assert.equal(applyLog.indexOf(0x03), applyLog.length - 1, "nothing follows ETX");
    const piecewise = await readStream(applyUrl, 7);
    assert.deepEqual(piecewise, applyLog);
  });

  test("capability URLs are refused for another object, another method, replay, and without a signature", async () => {
    const replay = await call("PUT", uploadUrl, { raw: rawTarGz([{ path: "main.tf", content: config }]), token: null });
    assert.equal(replay.status, 403);
    assert.match(replay.json.errors[0].detail, /already used/);
    const segment = planUrl.split("/logs/")[1]!;
    const applyId = applyUrl.split("/")[6]!;
    const otherObject = await call("GET", `/api/v2/applies/${applyId}/logs/${segment}`, { token: null });
    assert.equal(otherObject.status, 403);
    assert.match(otherObject.json.errors[0].detail, /not issued for GET of applies/);
    const uploadSegment = uploadUrl.split("/upload/")[1]!;
    const planId = planUrl.split("/")[6]!;
    const uploadAsLog = await call("GET", `/api/v2/plans/${planId}/logs/${uploadSegment}`, { token: null });
    assert.equal(uploadAsLog.status, 403, "an upload URL's signature is no log URL's");
    const cv = await call("POST", `/api/v2/workspaces/${wsId}/configuration-versions`, {
      body: { data: { type: "configuration-versions", attributes: { speculative: true } } },
    });
    const fresh: string = cv.json.data.attributes["upload-url"];
    const asGet = await call("GET", fresh, { token: null });
    assert.ok(asGet.status === 403 || asGet.status === 404, `GET of an upload URL: ${asGet.status}`);
    const unsigned = await call("GET", `/api/v2/plans/${planId}/logs/nothing`, { token: null });
    assert.equal(unsigned.status, 403);
    const badArchive = await call("PUT", fresh, { raw: Buffer.from("not a tar.gz"), token: null });
    assert.equal(badArchive.status, 422, "checked like a CLI upload");
    const read = await call("GET", `/api/v2/configuration-versions/${cv.json.data.id}`);
    assert.equal(read.json.data.attributes.status, "errored");
  });

  test("a run started by OpenTofu runs tofu: the engine follows the client", async () => {
    const cv = await uploadedConfiguration(true);
    const created = await call("POST", "/api/v2/runs", {
      body: runBody(cv.id, { variables: [{ key: "tags", value: "{}" }] }),
      userAgent: "OpenTofu/1.8.0",
    });
    assert.equal(created.status, 201);
    const row = await stack.server.store.db
      .selectFrom("runs")
      .select("engine")
      .where("id", "=", created.json.data.id)
      .executeTakeFirstOrThrow();
    assert.equal(row.engine, "tofu");
    const done = await waitForStatus(created.json.data.id, ["planned_and_finished", "errored"]);
    const log = (
      await readStream(
        (await call("GET", `/api/v2/plans/${done.relationships.plan.data.id}`)).json.data.attributes["log-read-url"],
        65536,
      )
    ).toString();
    // This machine may lack tofu: either it ran, or the agent looked for it.
    assert.match(log, /tofu/);
  });

  test("force-cancel: refused before a cancel; after one, the job ends on the server at once", async () => {
    const gate = join(stack.dir, "force-gate");
    // The provisioner ignores the interrupt the cancel sends, so only a force-cancel ends the run soon.
    const gated = `${config}
resource "terraform_data" "stubborn" {
  provisioner "local-exec" {
    command = "trap '' INT; echo waiting-for-gate; while [ ! -f ${gate} ]; do sleep 0.1; done"
  }
}
`;
    const cv = await uploadedConfiguration(false, gated);
    const created = await call("POST", "/api/v2/runs", {
      body: runBody(cv.id, { "auto-apply": true, variables: [{ key: "tags", value: "{}" }] }),
    });
    const runId: string = created.json.data.id;
    const applying = await waitForStatus(runId, ["applying", "errored"]);
    assert.equal(applying.attributes.status, "applying");
    const apply = await call("GET", `/api/v2/applies/${applying.relationships.apply.data.id}`);
    const logUrl: string = apply.json.data.attributes["log-read-url"];
    for (let attempt = 0; ; attempt++) {
      const log = await call("GET", `${logUrl}?offset=0&limit=1000000`, { token: null });
      if (log.bytes.includes("waiting-for-gate")) break;
      await pollWait(attempt);
    }
    const early = await call("POST", `/api/v2/runs/${runId}/actions/force-cancel`, { body: {} });
    assert.equal(early.status, 409, "force-cancel comes after a cancel");
    assert.equal((await call("POST", `/api/v2/runs/${runId}/actions/cancel`, { body: {} })).status, 202);
    const forced = await call("POST", `/api/v2/runs/${runId}/actions/force-cancel`, { body: {} });
    assert.equal(forced.status, 202, JSON.stringify(forced.json));
    const run = await call("GET", `/api/v2/runs/${runId}`);
    assert.equal(run.json.data.attributes.status, "canceled");
    const log = await readStream(logUrl, 65536);
    assert.match(log.toString(), /force-canceled by request/);
    writeFileSync(gate, "");
  });
});

test("forged upload URLs are refused before their bodies are sent: nobody without a URL gets a body into memory", async () => {
  const forged = "zz.bm9uY2U.c2lnbmF0dXJl";
  for (const path of [
    `/api/v2/state-versions/sv-x/upload/${forged}?ticket=t`,
    `/api/v2/state-versions/sv-x/json-upload/${forged}`,
    `/api/v2/configuration-versions/cv-x/upload/${forged}`,
  ])
    assert.equal(await statusBeforeBody(`${stack.server.url}${path}`, "PUT", {}, 200 * 1024 * 1024), 403, path);
});

test("save-plan: the run plans and waits for its apply even when asked to auto-apply; json-output serves its plan", async () => {
  const cv = await uploadedConfiguration(false);
  const created = await call("POST", "/api/v2/runs", {
    body: runBody(cv.id, {
      "save-plan": true,
      "auto-apply": true,
      variables: [
        { key: "greeting", value: '"saved"' },
        { key: "tags", value: "{}" },
      ],
    }),
  });
  assert.equal(created.status, 201, JSON.stringify(created.json));
  assert.equal(created.json.data.attributes["save-plan"], true);
  assert.equal(created.json.data.attributes["auto-apply"], false, "a saved plan is applied by its file, not by itself");
  const runId: string = created.json.data.id;
  const planned = await waitForStatus(runId, ["planned", "applied", "errored", "canceled"]);
  assert.equal(planned.attributes.status, "planned");
  assert.equal(planned.attributes.actions["is-confirmable"], true);
  assert.equal(
    planned.attributes["save-plan"],
    true,
    "a saved plan's run says so when read back, not only when created",
  );
  const output = await call("GET", `/api/v2/plans/${planned.relationships.plan.data.id}/json-output`);
  assert.equal(output.status, 200, output.bytes.toString());
  const plan = JSON.parse(output.bytes.toString("utf8"));
  assert.equal(plan.variables.greeting.value, "saved");
  assert.ok(plan.resource_changes.some((c: { address: string }) => c.address === "terraform_data.a"));
  // For the human `terraform show`: the same plan, with the providers' schemas its plan job kept.
  const redacted = await call("GET", `/api/v2/plans/${planned.relationships.plan.data.id}/json-output-redacted`);
  assert.equal(redacted.status, 200, redacted.bytes.toString());
  const withSchemas = JSON.parse(redacted.bytes.toString("utf8"));
  assert.deepEqual(withSchemas.resource_changes, plan.resource_changes);
  assert.equal(withSchemas.provider_format_version, "1.0");
  assert.ok(withSchemas.provider_schemas["terraform.io/builtin/terraform"].resource_schemas.terraform_data);
  assert.equal((await call("POST", `/api/v2/runs/${runId}/actions/discard`, { body: {} })).status, 202);
  assert.equal((await waitForStatus(runId, ["discarded"])).attributes.status, "discarded");
  // Only a saved plan's job runs `providers schema`: another run has its plan JSON, not the human form.
  const other = await call("POST", "/api/v2/runs", {
    body: runBody(cv.id, { "plan-only": true, variables: [{ key: "tags", value: "{}" }] }),
  });
  assert.equal(other.status, 201, JSON.stringify(other.json));
  const done = await waitForStatus(other.json.data.id, ["planned_and_finished", "errored"]);
  assert.equal(done.attributes.status, "planned_and_finished");
  assert.equal(done.attributes["save-plan"], false);
  const planId = done.relationships.plan.data.id;
  assert.equal((await call("GET", `/api/v2/plans/${planId}/json-output`)).status, 200);
  assert.equal((await call("GET", `/api/v2/plans/${planId}/json-output-redacted`)).status, 404);
});
