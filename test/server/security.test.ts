import assert from "node:assert/strict";
import { randomBytes } from "node:crypto";
import { after, before, describe, test } from "node:test";
import { backslashLinkEntries, rawTarGz } from "../support/archives.js";
import { call, queueRun, registerAgent } from "../support/agent-client.js";
import { startTestServer, type TestServer } from "../support/server.js";
import { routeCall } from "../support/typed-api.js";
import { routePath, routes } from "@drover/protocol";

// Issue 13 / decision 0010: each test performs one attack from the audit against a real server.

let server: TestServer;
const good = rawTarGz([{ path: "main.tf", content: 'resource "terraform_data" "a" {}\n' }]);

function assertError(res: { status: number; body: any }, status: number, code: string, message?: RegExp) {
  assert.equal(res.status, status, JSON.stringify(res.body));
  assert.equal(res.body.error, code, JSON.stringify(res.body));
  if (message) assert.match(res.body.message, message);
}

before(async () => {
  server = await startTestServer();
  await server.api(routes.createPool, { body: { name: "sec" } });
});
after(() => server?.stop());

describe("authentication comes first (10)", () => {
  test("no workspace-existence oracle on the state backend", async () => {
    await server.api(routes.createWorkspace, { body: { name: "exists", pool: "sec" } });
    for (const ws of ["exists", "does-not-exist"]) {
      const anonymous = await routeCall(server.url, routes.readState, { params: { ws } });
      assert.equal(anonymous.status, 401, `anonymous GET of ${ws}`);
      const forged = await call(server, routes.readState, "drv_u_utok-0000000000000000.forged", { params: { ws } });
      assertError(forged, 401, "unauthorized");
    }
  });

  test("a forged job token gets 401, never the job's status", async () => {
    const { session } = await registerAgent(server, "sec", "oracle");
    await queueRun(server, "sec", "oracle-ws", good);
    const job = (await call(server, routes.pollJob, session, { query: { wait: 2000 } })).body.job;
    assert.ok(job);
    const forgeFor = (attempt: number) => `drv_j_${job.jobId}.${attempt}.${randomBytes(32).toString("base64url")}`;
    for (const attempt of [job.attempt, job.attempt + 1, job.attempt - 1 || 7]) {
      assertError(
        await call(server, routes.jobHeartbeat, forgeFor(attempt), { params: { id: job.jobId } }),
        401,
        "unauthorized",
      );
    }
    assert.equal(
      (await call(server, routes.startJob, job.jobToken, { params: { id: job.jobId }, body: { starter: "test" } }))
        .status,
      200,
    );
    assert.equal(
      (
        await call(server, routes.finishJob, job.jobToken, {
          params: { id: job.jobId },
          body: { outcome: "failed", message: "x" },
        })
      ).status,
      204,
    );
    // The genuine token learns the job ended; a forged one learns nothing.
    assertError(
      await call(server, routes.jobHeartbeat, job.jobToken, { params: { id: job.jobId } }),
      409,
      "job_finished",
    );
    const forged = await call(server, routes.jobHeartbeat, forgeFor(job.attempt), { params: { id: job.jobId } });
    assertError(forged, 401, "unauthorized");
    assert.equal(forged.body.status, undefined);
  });

  test("a job token cannot tell whether another workspace exists", async () => {
    const { session } = await registerAgent(server, "sec", "scope");
    await queueRun(server, "sec", "scope-ws", good);
    const job = (await call(server, routes.pollJob, session, { query: { wait: 2000 } })).body.job;
    const existing = await call(server, routes.readState, job.jobToken, { params: { ws: "exists" } });
    const missing = await call(server, routes.readState, job.jobToken, { params: { ws: "never-made" } });
    assert.equal(existing.status, 403);
    assert.equal(missing.status, 403);
  });
});

describe("names and free text (11, 12)", () => {
  test("a pool or workspace named like an id is refused", async () => {
    const pool = (await server.api(routes.getPool, { params: { pool: "sec" } })).body;
    assertError(
      await server.api(routes.createPool, { body: { name: "ws-0123456789abcdef" } }),
      400,
      "bad_request",
      /look like an id/,
    );
    assertError(
      await server.api(routes.createWorkspace, { body: { name: pool.id, pool: "sec" } }),
      400,
      "bad_request",
      /look like an id/,
    );
    assert.equal(
      (await server.api(routes.getPool, { params: { pool: pool.id } })).body.name,
      "sec",
      "the real pool is still what its id names",
    );
  });

  test("control characters in a token description or agent version are refused", async () => {
    assertError(
      await server.api(routes.createPoolToken, {
        params: { pool: "sec" },
        body: { description: "ok\u001b[2J\u001b[31mpwned" },
      }),
      400,
      "bad_request",
      /control characters/,
    );
    const tok = (await server.api(routes.createPoolToken, { params: { pool: "sec" }, body: { description: "plain" } }))
      .body.token;
    assertError(
      await call(server, routes.register, tok, {
        body: { name: "esc", version: "1\u001b]0;x\u0007", driver: "local", capacity: 1 },
      }),
      400,
      "bad_request",
      /control characters/,
    );
  });

  test("an agent's outcome message reaches the API with its escapes neutralised", async () => {
    const { session } = await registerAgent(server, "sec", "ansi");
    const { runId } = await queueRun(server, "sec", "ansi-ws", good);
    const job = (await call(server, routes.pollJob, session, { query: { wait: 2000 } })).body.job;
    await call(server, routes.startJob, job.jobToken, { params: { id: job.jobId }, body: { starter: "test" } });
    await call(server, routes.finishJob, job.jobToken, {
      params: { id: job.jobId },
      body: { outcome: "failed", message: "Error: boom\n\u001b[2J\u001b[31mred" },
    });
    const run = (await server.api(routes.getRun, { params: { id: runId } })).body;
    assert.ok(!run.errorMessage.includes("\u001b"), run.errorMessage);
    assert.match(run.errorMessage, /Error: boom\n\\u\{1b\}\[2J/);
  });
});

describe("archive link chains (13)", () => {
  const cases: Array<[string, Buffer]> = [
    [
      "a symlink through a symlink to the parent",
      rawTarGz([
        { path: "a/", type: "dir" },
        { path: "a/b", type: "symlink", linkpath: ".." },
        { path: "c", type: "symlink", linkpath: "a/b/.." },
        { path: "main.tf", content: "" },
      ]),
    ],
    [
      "a variables-file link through a chain",
      rawTarGz([
        { path: "up", type: "symlink", linkpath: "." },
        { path: "x/", type: "dir" },
        { path: "x/dot", type: "symlink", linkpath: "../up/.." },
        { path: "drover.tfvars.json", type: "symlink", linkpath: "x/dot/x/dot/stolen.json" },
      ]),
    ],
    [
      "a hard link through a symlink",
      rawTarGz([
        { path: "d", type: "symlink", linkpath: "." },
        { path: "e", type: "symlink", linkpath: "d/.." },
        { path: "h", type: "hardlink", linkpath: "e/etc/passwd" },
      ]),
    ],
    [
      "an entry written through a link",
      rawTarGz([
        { path: "d", type: "symlink", linkpath: "sub" },
        { path: "sub/", type: "dir" },
        { path: "d/main.tf", content: "x" },
      ]),
    ],
    [
      "a loop of links",
      rawTarGz([
        { path: "l1", type: "symlink", linkpath: "l2" },
        { path: "l2", type: "symlink", linkpath: "l1" },
      ]),
    ],
    // Review N3: a backslash is no separator on Linux, so this link climbs 40 levels up.
    [
      "a symlink whose target hides 40 levels in one backslashed name",
      rawTarGz([...backslashLinkEntries(40, "tmp/x"), { path: "main.tf", content: "" }]),
    ],
    // Review N16: node-tar refuses to unpack it, so the server must not accept it.
    [
      "a hard link to a symlink",
      rawTarGz([
        { path: "f", content: "x" },
        { path: "s", type: "symlink", linkpath: "f" },
        { path: "h", type: "hardlink", linkpath: "s" },
      ]),
    ],
  ];
  for (const [name, archive] of cases) {
    test(`${name} is refused`, async () => {
      await server.api(routes.createWorkspace, { body: { name: "links", pool: "sec" } });
      const res = await server.api(routes.uploadConfiguration, { params: { ws: "links" }, body: archive });
      assertError(res, 422, "invalid_archive", /link/);
      assert.equal(
        (await server.api(routes.listConfigurationVersions, { params: { ws: "links" } })).body.items.length,
        0,
      );
    });
  }
  test("links that stay inside, even through other links, are accepted", async () => {
    await server.api(routes.createWorkspace, { body: { name: "links-ok", pool: "sec" } });
    const archive = rawTarGz([
      { path: "modules/", type: "dir" },
      { path: "modules/net/", type: "dir" },
      { path: "modules/net/main.tf", content: "" },
      { path: "m", type: "symlink", linkpath: "modules" },
      { path: "n", type: "symlink", linkpath: "m/net/../net" },
      { path: "main.tf", content: "" },
    ]);
    assert.equal(
      (await server.api(routes.uploadConfiguration, { params: { ws: "links-ok" }, body: archive })).status,
      201,
    );
  });
});

describe("state writes (14)", () => {
  const state = (serial: number, lineage: string) =>
    Buffer.from(JSON.stringify({ version: 4, serial, lineage, resources: [], outputs: {} }));
  const lockInfo = (id: string) => Buffer.from(JSON.stringify({ ID: id, Operation: "OperationTypeApply", Who: "me" }));
  const params = { ws: "state-ws" };
  before(async () => {
    await server.api(routes.createWorkspace, { body: { name: "state-ws", pool: "sec" } });
    assert.equal(
      (await call(server, routes.lockState, server.adminToken, { params, body: lockInfo("holder") })).status,
      200,
    );
    assert.equal(
      (
        await call(server, routes.writeState, server.adminToken, {
          params,
          query: { ID: "holder" },
          body: state(5, "line-a"),
        })
      ).status,
      200,
    );
  });

  test("with the lock held: lower serial and other lineage get 409, non-JSON 400; nothing replaces the state", async () => {
    assertError(
      await call(server, routes.writeState, server.adminToken, {
        params,
        query: { ID: "holder" },
        body: state(4, "line-a"),
      }),
      409,
      "conflict",
      /serial 4 is lower/,
    );
    assertError(
      await call(server, routes.writeState, server.adminToken, {
        params,
        query: { ID: "holder" },
        body: state(6, "line-b"),
      }),
      409,
      "conflict",
      /lineage/,
    );
    assertError(
      await call(server, routes.writeState, server.adminToken, {
        params,
        query: { ID: "holder" },
        body: Buffer.from("<html>not state</html>"),
      }),
      400,
      "invalid_json",
    );
    assertError(
      await call(server, routes.writeState, server.adminToken, {
        params,
        query: { ID: "holder" },
        body: Buffer.from("[1,2]"),
      }),
      400,
      "bad_request",
    );
    const current = await call(server, routes.readState, server.adminToken, { params });
    assert.equal(current.body.serial, 5);
    assert.equal(current.body.lineage, "line-a");
    assert.equal(
      (
        await call(server, routes.writeState, server.adminToken, {
          params,
          query: { ID: "holder" },
          body: state(6, "line-a"),
        })
      ).status,
      200,
      "a newer serial of the same lineage is accepted",
    );
  });

  test("DELETE under another's lock is refused; an allowed DELETE keeps the versions recoverable", async () => {
    assert.equal((await call(server, routes.deleteState, server.adminToken, { params })).status, 423);
    assert.equal(
      (await call(server, routes.deleteState, server.adminToken, { params, query: { ID: "someone-else" } })).status,
      423,
    );
    assert.equal(
      (await call(server, routes.readState, server.adminToken, { params })).body.serial,
      6,
      "nothing erased",
    );
    assert.equal(
      (await call(server, routes.deleteState, server.adminToken, { params, query: { ID: "holder" } })).status,
      200,
    );
    assert.equal(
      (await call(server, routes.readState, server.adminToken, { params })).status,
      204,
      "no current state after the delete",
    );
    const versions = (await server.api(routes.listStateVersions, { params: { ws: "state-ws" } })).body.items;
    assert.equal(versions.length, 2);
    assert.ok(versions.every((v: any) => v.deletedAt !== null));
    const old = await server.api(routes.downloadStateVersion, { params: { id: versions[0].id } });
    assert.equal(old.body.serial, 6, "a deleted version is still downloadable");
    // After a delete a new lineage may start.
    assert.equal(
      (
        await call(server, routes.writeState, server.adminToken, {
          params,
          query: { ID: "holder" },
          body: state(1, "line-c"),
        })
      ).status,
      200,
    );
  });
});

describe("engine versions (15)", () => {
  test("a path or garbage as engineVersion is refused", async () => {
    for (const engineVersion of ["../../../tmp/x", "1.2.3/../../x", "latest; rm -rf /", "1.2.3\u001b"]) {
      assertError(
        await server.api(routes.createWorkspace, { body: { name: "ev", pool: "sec", engineVersion } }),
        400,
        "bad_request",
        /engineVersion/,
      );
    }
    await server.api(routes.createWorkspace, { body: { name: "ev-ok", pool: "sec", engineVersion: "1.9.8" } });
    assertError(
      await server.api(routes.updateWorkspace, { params: { ws: "ev-ok" }, body: { engineVersion: "../x" } }),
      400,
      "bad_request",
      /engineVersion/,
    );
    for (const engineVersion of ["~> 1.9", ">= 1.6, < 2.0", "1.10.0-beta1"]) {
      assert.equal(
        (await server.api(routes.updateWorkspace, { params: { ws: "ev-ok" }, body: { engineVersion } })).status,
        200,
        engineVersion,
      );
    }
  });
});

describe("workspace runner images (17)", () => {
  test("a runner image that is no image reference is refused; a valid one is kept, changed and cleared", async () => {
    for (const runnerImage of [
      "--privileged",
      "Alpine",
      "alpine:3 --rm",
      "../x",
      "alpine\u001b",
      `${"a".repeat(256)}`,
      "",
    ]) {
      assertError(
        await server.api(routes.createWorkspace, { body: { name: "ri", pool: "sec", runnerImage } }),
        400,
        "bad_request",
        /runnerImage/,
      );
    }
    const created = await server.api(routes.createWorkspace, {
      body: {
        name: "ri-ok",
        pool: "sec",
        runnerImage: "registry.example.com:5000/team/runner:1.9@sha256:" + "a".repeat(64),
      },
    });
    assert.equal(created.status, 201, JSON.stringify(created.body));
    assert.equal(created.body.runnerImage, "registry.example.com:5000/team/runner:1.9@sha256:" + "a".repeat(64));
    assert.equal(
      (await server.api(routes.createWorkspace, { body: { name: "ri-default", pool: "sec" } })).body.runnerImage,
      null,
      "unset: the agents' own",
    );
    assertError(
      await server.api(routes.updateWorkspace, { params: { ws: "ri-ok" }, body: { runnerImage: "-v /:/host" } }),
      400,
      "bad_request",
      /runnerImage/,
    );
    assert.equal(
      (
        await server.api(routes.updateWorkspace, {
          params: { ws: "ri-ok" },
          body: { runnerImage: "ghcr.io/acme/tf:1.10" },
        })
      ).body.runnerImage,
      "ghcr.io/acme/tf:1.10",
    );
    assert.equal(
      (await server.api(routes.updateWorkspace, { params: { ws: "ri-ok" }, body: { autoApply: true } })).body
        .runnerImage,
      "ghcr.io/acme/tf:1.10",
      "a PATCH without it keeps it",
    );
    assert.equal(
      (await server.api(routes.updateWorkspace, { params: { ws: "ri-ok" }, body: { runnerImage: null } })).body
        .runnerImage,
      null,
    );
  });
});

describe("secrets at rest (6)", () => {
  test("the SQLite database is 0600 in a 0700 directory the server creates", async () => {
    const { mkdtempSync, statSync, existsSync, rmSync } = await import("node:fs");
    const { tmpdir } = await import("node:os");
    const { join } = await import("node:path");
    const parent = mkdtempSync(join(tmpdir(), "drover-perm-"));
    const dataDir = join(parent, "fresh", "data");
    const own = await startTestServer({ DROVER_DATA_DIR: dataDir });
    try {
      await own.api(routes.createPool, { body: { name: "perm" } });
      const mode = (p: string) => (statSync(p).mode & 0o777).toString(8);
      assert.equal(mode(dataDir), "700");
      assert.equal(mode(join(dataDir, "drover.db")), "600");
      for (const side of ["drover.db-wal", "drover.db-shm"])
        if (existsSync(join(dataDir, side))) assert.equal(mode(join(dataDir, side)), "600", side);
    } finally {
      await own.stop();
      rmSync(parent, { recursive: true, force: true });
    }
  });
});

describe("job tokens end with their reasons (8)", () => {
  const lockInfo = (id: string) =>
    Buffer.from(JSON.stringify({ ID: id, Operation: "OperationTypeApply", Who: "holder" }));

  /** A running job holding its workspace's state lock, as a stuck or rogue agent would. */
  async function runningJobWithLock(pool: string, ws: string) {
    const agent = await registerAgent(server, pool, `${ws}-agent`);
    const { runId, workspaceId } = await queueRun(server, pool, ws, good);
    const job = (await call(server, routes.pollJob, agent.session, { query: { wait: 2000 } })).body.job;
    assert.equal(
      (await call(server, routes.startJob, job.jobToken, { params: { id: job.jobId }, body: { starter: "test" } }))
        .status,
      200,
    );
    assert.equal(
      (
        await call(server, routes.lockState, job.jobToken, {
          params: { ws: workspaceId },
          body: lockInfo("held"),
          headers: { "content-type": "application/json" },
        })
      ).status,
      200,
    );
    return { ...agent, runId, workspaceId, job };
  }

  async function assertTokenDead(job: { jobId: string; jobToken: string }, workspaceId: string) {
    const hb = await call(server, routes.jobHeartbeat, job.jobToken, { params: { id: job.jobId } });
    assert.ok(hb.status === 409 || hb.status === 401, JSON.stringify(hb.body));
    assert.notEqual((await call(server, routes.jobVariables, job.jobToken, { params: { id: job.jobId } })).status, 200);
    assert.notEqual((await call(server, routes.readState, job.jobToken, { params: { ws: workspaceId } })).status, 204);
    assert.notEqual(
      (
        await call(server, routes.lockState, job.jobToken, {
          params: { ws: workspaceId },
          body: lockInfo("again"),
          headers: { "content-type": "application/json" },
        })
      ).status,
      200,
    );
    const ws = (await server.api(routes.getWorkspace, { params: { ws: workspaceId } })).body;
    assert.equal(ws.stateLocked, false, "the lock was released");
    assert.equal(ws.currentRunId, null, "the workspace is free");
  }

  test("revoking the pool token ends its agents' jobs and their tokens", async () => {
    const held = await runningJobWithLock("sec", "revoked-ws");
    assert.equal((await server.api(routes.revokePoolToken, { params: { id: held.poolTokenId } })).status, 200);
    await assertTokenDead(held.job, held.workspaceId);
    const run = (await server.api(routes.getRun, { params: { id: held.runId } })).body;
    assert.equal(run.status, "errored");
    assert.match(run.errorMessage, /pool token .* was revoked/);
  });

  test("an explicit force-cancel ends the job on the server", async () => {
    const held = await runningJobWithLock("sec", "forced-ws");
    const polite = (await server.api(routes.cancelRun, { params: { id: held.runId } })).body;
    assert.equal(polite.status, "planning", "a plain cancel waits for the agent");
    const forced = await server.api(routes.cancelRun, { params: { id: held.runId }, query: { force: "true" } });
    assert.equal(forced.body.status, "canceled", JSON.stringify(forced.body));
    await assertTokenDead(held.job, held.workspaceId);
  });

  test("a cancel the agent ignores becomes a force-cancel after DROVER_FORCE_CANCEL_AFTER_SECONDS", async () => {
    // The sweeper waits one lease TTL after start before it ends anything: keep that short.
    const quick = await startTestServer({ DROVER_FORCE_CANCEL_AFTER_SECONDS: "1", DROVER_LEASE_TTL_SECONDS: "2" });
    try {
      await quick.api(routes.createPool, { body: { name: "q" } });
      const agent = await registerAgent(quick, "q", "deaf");
      const { runId } = await queueRun(quick, "q", "deaf-ws", good);
      const job = (await call(quick, routes.pollJob, agent.session, { query: { wait: 2000 } })).body.job;
      await call(quick, routes.startJob, job.jobToken, { params: { id: job.jobId }, body: { starter: "test" } });
      assert.equal((await quick.api(routes.cancelRun, { params: { id: runId } })).body.status, "planning");
      // The agent keeps heartbeating but never stops; the sweeper ends the job.
      const deadline = Date.now() + 60_000;
      let run: any;
      for (;;) {
        await call(quick, routes.jobHeartbeat, job.jobToken, { params: { id: job.jobId } });
        run = (await quick.api(routes.getRun, { params: { id: runId } })).body;
        if (run.status === "canceled" || Date.now() > deadline) break;
        await new Promise((r) => setTimeout(r, 100));
      }
      assert.equal(run.status, "canceled");
      assertError(
        await call(quick, routes.jobHeartbeat, job.jobToken, { params: { id: job.jobId } }),
        409,
        "job_finished",
      );
    } finally {
      await quick.stop();
    }
  });
});

describe("user tokens (9)", () => {
  test("create with a name and expiry, list without secrets, revoke: the revoked token stops at once", async () => {
    const created = await server.api(routes.createUserToken, {
      body: { description: "ci pipeline", expiresInDays: 30 },
    });
    assert.equal(created.status, 201, JSON.stringify(created.body));
    const token = created.body.token as string;
    assert.ok(created.body.expiresAt);
    assert.equal((await call(server, routes.listPools, token)).status, 200);
    const listed = await server.api(routes.listUserTokens);
    assert.ok(listed.body.items.some((t: any) => t.id === created.body.id && t.description === "ci pipeline"));
    assert.ok(!JSON.stringify(listed.body).includes(token), "no secret in the listing");
    assert.equal((await server.api(routes.revokeUserToken, { params: { id: created.body.id } })).status, 200);
    assertError(await call(server, routes.listPools, token), 401, "token_revoked");
    assertError(await server.api(routes.createUserToken, { body: { description: "" } }), 400, "bad_request");
    assertError(
      await server.api(routes.createUserToken, { body: { description: "x\u001b[8m" } }),
      400,
      "bad_request",
      /control characters/,
    );
  });

  test("an expired token is refused", async () => {
    const created = (
      await server.api(routes.createUserToken, { body: { description: "short-lived", expiresInDays: 1 } })
    ).body;
    const realNow = server.store.now;
    server.store.now = () => realNow() + 2 * 24 * 60 * 60 * 1000;
    try {
      assertError(await call(server, routes.listPools, created.token), 401, "unauthorized", /expired/);
    } finally {
      server.store.now = realNow;
    }
  });

  test("the last valid token cannot be revoked (nobody could log in again)", async () => {
    const own = await startTestServer();
    try {
      const ids = (await own.api(routes.listUserTokens)).body.items.map((t: any) => t.id);
      assert.equal(ids.length, 1);
      assertError(await own.api(routes.revokeUserToken, { params: { id: ids[0] } }), 409, "conflict", /last valid/);
    } finally {
      await own.stop();
    }
  });

  test("a new DROVER_ADMIN_TOKEN revokes the previous one; a weak one stops the server at start", async () => {
    const { mkdtempSync, rmSync } = await import("node:fs");
    const { tmpdir } = await import("node:os");
    const { join } = await import("node:path");
    const dir = mkdtempSync(join(tmpdir(), "drover-rotate-"));
    const first = "drv_u_first-admin.AAAAbbbbCCCCdddd1111222233334444";
    const second = "drv_u_second-admin.EEEEffffGGGGhhhh5555666677778888";
    try {
      const a = await startTestServer({ DROVER_DATA_DIR: dir, DROVER_ADMIN_TOKEN: first });
      assert.equal((await a.api(routes.listPools)).status, 200);
      await a.stop();
      const b = await startTestServer({ DROVER_DATA_DIR: dir, DROVER_ADMIN_TOKEN: second });
      try {
        assertError(await call(b, routes.listPools, first), 401, "token_revoked");
        assert.equal((await call(b, routes.listPools, second)).status, 200);
      } finally {
        await b.stop();
      }
      const { spawnDrover } = await import("../support/processes.js");
      const weak = spawnDrover(["server", "--port", "0", "--data-dir", dir], {
        ...process.env,
        DROVER_ADMIN_TOKEN: "admin123",
      });
      const exit = await weak.exited;
      assert.equal(exit.code, 2, weak.output());
      assert.match(weak.output(), /DROVER_ADMIN_TOKEN is too weak/);
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  });
});

describe("uploads per caller (1)", () => {
  test("a third concurrent large upload from one token is refused (429) before its body is read", async () => {
    const { request } = await import("node:http");
    await server.api(routes.createWorkspace, { body: { name: "uploads", pool: "sec" } });
    const statuses: number[] = [];
    let refused: () => void = () => undefined;
    const firstRefusal = new Promise<void>((r) => (refused = r));
    /** Sends the headers and 1 MB of a 50 MB upload, then waits: the upload stays in progress. */
    const stalled = () => {
      // node:http: the upload must stay in progress, which the typed client cannot hold.
      const req = request(server.url + routePath(routes.uploadConfiguration, { ws: "uploads" }), {
        method: routes.uploadConfiguration.method,
        headers: {
          authorization: `Bearer ${server.adminToken}`,
          "content-type": "application/gzip",
          "content-length": String(50 * 1024 * 1024),
        },
      });
      req.on("error", () => undefined);
      req.on("response", (res) => {
        statuses.push(res.statusCode ?? 0);
        res.resume();
        refused();
      });
      req.write(Buffer.alloc(1024 * 1024));
      return req;
    };
    const uploads = [stalled(), stalled(), stalled()];
    try {
      await firstRefusal;
      assert.deepEqual(statuses, [429], "exactly one of three concurrent uploads was refused; two are in progress");
      // Small requests of the same caller are not affected.
      assert.equal((await server.api(routes.getWorkspace, { params: { ws: "uploads" } })).status, 200);
    } finally {
      for (const req of uploads) req.destroy();
    }
    // Once they end, uploads are accepted again (a bad archive here, so 422).
    const deadline = Date.now() + 10_000;
    let after = 429;
    while (after === 429 && Date.now() < deadline) {
      after = (
        await server.api(routes.uploadConfiguration, { params: { ws: "uploads" }, body: Buffer.alloc(2 * 1024 * 1024) })
      ).status;
    }
    assert.equal(after, 422);
  });
});
