import assert from "node:assert/strict";
import { randomBytes } from "node:crypto";
import { describe, test } from "node:test";
import { DroverError } from "@drover/protocol";
import { store, type Db, type StoreContext } from "@drover/server";
import { rawTarGz } from "../support/archives.js";
import { backends } from "../support/databases.js";
import { useStoreDatabase } from "../support/store-database.js";
import { workspaceWithConfiguration } from "../support/store-fixtures.js";

// Decision 0010's store rules, on SQLite and on PostgreSQL.

async function rejectsWith(promise: Promise<unknown>, code: string): Promise<void> {
  await assert.rejects(promise, (err: unknown) => {
    assert.ok(err instanceof DroverError, String(err));
    assert.equal(err.code, code, err.message);
    return true;
  });
}

const archive = rawTarGz([{ path: "main.tf", content: "" }]);

for (const backend of backends) {
  describe(`security store rules: ${backend}`, () => {
    let db: Db;
    let ctx: StoreContext;
    let clock = 1_700_000_000_000;
    let n = 0;
    const unique = (p: string) => `${p}${++n}`;
    useStoreDatabase(
      backend,
      () => clock,
      (opened, context) => {
        db = opened;
        ctx = context;
      },
    );

    async function runningJob() {
      const pool = await store.createPool(ctx, unique("pool"));
      const tok = await store.createPoolToken(ctx, pool.id, "t", "http://drover.test");
      const { agent } = await store.registerAgent(ctx, {
        poolId: pool.id,
        poolTokenId: tok.id,
        name: unique("agent"),
        version: "t",
        driver: "local",
        capacity: 5,
      });
      const { ws, cv } = await workspaceWithConfiguration(ctx, unique("ws"), pool.id, archive);
      const run = await store.createRun(ctx, {
        workspace: ws.id,
        configurationVersionId: cv.id,
        planOnly: false,
        isDestroy: false,
        message: "",
      });
      const job = await store.claimNextJob(ctx, agent);
      assert.ok(job);
      const row = await store.authenticateJobToken(ctx, job.jobToken);
      await store.startJob(ctx, row, "starter");
      return { tok, ws, run, job };
    }

    test("job tokens: forged → unauthorized; genuine after the end → job_finished", async () => {
      const { job } = await runningJob();
      const forged = `drv_j_${job.jobId}.${job.attempt}.${randomBytes(32).toString("base64url")}`;
      await rejectsWith(store.authenticateJobToken(ctx, forged), "unauthorized");
      await store.finishJob(ctx, await store.authenticateJobToken(ctx, job.jobToken), "failed", "x");
      await rejectsWith(store.authenticateJobToken(ctx, job.jobToken), "job_finished");
      await rejectsWith(store.authenticateJobToken(ctx, forged), "unauthorized");
    });

    test("sessions: compared in constant time; a forged secret for a real agent, or a damaged stored hash, is unauthorized", async () => {
      const pool = await store.createPool(ctx, unique("pool"));
      const tok = await store.createPoolToken(ctx, pool.id, "t", "http://drover.test");
      const { agent, sessionToken } = await store.registerAgent(ctx, {
        poolId: pool.id,
        poolTokenId: tok.id,
        name: unique("agent"),
        version: "t",
        driver: "local",
        capacity: 1,
      });
      assert.equal((await store.authenticateSession(ctx, sessionToken)).id, agent.id);
      await rejectsWith(
        store.authenticateSession(ctx, `drv_s_${agent.id}.${randomBytes(32).toString("base64url")}`),
        "unauthorized",
      );
      // A stored hash of another length must be a refusal, not timingSafeEqual's RangeError (a 500).
      await db.kysely.updateTable("agents").set({ session_hash: "abcd" }).where("id", "=", agent.id).execute();
      await rejectsWith(store.authenticateSession(ctx, sessionToken), "unauthorized");
    });

    test("state: JSON only, same lineage, no lower serial; DELETE honours the lock and keeps versions", async () => {
      const { ws } = await runningJob();
      const body = (serial: number, lineage: string) => Buffer.from(JSON.stringify({ version: 4, serial, lineage }));
      await store.writeState(ctx, {
        workspaceId: ws.id,
        body: body(3, "L"),
        contentMd5: undefined,
        lockId: undefined,
        runId: null,
      });
      await rejectsWith(
        store.writeState(ctx, {
          workspaceId: ws.id,
          body: body(2, "L"),
          contentMd5: undefined,
          lockId: undefined,
          runId: null,
        }),
        "conflict",
      );
      await rejectsWith(
        store.writeState(ctx, {
          workspaceId: ws.id,
          body: body(4, "M"),
          contentMd5: undefined,
          lockId: undefined,
          runId: null,
        }),
        "conflict",
      );
      await rejectsWith(
        store.writeState(ctx, {
          workspaceId: ws.id,
          body: Buffer.from("nope"),
          contentMd5: undefined,
          lockId: undefined,
          runId: null,
        }),
        "invalid_json",
      );
      await store.lockState(ctx, ws.id, JSON.stringify({ ID: "a" }), null);
      await rejectsWith(store.deleteState(ctx, ws.id, undefined), "state_locked");
      await store.deleteState(ctx, ws.id, "a");
      assert.equal(await store.currentState(ctx, ws.id), null);
      const versions = await store.listStateVersions(ctx, ws.id);
      assert.equal(versions.length, 1);
      assert.ok(versions[0]?.deletedAt);
    });

    test("state without lineage or serial is refused and never becomes current; encrypted state does not reset the checks", async () => {
      const { ws } = await runningJob();
      const write = (doc: unknown) =>
        store.writeState(ctx, {
          workspaceId: ws.id,
          body: Buffer.from(JSON.stringify(doc)),
          contentMd5: undefined,
          lockId: undefined,
          runId: null,
        });
      await rejectsWith(write({ version: 4 }), "bad_request");
      await rejectsWith(write({ version: 4, serial: 1 }), "bad_request");
      await rejectsWith(write({ version: 4, lineage: "L" }), "bad_request");
      await rejectsWith(write({ version: 4, serial: -1, lineage: "L" }), "bad_request");
      await rejectsWith(write({ version: 4, serial: 1, lineage: "" }), "bad_request");
      assert.equal(await store.currentState(ctx, ws.id), null, "no refused body became the current state");
      await write({ version: 4, serial: 3, lineage: "L" });
      await rejectsWith(write({ version: 4 }), "bad_request");
      // OpenTofu's encrypted state carries neither field: stored, but the next write is still checked.
      await write({ encryption_version: "v0", meta: {}, encrypted_data: "AAAA" });
      await rejectsWith(write({ version: 4, serial: 0, lineage: "attacker-lineage" }), "conflict");
      await rejectsWith(write({ version: 4, serial: 2, lineage: "L" }), "conflict");
      await write({ version: 4, serial: 4, lineage: "L" });
      assert.deepEqual(
        (await store.listStateVersions(ctx, ws.id)).map((v) => v.lineage),
        ["L", null, "L"],
      );
    });

    test("outputs: only the current apply job may upload them; a plan job is refused and changes nothing", async () => {
      const { ws, run, job } = await runningJob();
      const planJob = await store.authenticateJobToken(ctx, job.jobToken);
      assert.equal(planJob.phase, "plan");
      await rejectsWith(
        store.saveOutputs(ctx, planJob, [{ name: "o", sensitive: false, type: "string", value: "from a plan" }]),
        "forbidden",
      );
      assert.deepEqual(await store.workspaceOutputs(ctx, ws.id), []);
      await store.finishJob(ctx, planJob, "succeeded", null, { add: 1, change: 0, destroy: 0, hasChanges: true });
      await store.confirmRun(ctx, run.id);
      const pool = (await store.getWorkspace(ctx, ws.id)).poolId;
      const tok = await store.createPoolToken(ctx, pool, "t", "http://drover.test");
      const { agent } = await store.registerAgent(ctx, {
        poolId: pool,
        poolTokenId: tok.id,
        name: unique("agent"),
        version: "t",
        driver: "local",
        capacity: 5,
      });
      const claimed = await store.claimNextJob(ctx, agent);
      assert.ok(claimed);
      const applyJob = await store.authenticateJobToken(ctx, claimed.jobToken);
      assert.equal(applyJob.phase, "apply");
      await store.startJob(ctx, applyJob, "starter");
      await store.saveOutputs(ctx, applyJob, [{ name: "o", sensitive: false, type: "string", value: "applied" }]);
      assert.deepEqual(await store.workspaceOutputs(ctx, ws.id), [
        { name: "o", sensitive: false, type: "string", value: "applied" },
      ]);
      await store.finishJob(ctx, applyJob, "succeeded", null);
      await rejectsWith(
        store.saveOutputs(ctx, applyJob, [{ name: "o", sensitive: false, type: "string", value: "late" }]),
        "job_finished",
      );
      assert.deepEqual(await store.workspaceOutputs(ctx, ws.id), [
        { name: "o", sensitive: false, type: "string", value: "applied" },
      ]);
    });

    test("force-cancel and pool token revocation end the job and release its lock", async () => {
      const a = await runningJob();
      await store.lockState(ctx, a.ws.id, JSON.stringify({ ID: "held" }), a.job.jobId);
      await store.cancelRun(ctx, a.run.id);
      clock += 5_000;
      assert.equal(await store.forceOverdueCancels(ctx, 10_000), 0, "not overdue yet");
      clock += 10_000;
      assert.equal(await store.forceOverdueCancels(ctx, 10_000), 1);
      assert.equal((await store.getRun(ctx, a.run.id)).status, "canceled");
      assert.equal((await store.getWorkspace(ctx, a.ws.id)).stateLocked, false);
      await rejectsWith(store.authenticateJobToken(ctx, a.job.jobToken), "job_finished");

      const b = await runningJob();
      assert.equal(await store.endJobsOfPoolToken(ctx, b.tok.id), 1);
      assert.equal((await store.getRun(ctx, b.run.id)).status, "errored");
    });

    test("user tokens: expiry, revocation, bootstrap rotation", async () => {
      const first = "drv_u_a.AAAAbbbbCCCCdddd1111222233334444";
      await store.ensureBootstrapToken(ctx, first);
      const t = await store.createUserToken(ctx, "ci", clock + 1000);
      await store.authenticateUserToken(ctx, t.token);
      clock += 2000;
      await rejectsWith(store.authenticateUserToken(ctx, t.token), "unauthorized");
      assert.deepEqual(await store.ensureBootstrapToken(ctx, "drv_u_b.EEEEffffGGGGhhhh5555666677778888"), {
        revoked: 1,
      });
      await rejectsWith(store.authenticateUserToken(ctx, first), "token_revoked");
      await rejectsWith(store.ensureBootstrapToken(ctx, first), "bad_request");
    });
  });
}
