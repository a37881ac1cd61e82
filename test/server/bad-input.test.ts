import assert from "node:assert/strict";
import { after, before, describe, test } from "node:test";
import { randomBytes } from "node:crypto";
import { gzipSync } from "node:zlib";
import { rawTarGz } from "../support/archives.js";
import { call, queueRun, registerAgent } from "../support/agent-client.js";
import { startTestServer, type TestServer } from "../support/server.js";
import { routes } from "@drover/protocol";
import { client, rawCall, routeCall } from "../support/typed-api.js";

// Every bad input gets a clear 4xx JSON error and nothing is lost or half-written.

let server: TestServer;
const good = rawTarGz([{ path: "main.tf", content: 'resource "terraform_data" "a" {}\n' }]);

function assertError(res: { status: number; body: any }, status: number, code: string, message?: RegExp) {
  assert.equal(res.status, status, JSON.stringify(res.body));
  assert.equal(res.body.error, code, JSON.stringify(res.body));
  assert.equal(typeof res.body.message, "string");
  if (message) assert.match(res.body.message, message);
}

before(async () => {
  server = await startTestServer({ DROVER_MAX_CONFIGURATION_MB: "1" });
  await server.api(routes.createPool, { body: { name: "bad" } });
  await server.api(routes.createPool, { body: { name: "other" } });
});
after(() => server?.stop());

describe("requests", () => {
  test("malformed JSON", async () => {
    assertError(
      await server.api(routes.createPool, {
        invalidBody: "{not json",
        headers: { "content-type": "application/json" },
      }),
      400,
      "invalid_json",
      /not valid JSON/,
    );
    // Not an absent body: a client that sends `null` has a bug, which a default would hide.
    assertError(
      await server.api(routes.createPool, { invalidBody: "null", headers: { "content-type": "application/json" } }),
      400,
      "bad_request",
      /invalid request body: .*null/,
    );
  });
  test("fields that break the schema are named", async () => {
    assertError(
      await server.api(routes.createWorkspace, { body: { name: "has space", pool: "bad" } }),
      400,
      "bad_request",
      /name/,
    );
    const up = await server.api(routes.createWorkspace, {
      body: { name: "w", pool: "bad", workingDirectory: "../up", engineVersion: "newest" },
    });
    assertError(up, 400, "bad_request", /workingDirectory/);
    // Also by path, so a form can show each problem beside its field.
    assert.deepEqual(
      up.body.issues.map((i: { path: string }) => i.path),
      ["engineVersion", "workingDirectory"],
    );
    // No directory is named so; raw in a run's log, its escapes would reach terminals.
    assertError(
      await server.api(routes.createWorkspace, {
        body: { name: "w", pool: "bad", workingDirectory: "infra\u0000\u001b[2J" },
      }),
      400,
      "bad_request",
      /workingDirectory.*control character/,
    );
    await server.api(routes.createWorkspace, { body: { name: "env-nul", pool: "bad" } });
    // No process can be given such an environment: every run of the workspace would fail to start.
    assertError(
      await server.api(routes.setVariable, {
        params: { ws: "env-nul", key: "FOO" },
        body: { value: "a\u0000b", kind: "env" },
      }),
      400,
      "bad_request",
      /NUL/,
    );
    assertError(
      await server.api(routes.createRun, { body: { workspace: "nope", configurationVersionId: "cv-x" } }),
      404,
      "not_found",
      /workspace/,
    );
  });
  test("a JSON body over its route's limit is refused with the limit in bytes", async () => {
    await server.api(routes.createWorkspace, { body: { name: "big-value", pool: "bad" } });
    assertError(
      await server.api(routes.setVariable, {
        params: { ws: "big-value", key: "big" },
        body: { value: "x".repeat(2 * 1024 * 1024), kind: "terraform" },
      }),
      413,
      "payload_too_large",
      /^the request body is larger than the \d+ bytes this endpoint accepts$/,
    );
    const { body } = await server.api(routes.listVariables, { params: { ws: "big-value" } });
    assert.deepEqual(body.items, []);
  });
  test("unknown routes answer JSON", async () => {
    // eslint-disable-next-line no-restricted-syntax -- a path outside the route table, on purpose
    assertError(await rawCall(server.url, "GET", "/api/v1/nothing-here", server.adminToken), 404, "not_found");
  });
});

describe("tokens", () => {
  test("missing, unknown and wrong-kind tokens", async () => {
    assertError(await routeCall(server.url, routes.listPools), 401, "unauthorized", /Authorization/);
    assertError(
      await server.api(routes.listPools, { headers: { authorization: "Bearer drv_u_nobody.secret" } }),
      401,
      "unauthorized",
    );
    const { poolToken, session } = await registerAgent(server, "bad", "kinds");
    assertError(
      await server.api(routes.listPools, { headers: { authorization: `Bearer ${poolToken}` } }),
      403,
      "forbidden",
      /pool token/,
    );
    assertError(
      await call(server, routes.register, session, { body: { name: "x", version: "1", driver: "local", capacity: 1 } }),
      401,
      "unauthorized",
      /pool token/,
    );
  });

  test("a revoked pool token cannot register, and its agents' sessions end", async () => {
    const { poolToken, poolTokenId, session } = await registerAgent(server, "bad", "revokee");
    assert.equal((await server.api(routes.revokePoolToken, { params: { id: poolTokenId } })).status, 200);
    assertError(
      await call(server, routes.register, poolToken, {
        body: { name: "again", version: "1", driver: "local", capacity: 1 },
      }),
      401,
      "token_revoked",
      /revoked/,
    );
    assertError(await call(server, routes.agentHeartbeat, session, { body: { runningJobs: 0 } }), 401, "token_revoked");
    assertError(await call(server, routes.pollJob, session, { query: { wait: 0 } }), 401, "token_revoked");
  });

  test("a job token works only for its own job and workspace", async () => {
    const { session } = await registerAgent(server, "bad", "scoped");
    const mine = await queueRun(server, "bad", "scope-a", good);
    const theirs = await queueRun(server, "bad", "scope-b", good);
    const claimed = await call(server, routes.pollJob, session, { query: { wait: 1000 } });
    const job = claimed.body.job;
    assert.ok(job, JSON.stringify(claimed.body));
    const token = job.jobToken as string;
    const other = job.workspace.id === mine.workspaceId ? theirs : mine;
    assertError(
      await call(server, routes.readState, token, { params: { ws: other.workspaceId } }),
      403,
      "forbidden",
      /scoped to workspace/,
    );
    assert.equal((await call(server, routes.readState, token, { params: { ws: job.workspace.id } })).status, 204);
    const otherJob = (await server.api(routes.listRunJobs, { params: { id: other.runId } })).body.items[0].id;
    assertError(
      await call(server, routes.startJob, token, { params: { id: otherJob }, body: { starter: "test" } }),
      403,
      "forbidden",
    );
    assertError(await call(server, routes.listPools, token), 403, "forbidden");
  });
});

describe("configuration archives", () => {
  const cases: Array<[string, Buffer, number, string, RegExp]> = [
    [
      "path traversal",
      rawTarGz([{ path: "../../etc/cron.d/evil", content: "x" }]),
      422,
      "invalid_archive",
      /climbs out/,
    ],
    ["absolute path", rawTarGz([{ path: "/etc/passwd", content: "x" }]), 422, "invalid_archive", /absolute/],
    [
      "symlink escaping the root",
      rawTarGz([{ path: "link", type: "symlink", linkpath: "../../outside" }]),
      422,
      "invalid_archive",
      /outside the archive/,
    ],
    [
      "absolute symlink",
      rawTarGz([{ path: "link", type: "symlink", linkpath: "/etc" }]),
      422,
      "invalid_archive",
      /outside the archive/,
    ],
    [
      "hard link escaping the root",
      rawTarGz([{ path: "hl", type: "hardlink", linkpath: "../x" }]),
      422,
      "invalid_archive",
      /outside the archive/,
    ],
    ["character device", rawTarGz([{ path: "dev", type: "chardev" }]), 422, "invalid_archive", /CharacterDevice/],
    ["FIFO", rawTarGz([{ path: "pipe", type: "fifo" }]), 422, "invalid_archive", /FIFO/],
    ["not a tar.gz", Buffer.from("plain text"), 422, "invalid_archive", /tar\.gz/],
    ["corrupt gzip", Buffer.concat([Buffer.from([0x1f, 0x8b]), randomBytes(200)]), 422, "invalid_archive", /corrupt/],
    ["oversize", gzipSync(randomBytes(1200 * 1024), { level: 0 }), 413, "payload_too_large", /larger|limit/],
  ];
  before(async () => {
    await server.api(routes.createWorkspace, { body: { name: "archives", pool: "bad" } });
  });
  for (const [name, archive, status, code, message] of cases) {
    test(`${name} is refused and nothing is stored`, async () => {
      const res = await server.api(routes.uploadConfiguration, { params: { ws: "archives" }, body: archive });
      assertError(res, status, code, message);
      const listed = await server.api(routes.listConfigurationVersions, { params: { ws: "archives" } });
      assert.deepEqual(listed.body.items, []);
    });
  }
});

describe("agent writes", () => {
  let token: string;
  let jobId: string;
  let workspaceId: string;
  before(async () => {
    const { session } = await registerAgent(server, "other", "writer");
    ({ workspaceId } = await queueRun(server, "other", "writes", good));
    const job = (await call(server, routes.pollJob, session, { query: { wait: 1000 } })).body.job;
    token = job.jobToken;
    jobId = job.jobId;
    assert.equal(
      (await call(server, routes.startJob, token, { params: { id: jobId }, body: { starter: "test" } })).status,
      200,
    );
  });

  test("oversize log chunk", async () => {
    assertError(
      await call(server, routes.appendLog, token, {
        params: { id: jobId },
        query: { offset: 0 },
        body: Buffer.alloc(1024 * 1024 + 2048),
      }),
      413,
      "payload_too_large",
    );
  });
  test("out-of-order log offsets are refused with the expected offset; nothing is lost", async () => {
    assert.deepEqual(
      (
        await call(server, routes.appendLog, token, {
          params: { id: jobId },
          query: { offset: 0 },
          body: Buffer.from("line 1\n"),
        })
      ).body,
      { offset: 7 },
    );
    const gap = await call(server, routes.appendLog, token, {
      params: { id: jobId },
      query: { offset: 100 },
      body: Buffer.from("later\n"),
    });
    assertError(gap, 409, "log_gap", /resend from 7/);
    assert.equal(gap.body.expectedOffset, 7);
    assert.deepEqual(
      (
        await call(server, routes.appendLog, token, {
          params: { id: jobId },
          query: { offset: 0 },
          body: Buffer.from("line 1\n"),
        })
      ).body,
      { offset: 7 },
      "a resend is idempotent",
    );
    const runId = (await server.api(routes.listRuns, { query: { workspace: "writes" } })).body.items[0].id;
    assert.equal(
      (await client(server.url, server.adminToken).call(routes.runLogs, { params: { id: runId } })).toString("utf8"),
      "line 1\n",
    );
  });
  test("a second lock while the state is locked gets 423 with the holder", async () => {
    const lockInfo = { ID: "first", Operation: "OperationTypeApply", Who: "agent@writer" };
    const lock = (body: unknown) =>
      call(server, routes.lockState, token, {
        params: { ws: workspaceId },
        body: Buffer.from(JSON.stringify(body)),
        headers: { "content-type": "application/json" },
      });
    assert.equal((await lock(lockInfo)).status, 200);
    const second = await lock({ ...lockInfo, ID: "second" });
    assert.equal(second.status, 423);
    assert.equal(second.body.ID, "first", "the body is the holder's LockInfo, as terraform expects");
    const write = await call(server, routes.writeState, token, {
      params: { ws: workspaceId },
      query: { ID: "second" },
      body: Buffer.from('{"serial":1}'),
    });
    assert.equal(write.status, 423);
    assert.equal(
      (await server.api(routes.listStateVersions, { params: { ws: workspaceId } })).body.items.length,
      0,
      "nothing written",
    );
  });
  test("bad finish outcome is refused and the job keeps running", async () => {
    assertError(
      await call(server, routes.finishJob, token, { params: { id: jobId }, invalidBody: { outcome: "done" } }),
      400,
      "bad_request",
      /outcome/,
    );
    assert.equal((await call(server, routes.jobHeartbeat, token, { params: { id: jobId } })).status, 200);
  });
});

test("a stale attempt is fenced off after its lease is reassigned", async () => {
  const short = await startTestServer({ DROVER_LEASE_TTL_SECONDS: "1" });
  try {
    await short.api(routes.createPool, { body: { name: "p" } });
    const { session } = await registerAgent(short, "p", "slow");
    await queueRun(short, "p", "stale", good);
    const first = (await call(short, routes.pollJob, session, { query: { wait: 1000 } })).body.job;
    // Not started and no heartbeat: the 1 s lease expires and the job is requeued.
    const again = (await call(short, routes.pollJob, session, { query: { wait: 10000 } })).body.job;
    assert.equal(again?.jobId, first.jobId);
    assert.equal(again.attempt, first.attempt + 1);
    assertError(
      await call(short, routes.startJob, first.jobToken, { params: { id: first.jobId }, body: { starter: "test" } }),
      409,
      "stale_attempt",
      /reassigned/,
    );
    assertError(
      await call(short, routes.appendLog, first.jobToken, {
        params: { id: first.jobId },
        query: { offset: 0 },
        body: Buffer.from("x"),
      }),
      409,
      "stale_attempt",
    );
  } finally {
    await short.stop();
  }
});
