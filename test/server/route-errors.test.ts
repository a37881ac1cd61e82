import assert from "node:assert/strict";
import { createServer, type Server } from "node:http";
import { after, before, test } from "node:test";
import {
  authErrors,
  commonErrors,
  DroverError,
  maxWebhookBytes,
  routes,
  type AuthKind,
  type ErrorCode,
  type JobAssignment,
  type Route,
  type RouteName,
} from "@drover/protocol";
import { DroverClient } from "@drover/runtime";
import { store } from "@drover/server";
import { randomBytes } from "node:crypto";
import { rawTarGz } from "../support/archives.js";
import { startTestServer, type TestServer } from "../support/server.js";

/*
 * Every error the route table documents, sent through the typed client: each route's own
 * codes on that route, each auth kind's codes on one route of that kind, and the codes the
 * client itself raises. A code documented without a case here fails the coverage test, so the
 * table cannot promise what nothing checks. Of the codes common to every route, `bad_request`
 * is checked here; the others are driven where their cause can be: `internal` and
 * `database_unavailable` by the database fault tests, `too_many_requests` by security-load.
 */

let server: TestServer;
let admin: DroverClient;
const archive = rawTarGz([{ path: "main.tf", content: "" }]);
let counter = 0;
const unique = (prefix: string) => `${prefix}${++counter}`;

before(async () => {
  server = await startTestServer({ DROVER_MAX_CONFIGURATION_MB: "1", DROVER_MAX_PLAN_JSON_MB: "1" });
  admin = new DroverClient({ baseUrl: server.url, token: server.adminToken });
  await admin.call(routes.createPool, { body: { name: "errs" } });
});
after(async () => {
  await admin?.close();
  await server?.stop();
});

async function expectCode(code: ErrorCode, call: Promise<unknown>): Promise<DroverError> {
  try {
    await call;
  } catch (err) {
    assert.ok(err instanceof DroverError, `expected a DroverError ${code}, got ${String(err)}`);
    assert.equal(err.code, code, err.message);
    return err;
  }
  assert.fail(`expected ${code}, but the call succeeded`);
}

/** A client with another token (or none). */
const as = (token: string | undefined) => new DroverClient({ baseUrl: server.url, token });

/** A registered agent of pool "errs": its pool token (and id) and session token. */
async function agent(name = unique("agent")) {
  const tok = await admin.call(routes.createPoolToken, { params: { pool: "errs" }, body: { description: name } });
  const reg = await admin.call(routes.register, {
    token: tok.token,
    body: { name, version: "test", driver: "local", capacity: 5 },
  });
  return { poolToken: tok.token, poolTokenId: tok.id, session: reg.sessionToken, name };
}

/** A workspace with a run whose plan job an agent has claimed and started. */
async function startedJob(): Promise<{ ws: string; runId: string; job: JobAssignment; client: DroverClient }> {
  const ws = unique("ws");
  await admin.call(routes.createWorkspace, { body: { name: ws, pool: "errs" } });
  const cv = await admin.call(routes.uploadConfiguration, { params: { ws }, body: archive });
  const run = await admin.call(routes.createRun, { body: { workspace: ws, configurationVersionId: cv.id } });
  const { session } = await agent();
  const { job } = await admin.call(routes.pollJob, { token: session, query: { wait: 0 } });
  assert.ok(job, "the agent gets the job");
  const client = as(job.jobToken);
  await client.call(routes.startJob, { params: { id: job.jobId }, body: { starter: "test" } });
  return { ws, runId: run.id, job, client };
}

/** A run that has ended (its plan job failed), so no transition is left to it. */
async function endedRun(): Promise<string> {
  const { runId, job, client } = await startedJob();
  await client.call(routes.finishJob, { params: { id: job.jobId }, body: { outcome: "failed", message: "x" } });
  return runId;
}

async function workspaceWithUpload(): Promise<string> {
  const ws = unique("ws");
  await admin.call(routes.createWorkspace, { body: { name: ws, pool: "errs" } });
  return ws;
}

/** What a lease expiry and a new claim do to a job (a new attempt, a new token), without waiting for them. */
async function supersede(job: JobAssignment): Promise<void> {
  await server.store.db
    .updateTable("jobs")
    .set({ attempt: job.attempt + 1, token_hash: "superseded" })
    .where("id", "=", job.jobId)
    .execute();
}

/** A registered VCS agent of a vcs pool of its own, relaying a connection, and a workspace for its fetches. */
async function vcsAgent() {
  const pool = unique("relay");
  await admin.call(routes.createPool, { body: { name: pool, kind: "vcs" } });
  const tok = await admin.call(routes.createPoolToken, { params: { pool }, body: { description: pool } });
  const reg = await admin.call(routes.register, {
    token: tok.token,
    body: { name: unique("vcs-agent"), version: "test", driver: "local", capacity: 5 },
  });
  const connection = await store.createVcsConnection(server.store, {
    name: unique("relayed"),
    provider: "github",
    url: "https://ghe.internal.invalid",
    viaPool: pool,
  });
  return { client: as(reg.sessionToken), poolId: reg.poolId, connection };
}

/** A fetch task a VCS agent has leased. */
async function leasedFetch() {
  const relay = await vcsAgent();
  const ws = await workspaceWithUpload();
  await store.enqueueVcsTask(server.store, {
    poolId: relay.poolId,
    connectionId: relay.connection.id,
    workspaceId: (await store.getWorkspace(server.store, ws)).id,
    task: {
      kind: "fetch",
      fetch: {
        repository: "org/r",
        sha: "c".repeat(40),
        since: null,
        triggerPaths: [],
        workingDirectory: "",
        maxBytes: 1,
      },
    },
    deadlineMs: 60_000,
  });
  const { task } = await relay.client.call(routes.pollVcsTask, { query: { wait: 0 } });
  assert.ok(task, "the VCS agent gets the task");
  return { ...relay, task };
}

const runsSession = async () => as((await agent()).session);

function vcsAgentCases(): Case[] {
  const upload = async (body: Buffer, attemptOffset = 0) => {
    const { client, task } = await leasedFetch();
    return client.call(routes.uploadVcsArchive, {
      params: { id: task.id },
      query: { attempt: task.attempt + attemptOffset },
      body,
    });
  };
  return [
    {
      route: "pollJob",
      code: "forbidden",
      run: async () => (await vcsAgent()).client.call(routes.pollJob, { query: { wait: 0 } }),
    },
    {
      route: "pollVcsTask",
      code: "forbidden",
      run: async () => (await runsSession()).call(routes.pollVcsTask, { query: { wait: 0 } }),
    },
    ...(["renewVcsTask", "completeVcsTask"] as const).flatMap((route): Case[] => {
      const call = (client: DroverClient, id: string, attempt: number) =>
        route === "renewVcsTask"
          ? client.call(routes.renewVcsTask, { params: { id }, body: { attempt } })
          : client.call(routes.completeVcsTask, { params: { id }, body: { attempt, error: "x" } });
      return [
        { route, code: "forbidden", run: async () => call(await runsSession(), "vtask-any", 1) },
        { route, code: "not_found", run: async () => call((await vcsAgent()).client, "vtask-nope", 1) },
        {
          route,
          code: "stale_attempt",
          run: async () => {
            const { client, task } = await leasedFetch();
            return call(client, task.id, task.attempt + 1);
          },
        },
      ];
    }),
    {
      route: "uploadVcsArchive",
      code: "forbidden",
      run: async () =>
        (await runsSession()).call(routes.uploadVcsArchive, {
          params: { id: "vtask-any" },
          query: { attempt: 1 },
          body: archive,
        }),
    },
    {
      route: "uploadVcsArchive",
      code: "not_found",
      run: async () =>
        (await vcsAgent()).client.call(routes.uploadVcsArchive, {
          params: { id: "vtask-nope" },
          query: { attempt: 1 },
          body: archive,
        }),
    },
    { route: "uploadVcsArchive", code: "stale_attempt", run: () => upload(archive, 1) },
    {
      route: "uploadVcsArchive",
      code: "payload_too_large",
      run: () => upload(rawTarGz([{ path: "main.tf", content: randomBytes(1_500_000).toString("base64") }])),
    },
    {
      route: "uploadVcsArchive",
      code: "invalid_archive",
      run: () => upload(rawTarGz([{ path: "README.md", content: "no configuration" }])),
    },
    {
      route: "forwardVcsWebhook",
      code: "forbidden",
      run: async () =>
        (await runsSession()).call(routes.forwardVcsWebhook, {
          body: { connection: "any", event: "push", deliveryId: "d", body: "" },
        }),
    },
    {
      route: "forwardVcsWebhook",
      code: "not_found",
      run: async () =>
        (await vcsAgent()).client.call(routes.forwardVcsWebhook, {
          body: { connection: "no-such-connection", event: "push", deliveryId: "d", body: "" },
        }),
    },
  ];
}

const lockInfo = (id: string) => Buffer.from(JSON.stringify({ ID: id, Operation: "OperationTypeApply", Who: "test" }));
const stateBody = (lineage: string, serial: number) =>
  Buffer.from(JSON.stringify({ version: 4, lineage, serial, resources: [], outputs: {} }));

interface Case {
  route: RouteName;
  code: ErrorCode;
  /** Set for a case that stands for its route's auth kind. */
  auth?: AuthKind;
  run(): Promise<unknown>;
}

const routeCases: Case[] = [
  {
    route: "createPool",
    code: "bad_request",
    run: () => admin.call(routes.createPool, { body: { name: "bad name!" } }),
  },
  { route: "createPool", code: "already_exists", run: () => admin.call(routes.createPool, { body: { name: "errs" } }) },
  { route: "getPool", code: "not_found", run: () => admin.call(routes.getPool, { params: { pool: "nope" } }) },
  { route: "deletePool", code: "not_found", run: () => admin.call(routes.deletePool, { params: { pool: "nope" } }) },
  {
    route: "deletePool",
    code: "conflict",
    run: async () => {
      const ws = await admin.call(routes.getWorkspace, { params: { ws: (await startedJob()).ws } });
      return admin.call(routes.deletePool, { params: { pool: ws.poolId } });
    },
  },
  { route: "poolDemand", code: "not_found", run: () => admin.call(routes.poolDemand, { params: { pool: "nope" } }) },
  {
    route: "createPoolToken",
    code: "not_found",
    run: () => admin.call(routes.createPoolToken, { params: { pool: "nope" }, body: {} }),
  },
  {
    route: "listPoolTokens",
    code: "not_found",
    run: () => admin.call(routes.listPoolTokens, { params: { pool: "nope" } }),
  },
  {
    route: "revokePoolToken",
    code: "not_found",
    run: () => admin.call(routes.revokePoolToken, { params: { id: "ptok-nope" } }),
  },
  {
    route: "revokeUserToken",
    code: "not_found",
    run: () => admin.call(routes.revokeUserToken, { params: { id: "utok-nope" } }),
  },
  {
    route: "revokeUserToken",
    code: "conflict",
    run: async () => {
      // Revoking every other token first leaves the admin token the last valid one.
      const { items } = await admin.call(routes.listUserTokens, {});
      for (const t of items.filter((t) => !t.bootstrap && t.revokedAt === null))
        await admin.call(routes.revokeUserToken, { params: { id: t.id } });
      const mine = items.find((t) => t.bootstrap);
      assert.ok(mine);
      return admin.call(routes.revokeUserToken, { params: { id: mine.id } });
    },
  },
  {
    route: "createWebSession",
    code: "unauthorized",
    run: () => as(undefined).call(routes.createWebSession, { body: { token: "drv_u_nobody.secret" } }),
  },
  {
    route: "createWebSession",
    code: "token_revoked",
    run: async () => {
      const t = await admin.call(routes.createUserToken, { body: { description: "revoked before sign-in" } });
      await admin.call(routes.revokeUserToken, { params: { id: t.id } });
      return as(undefined).call(routes.createWebSession, { body: { token: t.token } });
    },
  },
  {
    route: "createWebSession",
    code: "forbidden",
    run: () =>
      as(undefined).call(routes.createWebSession, {
        body: { token: server.adminToken },
        headers: { origin: "https://attacker.example" },
      }),
  },
  { route: "listAgents", code: "not_found", run: () => admin.call(routes.listAgents, { query: { pool: "nope" } }) },
  {
    route: "createWorkspace",
    code: "not_found",
    run: () => admin.call(routes.createWorkspace, { body: { name: unique("ws"), pool: "nope" } }),
  },
  {
    route: "createWorkspace",
    code: "already_exists",
    run: async () => admin.call(routes.createWorkspace, { body: { name: await workspaceWithUpload(), pool: "errs" } }),
  },
  { route: "getWorkspace", code: "not_found", run: () => admin.call(routes.getWorkspace, { params: { ws: "nope" } }) },
  {
    route: "updateWorkspace",
    code: "not_found",
    run: () => admin.call(routes.updateWorkspace, { params: { ws: "nope" }, body: { autoApply: true } }),
  },
  {
    route: "deleteWorkspace",
    code: "not_found",
    run: () => admin.call(routes.deleteWorkspace, { params: { ws: "nope" } }),
  },
  {
    route: "deleteWorkspace",
    code: "conflict",
    run: async () => admin.call(routes.deleteWorkspace, { params: { ws: (await startedJob()).ws } }),
  },
  {
    route: "createVcsConnection",
    code: "already_exists",
    run: async () => {
      const body = { name: unique("vcs"), provider: "github" as const, url: "https://github.com", token: "t0ken" };
      await admin.call(routes.createVcsConnection, { body });
      return admin.call(routes.createVcsConnection, { body });
    },
  },
  {
    route: "getVcsConnection",
    code: "not_found",
    run: () => admin.call(routes.getVcsConnection, { params: { connection: "nope" } }),
  },
  {
    route: "deleteVcsConnection",
    code: "not_found",
    run: () => admin.call(routes.deleteVcsConnection, { params: { connection: "nope" } }),
  },
  {
    route: "deleteVcsConnection",
    code: "conflict",
    run: async () => {
      const [connection, ws] = [unique("vcs"), unique("ws")];
      await admin.call(routes.createVcsConnection, {
        body: { name: connection, provider: "gitlab", url: "https://gitlab.example.com", token: "t0ken" },
      });
      await admin.call(routes.createWorkspace, { body: { name: ws, pool: "errs" } });
      await admin.call(routes.linkWorkspaceVcs, {
        params: { ws },
        body: { connection, repository: "group/project", branch: "main" },
      });
      return admin.call(routes.deleteVcsConnection, { params: { connection } });
    },
  },
  {
    route: "linkWorkspaceVcs",
    code: "not_found",
    run: () =>
      admin.call(routes.linkWorkspaceVcs, {
        params: { ws: "nope" },
        body: { connection: "nope", repository: "o/r", branch: "main" },
      }),
  },
  {
    route: "getWorkspaceVcs",
    code: "not_found",
    run: () => admin.call(routes.getWorkspaceVcs, { params: { ws: "nope" } }),
  },
  {
    route: "unlinkWorkspaceVcs",
    code: "not_found",
    run: () => admin.call(routes.unlinkWorkspaceVcs, { params: { ws: "nope" } }),
  },
  {
    route: "listVcsDeliveries",
    code: "not_found",
    run: () => admin.call(routes.listVcsDeliveries, { params: { connection: "nope" }, query: { limit: 5 } }),
  },
  {
    route: "getVcsDelivery",
    code: "not_found",
    run: () => admin.call(routes.getVcsDelivery, { params: { connection: "nope", delivery: "vdel-nope" }, query: {} }),
  },
  {
    route: "receiveVcsWebhook",
    code: "not_found",
    run: () =>
      as(undefined).call(routes.receiveVcsWebhook, { params: { connection: "nope" }, body: Buffer.from("{}") }),
  },
  {
    route: "receiveVcsWebhook",
    code: "unauthorized",
    run: async () => {
      const connection = unique("hook");
      await admin.call(routes.createVcsConnection, {
        body: { name: connection, provider: "gitlab", url: "https://gitlab.example.com", token: "t0ken" },
      });
      return as(undefined).call(routes.receiveVcsWebhook, { params: { connection }, body: Buffer.from("{}") });
    },
  },
  {
    route: "receiveVcsWebhook",
    code: "payload_too_large",
    run: async () => {
      const connection = unique("hook");
      await admin.call(routes.createVcsConnection, {
        body: { name: connection, provider: "github", url: "https://github.com", token: "t0ken" },
      });
      // A signature of the right form gets past the header check; the size is refused before the HMAC is.
      return as(undefined).call(routes.receiveVcsWebhook, {
        params: { connection },
        headers: { "x-hub-signature-256": `sha256=${"0".repeat(64)}` },
        body: Buffer.alloc(maxWebhookBytes + 1, 0x20),
      });
    },
  },
  {
    route: "listVariables",
    code: "not_found",
    run: () => admin.call(routes.listVariables, { params: { ws: "nope" } }),
  },
  {
    route: "setVariable",
    code: "not_found",
    run: () => admin.call(routes.setVariable, { params: { ws: "nope", key: "k" }, body: { value: "v" } }),
  },
  {
    route: "deleteVariable",
    code: "not_found",
    run: async () => admin.call(routes.deleteVariable, { params: { ws: await workspaceWithUpload(), key: "missing" } }),
  },
  {
    route: "uploadConfiguration",
    code: "not_found",
    run: () => admin.call(routes.uploadConfiguration, { params: { ws: "nope" }, body: archive }),
  },
  {
    route: "uploadConfiguration",
    code: "invalid_archive",
    run: async () =>
      admin.call(routes.uploadConfiguration, {
        params: { ws: await workspaceWithUpload() },
        body: Buffer.from("not a tar.gz"),
      }),
  },
  {
    route: "uploadConfiguration",
    code: "payload_too_large",
    run: async () =>
      admin.call(routes.uploadConfiguration, {
        params: { ws: await workspaceWithUpload() },
        body: Buffer.alloc(1024 * 1024 + 10),
      }),
  },
  {
    route: "listConfigurationVersions",
    code: "not_found",
    run: () => admin.call(routes.listConfigurationVersions, { params: { ws: "nope" } }),
  },
  {
    route: "workspaceOutputs",
    code: "not_found",
    run: () => admin.call(routes.workspaceOutputs, { params: { ws: "nope" } }),
  },
  {
    route: "listStateVersions",
    code: "not_found",
    run: () => admin.call(routes.listStateVersions, { params: { ws: "nope" } }),
  },
  {
    route: "downloadStateVersion",
    code: "not_found",
    run: () => admin.call(routes.downloadStateVersion, { params: { id: "sv-nope" } }),
  },
  { route: "readState", code: "not_found", run: () => admin.call(routes.readState, { params: { ws: "nope" } }) },
  {
    route: "writeState",
    code: "not_found",
    run: () => admin.call(routes.writeState, { params: { ws: "nope" }, body: stateBody("l", 1) }),
  },
  {
    route: "writeState",
    code: "invalid_json",
    run: async () =>
      admin.call(routes.writeState, { params: { ws: await workspaceWithUpload() }, body: Buffer.from("{not json") }),
  },
  {
    route: "writeState",
    code: "conflict",
    run: async () => {
      const ws = await workspaceWithUpload();
      await admin.call(routes.writeState, { params: { ws }, body: stateBody("one", 1) });
      return admin.call(routes.writeState, { params: { ws }, body: stateBody("another", 2) });
    },
  },
  {
    route: "writeState",
    code: "state_locked",
    run: async () => {
      const ws = await workspaceWithUpload();
      await admin.call(routes.lockState, { params: { ws }, body: lockInfo("held") });
      return admin.call(routes.writeState, { params: { ws }, query: { ID: "other" }, body: stateBody("l", 1) });
    },
  },
  { route: "deleteState", code: "not_found", run: () => admin.call(routes.deleteState, { params: { ws: "nope" } }) },
  {
    route: "deleteState",
    code: "state_locked",
    run: async () => {
      const ws = await workspaceWithUpload();
      await admin.call(routes.lockState, { params: { ws }, body: lockInfo("held") });
      return admin.call(routes.deleteState, { params: { ws }, query: { ID: "other" } });
    },
  },
  {
    route: "lockState",
    code: "not_found",
    run: () => admin.call(routes.lockState, { params: { ws: "nope" }, body: lockInfo("a") }),
  },
  {
    route: "lockState",
    code: "invalid_json",
    run: async () =>
      admin.call(routes.lockState, { params: { ws: await workspaceWithUpload() }, body: Buffer.from("{") }),
  },
  {
    route: "lockState",
    code: "state_locked",
    run: async () => {
      const ws = await workspaceWithUpload();
      await admin.call(routes.lockState, { params: { ws }, body: lockInfo("first") });
      const err = await expectCode(
        "state_locked",
        admin.call(routes.lockState, { params: { ws }, body: lockInfo("second") }),
      );
      // terraform's 423 carries the holder's LockInfo, which the client keeps.
      assert.equal(err.details?.ID, "first");
      throw err;
    },
  },
  {
    route: "unlockState",
    code: "not_found",
    run: () => admin.call(routes.unlockState, { params: { ws: "nope" }, body: lockInfo("a") }),
  },
  {
    route: "unlockState",
    code: "invalid_json",
    run: async () => {
      const ws = await workspaceWithUpload();
      await admin.call(routes.lockState, { params: { ws }, body: lockInfo("held") });
      return admin.call(routes.unlockState, { params: { ws }, body: Buffer.from("{") });
    },
  },
  {
    route: "unlockState",
    code: "state_locked",
    run: async () => {
      const ws = await workspaceWithUpload();
      await admin.call(routes.lockState, { params: { ws }, body: lockInfo("held") });
      return admin.call(routes.unlockState, { params: { ws }, body: lockInfo("other") });
    },
  },
  {
    route: "createRun",
    code: "not_found",
    run: () => admin.call(routes.createRun, { body: { workspace: "nope", configurationVersionId: "cv-nope" } }),
  },
  { route: "listRuns", code: "not_found", run: () => admin.call(routes.listRuns, { query: { workspace: "nope" } }) },
  {
    route: "listWorkspaces",
    code: "not_found",
    run: () => admin.call(routes.listWorkspaces, { query: { pool: "nope" } }),
  },
  { route: "getRun", code: "not_found", run: () => admin.call(routes.getRun, { params: { id: "run-nope" } }) },
  { route: "confirmRun", code: "not_found", run: () => admin.call(routes.confirmRun, { params: { id: "run-nope" } }) },
  {
    route: "confirmRun",
    code: "invalid_transition",
    run: async () => admin.call(routes.confirmRun, { params: { id: await endedRun() } }),
  },
  { route: "discardRun", code: "not_found", run: () => admin.call(routes.discardRun, { params: { id: "run-nope" } }) },
  {
    route: "discardRun",
    code: "invalid_transition",
    run: async () => admin.call(routes.discardRun, { params: { id: await endedRun() } }),
  },
  { route: "cancelRun", code: "not_found", run: () => admin.call(routes.cancelRun, { params: { id: "run-nope" } }) },
  {
    route: "cancelRun",
    code: "invalid_transition",
    run: async () => admin.call(routes.cancelRun, { params: { id: await endedRun() } }),
  },
  { route: "runPlan", code: "not_found", run: () => admin.call(routes.runPlan, { params: { id: "run-nope" } }) },
  { route: "runLogs", code: "not_found", run: () => admin.call(routes.runLogs, { params: { id: "run-nope" } }) },
  {
    route: "downloadPlan",
    code: "not_found",
    run: async () => {
      const { job, client } = await startedJob();
      return client.call(routes.downloadPlan, { params: { id: job.jobId } });
    },
  },
  {
    route: "appendLog",
    code: "log_gap",
    run: async () => {
      const { job, client } = await startedJob();
      return client.call(routes.appendLog, {
        params: { id: job.jobId },
        query: { offset: 10 },
        body: Buffer.from("x"),
      });
    },
  },
  {
    route: "appendLog",
    code: "log_conflict",
    run: async () => {
      const { job, client } = await startedJob();
      await client.call(routes.appendLog, {
        params: { id: job.jobId },
        query: { offset: 0 },
        body: Buffer.from("first\n"),
      });
      return client.call(routes.appendLog, {
        params: { id: job.jobId },
        query: { offset: 0 },
        body: Buffer.from("other\n"),
      });
    },
  },
  {
    route: "appendLog",
    code: "payload_too_large",
    run: async () => {
      const { job, client } = await startedJob();
      return client.call(routes.appendLog, {
        params: { id: job.jobId },
        query: { offset: 0 },
        body: Buffer.alloc(2 * 1024 * 1024),
      });
    },
  },
  {
    route: "metrics",
    code: "unauthorized",
    run: () =>
      new DroverClient({ baseUrl: server.url, token: "drv_u_nobody.0123456789abcdefghij0123456789ab" }).call(
        routes.metrics,
        {},
      ),
  },
  {
    route: "uploadPlanJson",
    code: "payload_too_large",
    run: async () => {
      const { job, client } = await startedJob();
      return client.call(routes.uploadPlanJson, {
        params: { id: job.jobId },
        body: Buffer.alloc(1024 * 1024 + 1, " "),
      });
    },
  },
  {
    route: "uploadPlanJson",
    code: "invalid_json",
    run: async () => {
      const { job, client } = await startedJob();
      return client.call(routes.uploadPlanJson, { params: { id: job.jobId }, body: Buffer.from("{") });
    },
  },
  {
    route: "uploadProviderSchemas",
    code: "payload_too_large",
    run: async () => {
      const { job, client } = await startedJob();
      return client.call(routes.uploadProviderSchemas, {
        params: { id: job.jobId },
        body: Buffer.alloc(1024 * 1024 + 1, " "),
      });
    },
  },
  {
    route: "uploadProviderSchemas",
    code: "invalid_json",
    run: async () => {
      const { job, client } = await startedJob();
      return client.call(routes.uploadProviderSchemas, { params: { id: job.jobId }, body: Buffer.from("[]") });
    },
  },
  {
    route: "startJob",
    code: "job_already_started",
    run: async () => {
      // startedJob started it as "test": a retry by that starter answers again, another is refused.
      const { job, client } = await startedJob();
      assert.equal(
        (await client.call(routes.startJob, { params: { id: job.jobId }, body: { starter: "test" } })).runStatus,
        "planning",
      );
      return client.call(routes.startJob, { params: { id: job.jobId }, body: { starter: "second-pod" } });
    },
  },
  ...vcsAgentCases(),
];

const authCases: Case[] = [
  { route: "listPools", auth: "user", code: "unauthorized", run: () => as(undefined).call(routes.listPools, {}) },
  {
    route: "listPools",
    auth: "user",
    code: "token_revoked",
    run: async () => {
      const t = await admin.call(routes.createUserToken, { body: { description: "soon revoked" } });
      await admin.call(routes.revokeUserToken, { params: { id: t.id } });
      return as(t.token).call(routes.listPools, {});
    },
  },
  {
    route: "listPools",
    auth: "user",
    code: "forbidden",
    run: async () => as((await agent()).poolToken).call(routes.listPools, {}),
  },
  {
    route: "register",
    auth: "pool",
    code: "unauthorized",
    run: () => admin.call(routes.register, { body: { name: "x", version: "t", driver: "local", capacity: 1 } }),
  },
  {
    route: "register",
    auth: "pool",
    code: "token_revoked",
    run: async () => {
      const a = await agent();
      await admin.call(routes.revokePoolToken, { params: { id: a.poolTokenId } });
      return admin.call(routes.register, {
        token: a.poolToken,
        body: { name: "x", version: "t", driver: "local", capacity: 1 },
      });
    },
  },
  {
    route: "agentHeartbeat",
    auth: "session",
    code: "unauthorized",
    run: () => admin.call(routes.agentHeartbeat, { body: { runningJobs: 0 } }),
  },
  {
    route: "agentHeartbeat",
    auth: "session",
    code: "token_revoked",
    run: async () => {
      const a = await agent();
      await admin.call(routes.revokePoolToken, { params: { id: a.poolTokenId } });
      return admin.call(routes.agentHeartbeat, { token: a.session, body: { runningJobs: 0 } });
    },
  },
  {
    route: "agentHeartbeat",
    auth: "session",
    code: "agent_lost",
    run: async () => {
      // A second registration of the same name supersedes the first.
      const a = await agent();
      await admin.call(routes.register, {
        token: a.poolToken,
        body: { name: a.name, version: "test", driver: "local", capacity: 5 },
      });
      return admin.call(routes.agentHeartbeat, { token: a.session, body: { runningJobs: 0 } });
    },
  },
  {
    route: "jobVariables",
    auth: "job",
    code: "unauthorized",
    run: () => admin.call(routes.jobVariables, { params: { id: "job-any" } }),
  },
  {
    route: "jobVariables",
    auth: "job",
    code: "forbidden",
    run: async () => (await startedJob()).client.call(routes.jobVariables, { params: { id: "job-other" } }),
  },
  {
    route: "jobVariables",
    auth: "job",
    code: "stale_attempt",
    run: async () => {
      const { job, client } = await startedJob();
      await supersede(job);
      return client.call(routes.jobVariables, { params: { id: job.jobId } });
    },
  },
  {
    route: "jobVariables",
    auth: "job",
    code: "job_finished",
    run: async () => {
      const { job, client } = await startedJob();
      await client.call(routes.finishJob, { params: { id: job.jobId }, body: { outcome: "failed", message: null } });
      return client.call(routes.jobVariables, { params: { id: job.jobId } });
    },
  },
  {
    route: "readState",
    auth: "state",
    code: "unauthorized",
    run: async () => as(undefined).call(routes.readState, { params: { ws: await workspaceWithUpload() } }),
  },
  {
    route: "readState",
    auth: "state",
    code: "token_revoked",
    run: async () => {
      const t = await admin.call(routes.createUserToken, { body: { description: "soon revoked" } });
      await admin.call(routes.revokeUserToken, { params: { id: t.id } });
      return as(t.token).call(routes.readState, { params: { ws: await workspaceWithUpload() } });
    },
  },
  {
    route: "readState",
    auth: "state",
    code: "forbidden",
    run: async () =>
      (await startedJob()).client.call(routes.readState, { params: { ws: await workspaceWithUpload() } }),
  },
  {
    route: "readState",
    auth: "state",
    code: "stale_attempt",
    run: async () => {
      const { ws, job, client } = await startedJob();
      await supersede(job);
      return client.call(routes.readState, { params: { ws } });
    },
  },
  {
    route: "readState",
    auth: "state",
    code: "job_finished",
    run: async () => {
      const { ws, job, client } = await startedJob();
      await client.call(routes.finishJob, { params: { id: job.jobId }, body: { outcome: "failed", message: null } });
      return client.call(routes.readState, { params: { ws } });
    },
  },
];

const drivenElsewhere: ErrorCode[] = ["internal", "database_unavailable", "too_many_requests"];

test("every code the route table documents has a case here", () => {
  const covered = new Set([...routeCases, ...authCases].map((c) => `${c.route} ${c.code}`));
  const missing: string[] = [];
  for (const [name, route] of Object.entries(routes) as [RouteName, Route][]) {
    for (const code of route.errors) if (!covered.has(`${name} ${code}`)) missing.push(`${name} ${code}`);
  }
  for (const [kind, codes] of Object.entries(authErrors) as [AuthKind, readonly ErrorCode[]][]) {
    for (const code of codes)
      if (!authCases.some((c) => c.auth === kind && c.code === code)) missing.push(`auth ${kind} ${code}`);
  }
  for (const code of commonErrors) {
    if (!drivenElsewhere.includes(code) && ![...routeCases, ...authCases].some((c) => c.code === code))
      missing.push(`common ${code}`);
  }
  for (const c of authCases) assert.equal(routes[c.route].auth, c.auth, `${c.route} stands for auth kind ${c.auth}`);
  assert.deepEqual(missing, [], `documented without a case: ${missing.join(", ")}`);
});

for (const c of [...routeCases, ...authCases]) {
  test(`${c.route} answers ${c.code}${c.auth ? ` (auth ${c.auth})` : ""}`, async () => {
    await expectCode(c.code, c.run());
  });
}

/** A local HTTP server answering every request with `handler`. */
async function fakeServer(
  handler: Parameters<typeof createServer>[1],
): Promise<{ url: string; close(): Promise<void> }> {
  const s: Server = createServer(handler);
  await new Promise<void>((resolve) => s.listen(0, "127.0.0.1", resolve));
  const address = s.address();
  assert.ok(address && typeof address === "object");
  return {
    url: `http://127.0.0.1:${address.port}`,
    close: () =>
      new Promise<void>((resolve) => {
        s.closeAllConnections();
        s.close(() => resolve());
      }),
  };
}

test("no server listening: server_unreachable, with a hint", async () => {
  const gone = await fakeServer((_req, res) => res.end());
  await gone.close();
  const err = await expectCode(
    "server_unreachable",
    new DroverClient({ baseUrl: gone.url, token: "t" }).call(routes.listPools, {}),
  );
  assert.match(err.message, /cannot reach the Drover server at http:\/\/127\.0\.0\.1:\d+/);
  assert.ok(err.hint && /DROVER_URL/.test(err.hint));
});

test("a server that never answers: server_unreachable once the deadline passes", async () => {
  const silent = await fakeServer(() => undefined);
  try {
    const err = await expectCode(
      "server_unreachable",
      new DroverClient({ baseUrl: silent.url, token: "t", timeoutMs: 300 }).call(routes.listPools, {}),
    );
    assert.match(err.message, /no answer .* within 300 ms/);
  } finally {
    await silent.close();
  }
});

test("a server that sends headers and then stalls the body: the deadline covers the body too", async () => {
  const stalls = await fakeServer((_req, res) => {
    res.writeHead(200, { "content-type": "application/json" });
    res.write('{"items":');
  });
  try {
    await expectCode(
      "server_unreachable",
      new DroverClient({ baseUrl: stalls.url, token: "t", timeoutMs: 300 }).call(routes.listPools, {}),
    );
  } finally {
    await stalls.close();
  }
});

test("a proxy's bare 502 is server_unreachable; an answer outside the contract is unexpected_response", async () => {
  const proxy = await fakeServer((req, res) => {
    if (req.url?.startsWith(routes.listPools.path))
      res.writeHead(502, { "content-type": "text/html" }).end("<html>Bad Gateway</html>");
    else if (req.url?.startsWith(routes.listWorkspaces.path))
      res.writeHead(200, { "content-type": "text/html" }).end("<html>a login page</html>");
    else res.writeHead(200, { "content-type": "application/json" }).end(JSON.stringify({ items: [{ id: 1 }] }));
  });
  try {
    const client = new DroverClient({ baseUrl: proxy.url, token: "t" });
    await expectCode("server_unreachable", client.call(routes.listPools, {}));
    const notJson = await expectCode("unexpected_response", client.call(routes.listWorkspaces, {}));
    assert.ok(notJson.hint && /same version/.test(notJson.hint));
    await expectCode("unexpected_response", client.call(routes.listRuns, {}));
  } finally {
    await proxy.close();
  }
});

test("two concurrent creates of one pool name over HTTP: one 201, the others 409 already_exists", async () => {
  const name = unique("raced");
  const results = await Promise.allSettled(
    Array.from({ length: 8 }, () => admin.call(routes.createPool, { body: { name } })),
  );
  assert.equal(results.filter((r) => r.status === "fulfilled").length, 1);
  for (const r of results) {
    if (r.status === "fulfilled") continue;
    assert.ok(r.reason instanceof DroverError && r.reason.code === "already_exists", String(r.reason));
    assert.ok(r.reason.hint, "already_exists carries a hint");
  }
});
