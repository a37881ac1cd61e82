import assert from "node:assert/strict";
import { createHash, randomBytes } from "node:crypto";
import { mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { after, before, describe, test } from "node:test";
import { DroverError, newPoolToken, planSummarySchema, type Agent, type JobAssignment } from "@drover/protocol";
import { localEventBus, openDatabase, store, type Db, type StoreContext } from "@drover/server";
import { sql } from "kysely";
import { backends, createTestDatabase, type TestDatabase } from "../support/databases.js";
import { rawTarGz } from "../support/archives.js";
import { loggingStatements } from "../support/statement-log.js";
import { lookUntil, within } from "../support/poll.js";
import { workspaceWithConfiguration } from "../support/store-fixtures.js";

/** Expects a DroverError with this code. */
async function rejectsWith(promise: Promise<unknown>, code: string): Promise<DroverError> {
  try {
    await promise;
  } catch (err) {
    assert.ok(err instanceof DroverError, `expected DroverError ${code}, got ${String(err)}`);
    assert.equal(err.code, code, err.message);
    return err;
  }
  assert.fail(`expected ${code}, but it succeeded`);
}

const archive = rawTarGz([{ path: "main.tf", content: 'resource "terraform_data" "x" {}\n' }]);

for (const backend of backends) {
  describe(`store conformance: ${backend}`, () => {
    let database: TestDatabase;
    let db: Db;
    let ctx: StoreContext;
    let clock = 1_700_000_000_000;
    let counter = 0;
    const unique = (p: string) => `${p}${++counter}`;

    before(async () => {
      database = await createTestDatabase(backend);
      db = await openDatabase(database.location);
      ctx = {
        db: db.kysely,
        dialect: db.dialect,
        events: localEventBus(),
        now: () => clock,
        settings: { leaseTtlMs: 30_000, agentTtlMs: 60_000, heartbeatIntervalMs: 10_000 },
      };
    });
    after(async () => {
      await db.close();
      await database.drop();
    });

    /** A pool with a registered agent and a workspace with one uploaded configuration. */
    async function fixture(opts: { autoApply?: boolean } = {}) {
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
      const { ws, cv } = await workspaceWithConfiguration(ctx, unique("ws"), pool.id, archive, opts.autoApply ?? false);
      return { pool, tok, agent, ws, cv };
    }
    const newRun = (ws: string, cv: string, extra: Partial<store.CreateRunInput> = {}) =>
      store.createRun(ctx, {
        workspace: ws,
        configurationVersionId: cv,
        planOnly: false,
        isDestroy: false,
        message: "",
        ...extra,
      });
    const claim = async (agent: Agent): Promise<JobAssignment> => {
      const job = await store.claimNextJob(ctx, agent);
      assert.ok(job, "expected a job to claim");
      return job;
    };
    const jobRow = (a: JobAssignment) => store.authenticateJobToken(ctx, a.jobToken);

    test("pools and workspaces: concurrent creates of one name give one winner and already_exists, never a raw error", async () => {
      const name = unique("race");
      const pools = await Promise.allSettled(Array.from({ length: 12 }, () => store.createPool(ctx, name)));
      assert.equal(pools.filter((r) => r.status === "fulfilled").length, 1);
      for (const r of pools)
        if (r.status === "rejected")
          assert.ok(r.reason instanceof DroverError && r.reason.code === "already_exists", String(r.reason));
      const wsName = unique("race-ws");
      const workspaces = await Promise.allSettled(
        Array.from({ length: 12 }, () =>
          store.createWorkspace(ctx, {
            name: wsName,
            pool: name,
            engine: "terraform",
            engineVersion: null,
            workingDirectory: "",
            autoApply: false,
          }),
        ),
      );
      assert.equal(workspaces.filter((r) => r.status === "fulfilled").length, 1);
      for (const r of workspaces)
        if (r.status === "rejected")
          assert.ok(r.reason instanceof DroverError && r.reason.code === "already_exists", String(r.reason));
    });

    test("pools: names are unique; tokens authenticate until revoked", async () => {
      const pool = await store.createPool(ctx, unique("p"));
      await rejectsWith(store.createPool(ctx, pool.name), "already_exists");
      const created = await store.createPoolToken(ctx, pool.name, "ci", "http://drover.test");
      assert.match(created.token, /^drv_p_[A-Za-z0-9_-]+\.[A-Za-z0-9_-]+$/);
      const auth = await store.authenticatePoolToken(ctx, created.token);
      assert.equal(auth.pool.id, pool.id);
      const listed = await store.listPoolTokens(ctx, pool.id);
      assert.equal(listed.length, 1);
      assert.ok(!("token" in listed[0]!), "a listed token never shows its secret");
      await store.revokePoolToken(ctx, created.id);
      await rejectsWith(store.authenticatePoolToken(ctx, created.token), "token_revoked");
      await rejectsWith(
        store.authenticatePoolToken(ctx, newPoolToken({ url: "http://x", pool: pool.id })),
        "unauthorized",
      );
    });

    test("agents: a revoked pool token ends its agents' sessions; a namesake supersedes", async () => {
      const pool = await store.createPool(ctx, unique("p"));
      const tok = await store.createPoolToken(ctx, pool.id, "", "http://drover.test");
      const first = await store.registerAgent(ctx, {
        poolId: pool.id,
        poolTokenId: tok.id,
        name: "same",
        version: "1",
        driver: "local",
        capacity: 1,
      });
      assert.equal((await store.authenticateSession(ctx, first.sessionToken)).status, "idle");
      const second = await store.registerAgent(ctx, {
        poolId: pool.id,
        poolTokenId: tok.id,
        name: "same",
        version: "1",
        driver: "local",
        capacity: 1,
      });
      await rejectsWith(store.authenticateSession(ctx, first.sessionToken), "agent_lost");
      await store.authenticateSession(ctx, second.sessionToken);
      await store.revokePoolToken(ctx, tok.id);
      await rejectsWith(store.authenticateSession(ctx, second.sessionToken), "token_revoked");
    });

    test("agents: concurrent session checks share one statement, and each still gets its own answer", async () => {
      const pool = await store.createPool(ctx, unique("p"));
      const tok = await store.createPoolToken(ctx, pool.id, "", "http://drover.test");
      const sessions = await Promise.all(
        Array.from({ length: 30 }, (_, i) =>
          store.registerAgent(ctx, {
            poolId: pool.id,
            poolTokenId: tok.id,
            name: unique(`fleet${i}-`),
            version: "1",
            driver: "local",
            capacity: 1,
          }),
        ),
      );
      let selects = 0;
      const counting: StoreContext = {
        ...ctx,
        db: ctx.db.withPlugin({
          transformQuery: (args) => {
            if (args.node.kind === "SelectQueryNode") selects++;
            return args.node;
          },
          transformResult: async (args) => args.result,
        }),
      };
      // The same secret with its last character changed: the agent id parses, the hash does not match.
      const forged = sessions[0]!.sessionToken.replace(/.$/, (c) => (c === "a" ? "b" : "a"));
      const results = await Promise.allSettled(
        [...sessions.flatMap((s) => [s.sessionToken, s.sessionToken]), forged].map((t) =>
          store.authenticateSession(counting, t),
        ),
      );
      assert.equal(selects, 1, "60 concurrent session checks issue one statement");
      results
        .slice(0, 60)
        .forEach((r, i) =>
          assert.ok(
            r.status === "fulfilled" && r.value.id === sessions[Math.floor(i / 2)]!.agent.id,
            `session ${i} answered with its own agent`,
          ),
        );
      const last = results[60]!;
      assert.ok(
        last.status === "rejected" && (last.reason as DroverError).code === "unauthorized",
        "a wrong secret for a real agent id is refused",
      );
    });

    test("agents: silent agents are declared offline", async () => {
      const { agent } = await fixture();
      clock += 61_000;
      assert.ok((await store.markSilentAgentsLost(ctx)) >= 1);
      const listed = (await store.listAgents(ctx, agent.poolId)).find((a) => a.id === agent.id);
      assert.equal(listed?.status, "offline");
    });

    test("agents: coalesced heartbeats keep agents online, record job counts, and never revive an offline agent", async () => {
      const { pool, tok } = await fixture();
      const register = (name: string) =>
        store.registerAgent(ctx, {
          poolId: pool.id,
          poolTokenId: tok.id,
          name,
          version: "t",
          driver: "local",
          capacity: 2,
        });
      const busy = (await register(unique("busy"))).agent;
      const polling = (await register(unique("polling"))).agent;
      const gone = (await register(unique("gone"))).agent;
      const presence = new store.AgentPresence(ctx);
      const coalescing = { ...ctx, presence };
      clock += 50_000;
      await store.agentHeartbeat(coalescing, busy.id, 2);
      await store.touchAgent(coalescing, polling.id);
      await store.agentHeartbeat(coalescing, gone.id, 1);
      await store.deregisterAgent(ctx, gone.id);
      clock += 20_000;
      // The sweep writes pending sightings first: both live agents were seen 20 s ago, within the TTL.
      await store.markSilentAgentsLost(coalescing);
      const listed = new Map((await store.listAgents(ctx, pool.id)).map((a) => [a.id, a]));
      assert.equal(listed.get(busy.id)?.status, "busy");
      assert.equal(listed.get(busy.id)?.runningJobs, 2);
      assert.equal(listed.get(polling.id)?.status, "idle");
      assert.equal(listed.get(gone.id)?.status, "offline");
      await presence.stop();
    });

    test("runs: plan → planned → confirm → apply → applied; the next run waits its turn", async () => {
      const { agent, ws, cv } = await fixture();
      const run1 = await newRun(ws.id, cv.id);
      const run2 = await newRun(ws.id, cv.id);
      assert.equal(run1.status, "queued");
      assert.equal(run2.status, "pending");
      assert.equal((await store.getWorkspace(ctx, ws.id)).currentRunId, run1.id);

      const plan = await claim(agent);
      assert.equal(plan.runId, run1.id);
      assert.equal(plan.phase, "plan");
      assert.equal(await store.claimNextJob(ctx, agent), null, "run2 must not be queued while run1 is active");
      assert.equal(await store.startJob(ctx, await jobRow(plan), "starter"), "planning");
      await store.savePlanJson(
        ctx,
        await jobRow(plan),
        Buffer.from(JSON.stringify({ resource_changes: [{ change: { actions: ["create"] } }] })),
      );
      await store.finishJob(ctx, await jobRow(plan), "succeeded", null);
      const planned = await store.getRun(ctx, run1.id);
      assert.equal(planned.status, "planned");
      assert.deepEqual(planned.planSummary, { add: 1, change: 0, destroy: 0, hasChanges: true });
      await rejectsWith(jobRow(plan), "job_finished");

      await rejectsWith(store.discardRun(ctx, run2.id), "invalid_transition");
      assert.equal((await store.confirmRun(ctx, run1.id)).status, "confirmed");
      await rejectsWith(store.confirmRun(ctx, run1.id), "invalid_transition");
      const apply = await claim(agent);
      assert.equal(apply.phase, "apply");
      assert.equal(await store.startJob(ctx, await jobRow(apply), "starter"), "applying");
      await store.finishJob(ctx, await jobRow(apply), "succeeded", null);
      assert.equal((await store.getRun(ctx, run1.id)).status, "applied");
      assert.equal((await store.getRun(ctx, run2.id)).status, "queued");
      assert.equal((await claim(agent)).runId, run2.id);
    });

    test("a plan-only run goes beside the workspace's queue: queued at once while a run awaits confirmation", async () => {
      const { agent, ws, cv } = await fixture();
      const held = await newRun(ws.id, cv.id);
      const plan = await claim(agent);
      await store.startJob(ctx, await jobRow(plan), "starter");
      await store.savePlanJson(
        ctx,
        await jobRow(plan),
        Buffer.from(JSON.stringify({ resource_changes: [{ change: { actions: ["create"] } }] })),
      );
      await store.finishJob(ctx, await jobRow(plan), "succeeded", null);
      assert.equal((await store.getRun(ctx, held.id)).status, "planned");
      const speculative = await newRun(ws.id, cv.id, { planOnly: true });
      const behind = await newRun(ws.id, cv.id);
      assert.equal(speculative.status, "queued", "a plan changes no state: it waits for no run");
      assert.equal(behind.status, "pending", "a run that may apply waits its turn");
      assert.equal((await store.getWorkspace(ctx, ws.id)).currentRunId, held.id);
      const job = await claim(agent);
      assert.deepEqual([job.runId, job.phase, job.planOnly], [speculative.id, "plan", true]);
      await store.startJob(ctx, await jobRow(job), "starter");
      await store.finishJob(ctx, await jobRow(job), "succeeded", null);
      assert.equal((await store.getRun(ctx, speculative.id)).status, "planned_and_finished");
      assert.equal(
        (await store.getWorkspace(ctx, ws.id)).currentRunId,
        held.id,
        "its end frees nothing it did not hold",
      );
      assert.equal((await store.discardRun(ctx, held.id)).status, "discarded");
      assert.equal((await store.getRun(ctx, behind.id)).status, "queued", "the discard let the next run in");

      // A workspace is not deleted under a run of it, even one beside its queue.
      const other = await fixture();
      const alone = await newRun(other.ws.id, other.cv.id, { planOnly: true });
      assert.equal((await store.getWorkspace(ctx, other.ws.id)).currentRunId, null);
      const refused = await rejectsWith(store.deleteWorkspace(ctx, other.ws.id), "conflict");
      assert.match(refused.message, new RegExp(`active run \\(${alone.id}\\)`));
    });

    test("jobs: a start names its starter; the same one again is a retry, any other is refused", async () => {
      const { agent, ws, cv } = await fixture();
      const run = await newRun(ws.id, cv.id, { planOnly: true });
      const job = await claim(agent);
      assert.equal(await store.startJob(ctx, await jobRow(job), "pod-a"), "planning");
      assert.equal(await store.startJob(ctx, await jobRow(job), "pod-a"), "planning", "a retried start answers again");
      const refused = await rejectsWith(store.startJob(ctx, await jobRow(job), "pod-b"), "job_already_started");
      assert.equal(refused.status, 409);
      assert.match(refused.message, /already started by another worker/);
      const row = await db.kysely
        .selectFrom("jobs")
        .select(["status", "started_by"])
        .where("id", "=", job.jobId)
        .executeTakeFirstOrThrow();
      assert.deepEqual(row, { status: "running", started_by: "pod-a" });
      await store.finishJob(ctx, await jobRow(job), "succeeded", null);
      assert.equal((await store.getRun(ctx, run.id)).status, "planned_and_finished");
    });

    test("jobs: a job running since before starters were recorded is taken by the first starter that calls again", async () => {
      const { agent, ws, cv } = await fixture();
      await newRun(ws.id, cv.id, { planOnly: true });
      const job = await claim(agent);
      await store.startJob(ctx, await jobRow(job), "pod-a");
      await db.kysely.updateTable("jobs").set({ started_by: null }).where("id", "=", job.jobId).execute();
      assert.equal(await store.startJob(ctx, await jobRow(job), "pod-b"), "planning");
      await rejectsWith(store.startJob(ctx, await jobRow(job), "pod-c"), "job_already_started");
      const row = await db.kysely
        .selectFrom("jobs")
        .select("started_by")
        .where("id", "=", job.jobId)
        .executeTakeFirstOrThrow();
      assert.equal(row.started_by, "pod-b");
    });

    test("jobs: of two concurrent starts by different starters exactly one wins", async () => {
      const { agent, ws, cv } = await fixture();
      await newRun(ws.id, cv.id, { planOnly: true });
      const job = await claim(agent);
      const row = await jobRow(job);
      const results = await Promise.allSettled([store.startJob(ctx, row, "pod-a"), store.startJob(ctx, row, "pod-b")]);
      const won = results.filter((r) => r.status === "fulfilled");
      const lost = results.flatMap((r) => (r.status === "rejected" ? [r.reason as unknown] : []));
      assert.equal(won.length, 1, `exactly one start wins: ${JSON.stringify(results.map((r) => r.status))}`);
      assert.equal(lost.length, 1);
      assert.ok(
        lost[0] instanceof DroverError && lost[0].code === "job_already_started",
        `the loser is refused with job_already_started, not ${String(lost[0])}`,
      );
      const winner = results[0]!.status === "fulfilled" ? "pod-a" : "pod-b";
      const stored = await db.kysely
        .selectFrom("jobs")
        .select("started_by")
        .where("id", "=", job.jobId)
        .executeTakeFirstOrThrow();
      assert.equal(stored.started_by, winner);
    });

    test("workspaces: a runner image is stored, changed, cleared, and carried in each job assignment", async () => {
      const { agent, ws, cv } = await fixture();
      assert.equal(ws.runnerImage, null);
      await store.updateWorkspace(ctx, ws.id, { runnerImage: "registry.example.com/runners/tf:1.9" });
      assert.equal((await store.getWorkspace(ctx, ws.name)).runnerImage, "registry.example.com/runners/tf:1.9");
      const run = await newRun(ws.id, cv.id, { planOnly: true });
      const plan = await claim(agent);
      assert.equal(plan.runId, run.id);
      assert.equal(plan.workspace.runnerImage, "registry.example.com/runners/tf:1.9");
      await store.startJob(ctx, await jobRow(plan), "starter");
      await store.finishJob(ctx, await jobRow(plan), "succeeded", null);
      await store.updateWorkspace(ctx, ws.id, { runnerImage: null });
      assert.equal((await store.getWorkspace(ctx, ws.id)).runnerImage, null);
      await newRun(ws.id, cv.id, { planOnly: true });
      assert.equal((await claim(agent)).workspace.runnerImage, null);
      const other = await store.createWorkspace(ctx, {
        name: unique("ws"),
        pool: ws.poolId,
        engine: "terraform",
        engineVersion: null,
        workingDirectory: "",
        runnerImage: "ghcr.io/acme/tf:1",
        autoApply: false,
      });
      assert.equal((await store.getWorkspace(ctx, other.id)).runnerImage, "ghcr.io/acme/tf:1");
    });

    test("runs: plan-only and no-change plans finish; auto-apply queues the apply", async () => {
      const { agent, ws, cv } = await fixture({ autoApply: true });
      const planOnly = await newRun(ws.id, cv.id, { planOnly: true });
      let job = await claim(agent);
      await store.startJob(ctx, await jobRow(job), "starter");
      await store.savePlanJson(
        ctx,
        await jobRow(job),
        Buffer.from(JSON.stringify({ resource_changes: [{ change: { actions: ["create"] } }] })),
      );
      await store.finishJob(ctx, await jobRow(job), "succeeded", null);
      assert.equal((await store.getRun(ctx, planOnly.id)).status, "planned_and_finished");

      const noChange = await newRun(ws.id, cv.id);
      job = await claim(agent);
      await store.startJob(ctx, await jobRow(job), "starter");
      await store.savePlanJson(
        ctx,
        await jobRow(job),
        Buffer.from(JSON.stringify({ resource_changes: [{ change: { actions: ["no-op"] } }] })),
      );
      await store.finishJob(ctx, await jobRow(job), "succeeded", null);
      assert.equal((await store.getRun(ctx, noChange.id)).status, "planned_and_finished");

      const auto = await newRun(ws.id, cv.id);
      job = await claim(agent);
      await store.startJob(ctx, await jobRow(job), "starter");
      await store.finishJob(ctx, await jobRow(job), "succeeded", null);
      assert.equal((await store.getRun(ctx, auto.id)).status, "confirmed");
      assert.equal((await claim(agent)).phase, "apply");
    });

    /** The stored plan JSON of a run, parsed. */
    const storedJson = async (runId: string): Promise<unknown> => {
      const chunks: Buffer[] = [];
      for await (const c of (await store.readPlanJson(ctx, runId)).open()) chunks.push(Buffer.from(c as Buffer));
      return JSON.parse(Buffer.concat(chunks).toString("utf8"));
    };

    test("plan summary: terraform's verdict decides with the plan job's JSON, readable as soon as the plan job ends; an apply job uploads none", async () => {
      const create = JSON.stringify({
        resource_changes: [{ change: { actions: ["create"] } }, { change: { actions: ["create"] } }],
      });
      const { agent, ws, cv } = await fixture({ autoApply: true });
      const auto = await newRun(ws.id, cv.id);
      const plan = await claim(agent);
      assert.ok(!("planJson" in plan), "the assignment does not say who renders the plan JSON");
      await store.startJob(ctx, await jobRow(plan), "starter");
      await store.savePlanJson(ctx, await jobRow(plan), Buffer.from(create));
      await store.finishJob(ctx, await jobRow(plan), "succeeded", null, {
        add: 2,
        change: 0,
        destroy: 0,
        hasChanges: true,
      });
      assert.equal((await store.getRun(ctx, auto.id)).status, "confirmed");
      assert.deepEqual((await store.getRun(ctx, auto.id)).planSummary, {
        add: 2,
        change: 0,
        destroy: 0,
        hasChanges: true,
      });
      // An auto-apply run has its plan JSON before its apply job is even claimed.
      assert.deepEqual(await storedJson(auto.id), JSON.parse(create));
      const apply = await claim(agent);
      assert.equal(apply.phase, "apply");
      assert.ok(!("planJson" in apply));
      await store.startJob(ctx, await jobRow(apply), "starter");
      await rejectsWith(
        store.savePlanJson(ctx, await jobRow(apply), Buffer.from(JSON.stringify({ resource_changes: [] }))),
        "forbidden",
      );
      await rejectsWith(
        store.finishJob(ctx, await jobRow(apply), "succeeded", null, {
          add: 1,
          change: 0,
          destroy: 0,
          hasChanges: true,
        }),
        "bad_request",
      );
      await store.finishJob(ctx, await jobRow(apply), "succeeded", null);
      assert.equal((await store.getRun(ctx, auto.id)).status, "applied");
      assert.deepEqual(await storedJson(auto.id), JSON.parse(create), "the plan job's JSON stands");

      // No changes by terraform's verdict: planned_and_finished, as the JSON says too.
      const none = await newRun(ws.id, cv.id);
      let job = await claim(agent);
      await store.startJob(ctx, await jobRow(job), "starter");
      await store.savePlanJson(ctx, await jobRow(job), Buffer.from(JSON.stringify({ resource_changes: [] })));
      await store.finishJob(ctx, await jobRow(job), "succeeded", null, {
        add: 0,
        change: 0,
        destroy: 0,
        hasChanges: false,
      });
      assert.equal((await store.getRun(ctx, none.id)).status, "planned_and_finished");
      // A JSON that shows no change while terraform says there is one (a move older JSON misses): applied.
      const moved = await newRun(ws.id, cv.id);
      job = await claim(agent);
      await store.startJob(ctx, await jobRow(job), "starter");
      await store.savePlanJson(
        ctx,
        await jobRow(job),
        Buffer.from(JSON.stringify({ resource_changes: [{ change: { actions: ["no-op"] } }] })),
      );
      await store.finishJob(ctx, await jobRow(job), "succeeded", null, {
        add: 0,
        change: 0,
        destroy: 0,
        hasChanges: true,
      });
      assert.equal((await store.getRun(ctx, moved.id)).status, "confirmed");
    });

    test("plan JSON: a reclaimed plan job stores its own, and the earlier attempt cannot store one", async () => {
      const { agent, ws, cv } = await fixture({ autoApply: true });
      const run = await newRun(ws.id, cv.id);
      const first = await claim(agent);
      const firstRow = await jobRow(first);
      // Attempt 1 uploaded a JSON without changes, then lost its lease before its start was
      // recorded (a lost start answer): the job is queued again.
      await store.savePlanJson(ctx, firstRow, Buffer.from(JSON.stringify({ resource_changes: [] })));
      clock += 60_000;
      await store.expireLeases(ctx);
      const second = await claim(agent);
      assert.equal(second.attempt, first.attempt + 1);
      // Attempt 1's upload that passed its token check before the reclaim is refused inside the write.
      await rejectsWith(
        store.savePlanJson(ctx, firstRow, Buffer.from(JSON.stringify({ resource_changes: [] }))),
        "stale_attempt",
      );
      await store.startJob(ctx, await jobRow(second), "starter");
      const create = { resource_changes: [{ change: { actions: ["create"] } }, { change: { actions: ["create"] } }] };
      await store.savePlanJson(ctx, await jobRow(second), Buffer.from(JSON.stringify(create)));
      await store.finishJob(ctx, await jobRow(second), "succeeded", null, {
        add: 2,
        change: 0,
        destroy: 0,
        hasChanges: true,
      });
      assert.deepEqual((await store.getRun(ctx, run.id)).planSummary, {
        add: 2,
        change: 0,
        destroy: 0,
        hasChanges: true,
      });
      assert.deepEqual(await storedJson(run.id), create, "the JSON of the plan that is applied");
    });

    test("plan JSON: two concurrent identical uploads by the plan job both get the answer, one whole JSON is stored", async () => {
      const create = JSON.stringify({ resource_changes: [{ change: { actions: ["create"] } }] });
      const { agent, ws, cv } = await fixture({ autoApply: true });
      const run = await newRun(ws.id, cv.id);
      const plan = await claim(agent);
      await store.startJob(ctx, await jobRow(plan), "starter");
      const row = await jobRow(plan);
      const results = await Promise.allSettled([
        store.savePlanJson(ctx, row, Buffer.from(create)),
        store.savePlanJson(ctx, row, Buffer.from(create)),
      ]);
      for (const r of results) assert.equal(r.status, "fulfilled", r.status === "rejected" ? String(r.reason) : "");
      assert.deepEqual(await storedJson(run.id), JSON.parse(create));
    });

    test("a saved plan's plan job keeps the providers' schemas: stored as uploaded; refused from an apply job or when not a JSON object", async () => {
      const zeroSummary = { add: 0, change: 0, destroy: 0, hasChanges: false };
      const { agent, ws, cv } = await fixture();
      const plain = await newRun(ws.id, cv.id, { planOnly: true });
      const plainJob = await claim(agent);
      assert.equal(plainJob.providerSchemas, false, "only a saved plan's job runs `providers schema`");
      await store.startJob(ctx, await jobRow(plainJob), "starter");
      await store.finishJob(ctx, await jobRow(plainJob), "succeeded", null, zeroSummary);
      await rejectsWith(store.readProviderSchemas(ctx, plain.id), "not_found");

      const saved = await newRun(ws.id, cv.id, { savePlan: true });
      const plan = await claim(agent);
      assert.equal(plan.runId, saved.id);
      assert.equal(plan.providerSchemas, true);
      await store.startJob(ctx, await jobRow(plan), "starter");
      await rejectsWith(store.saveProviderSchemas(ctx, await jobRow(plan), Buffer.from("<html>")), "invalid_json");
      const schemas = JSON.stringify({ "registry.terraform.io/x/p": { resource_schemas: { p_thing: {} } } });
      await store.saveProviderSchemas(ctx, await jobRow(plan), Buffer.from(schemas));
      const planned = { format_version: "1.2", resource_changes: [{ address: "p_thing.a" }] };
      await store.savePlanJson(ctx, await jobRow(plan), Buffer.from(JSON.stringify(planned)));
      const read = async () => {
        const chunks: Buffer[] = [];
        for await (const c of (await store.readProviderSchemas(ctx, saved.id)).open())
          chunks.push(Buffer.from(c as Buffer));
        return Buffer.concat(chunks).toString("utf8");
      };
      assert.equal(await read(), schemas);
      // For terraform's human `show`: the plan with the schemas beside its changes, one JSON document.
      const redacted = await store.readRedactedPlan(ctx, saved.id);
      const pieces: Buffer[] = [];
      for await (const c of redacted.open()) pieces.push(Buffer.from(c as Buffer));
      const joined = Buffer.concat(pieces);
      assert.equal(joined.length, redacted.size);
      assert.deepEqual(JSON.parse(joined.toString("utf8")), {
        ...planned,
        provider_format_version: "1.0",
        provider_schemas: JSON.parse(schemas),
      });
      await store.finishJob(ctx, await jobRow(plan), "succeeded", null, { ...zeroSummary, add: 1, hasChanges: true });
      assert.equal((await store.getRun(ctx, saved.id)).status, "planned");
      // A plan JSON with nothing in it still joins into one document.
      // (in a workspace of its own: the saved plan above holds its workspace until it is applied)
      const other = await fixture();
      const empty = await newRun(other.ws.id, other.cv.id, { savePlan: true, planOnly: true });
      const emptyPlan = await claim(other.agent);
      assert.equal(emptyPlan.runId, empty.id);
      await store.startJob(ctx, await jobRow(emptyPlan), "starter");
      await store.savePlanJson(ctx, await jobRow(emptyPlan), Buffer.from("{ }"));
      await store.saveProviderSchemas(ctx, await jobRow(emptyPlan), Buffer.from("{}"));
      const emptyJoined: Buffer[] = [];
      for await (const c of (await store.readRedactedPlan(ctx, empty.id)).open())
        emptyJoined.push(Buffer.from(c as Buffer));
      assert.deepEqual(JSON.parse(Buffer.concat(emptyJoined).toString("utf8")), {
        provider_format_version: "1.0",
        provider_schemas: {},
      });
      await store.finishJob(ctx, await jobRow(emptyPlan), "succeeded", null, zeroSummary);

      await store.confirmRun(ctx, saved.id);
      const apply = await claim(agent);
      assert.equal(apply.phase, "apply");
      await rejectsWith(store.saveProviderSchemas(ctx, await jobRow(apply), Buffer.from("{}")), "forbidden");
      assert.equal(await read(), schemas, "the plan job's schemas stand");
    });

    test("plan summary: counts above zero mean changes whatever the flag says; counts are bounded", async () => {
      const { agent, ws, cv } = await fixture({ autoApply: true });
      const run = await newRun(ws.id, cv.id);
      const plan = await claim(agent);
      await store.startJob(ctx, await jobRow(plan), "starter");
      await store.finishJob(ctx, await jobRow(plan), "succeeded", null, {
        add: 3,
        change: 0,
        destroy: 0,
        hasChanges: false,
      });
      const shown = await store.getRun(ctx, run.id);
      assert.equal(shown.status, "confirmed", "a plan with 3 to add is applied, not finished as 'no changes'");
      assert.deepEqual(shown.planSummary, { add: 3, change: 0, destroy: 0, hasChanges: true });
      assert.equal(
        planSummarySchema.safeParse({ add: 2 ** 31, change: 0, destroy: 0, hasChanges: true }).success,
        false,
      );
    });

    test("runs: a failed plan errors the run with its message and frees the workspace", async () => {
      const { agent, ws, cv } = await fixture();
      const run = await newRun(ws.id, cv.id);
      const job = await claim(agent);
      await store.startJob(ctx, await jobRow(job), "starter");
      await store.finishJob(ctx, await jobRow(job), "failed", "Error: Unsupported argument");
      const ended = await store.getRun(ctx, run.id);
      assert.equal(ended.status, "errored");
      assert.equal(ended.errorMessage, "Error: Unsupported argument");
      assert.equal((await store.getWorkspace(ctx, ws.id)).currentRunId, null);
    });

    test("cancel: queued and claimed-but-unstarted runs end at once; a started one is asked", async () => {
      const { agent, ws, cv } = await fixture();
      const queued = await newRun(ws.id, cv.id);
      const pending = await newRun(ws.id, cv.id);
      assert.equal((await store.cancelRun(ctx, pending.id)).status, "canceled");
      assert.equal((await store.cancelRun(ctx, queued.id)).status, "canceled");
      await rejectsWith(store.cancelRun(ctx, queued.id), "invalid_transition");
      assert.equal(await store.claimNextJob(ctx, agent), null);

      const claimed = await newRun(ws.id, cv.id);
      const job = await claim(agent);
      const row = await jobRow(job);
      assert.equal((await store.cancelRun(ctx, claimed.id)).status, "canceled");
      await rejectsWith(store.startJob(ctx, row, "starter"), "job_finished");

      const running = await newRun(ws.id, cv.id);
      const job2 = await claim(agent);
      await store.startJob(ctx, await jobRow(job2), "starter");
      const asked = await store.cancelRun(ctx, running.id);
      assert.equal(asked.status, "planning");
      assert.equal(asked.cancelRequested, true);
      assert.equal((await store.heartbeatJob(ctx, await jobRow(job2), 0)).cancelRequested, true);
      await store.finishJob(ctx, await jobRow(job2), "canceled", "interrupted");
      assert.equal((await store.getRun(ctx, running.id)).status, "canceled");
    });

    test("heartbeat with wait returns as soon as a cancel is requested", async () => {
      const { agent, ws, cv } = await fixture();
      const run = await newRun(ws.id, cv.id);
      const job = await claim(agent);
      await store.startJob(ctx, await jobRow(job), "starter");
      const waiting = store.heartbeatJob(ctx, await jobRow(job), 10_000);
      await new Promise((r) => setTimeout(r, 50));
      const started = Date.now();
      await store.cancelRun(ctx, run.id);
      const res = await waiting;
      assert.equal(res.cancelRequested, true);
      assert.ok(Date.now() - started < 2_000, "the held heartbeat answered promptly");
    });

    test("leases: a heartbeat that renews a lease while the sweep holds it listed keeps its job (PostgreSQL)", async (t) => {
      if (backend !== "postgres") return t.skip("SQLite runs one transaction at a time");
      const { agent, ws, cv } = await fixture();
      await newRun(ws.id, cv.id);
      const job = await claim(agent);
      await store.startJob(ctx, await jobRow(job), "starter");
      clock += 31_000;
      // The renewal is in flight (its transaction holds the row) when the sweep lists the job.
      let release: () => void = () => undefined;
      const released = new Promise<void>((r) => (release = r));
      let held: () => void = () => undefined;
      const holding = new Promise<void>((r) => (held = r));
      const renewal = ctx.db.transaction().execute(async (trx) => {
        await trx
          .updateTable("jobs")
          .set({ lease_expires_at: clock + ctx.settings.leaseTtlMs })
          .where("id", "=", job.jobId)
          .execute();
        held();
        await released;
      });
      await holding;
      const sweep = store.expireLeases(ctx);
      try {
        assert.equal(await within(sweep, 300), null, "the sweep waits for the renewal");
      } finally {
        release();
        await renewal;
      }
      await sweep;
      assert.equal((await store.getJob(ctx, job.jobId)).status, "running", "not lost: its lease was renewed");
    });

    test("leases: an unstarted job is requeued and its old token fenced; a started one ends 'agent lost'", async () => {
      const { agent, ws, cv } = await fixture();
      const run = await newRun(ws.id, cv.id);
      const first = await claim(agent);
      clock += 31_000;
      assert.ok((await store.expireLeases(ctx)).requeued >= 1);
      assert.equal((await store.getJob(ctx, first.jobId)).status, "queued");
      const second = await claim(agent);
      assert.equal(second.jobId, first.jobId);
      assert.equal(second.attempt, first.attempt + 1);
      await rejectsWith(store.authenticateJobToken(ctx, first.jobToken), "stale_attempt");

      await store.startJob(ctx, await jobRow(second), "starter");
      await store.lockState(ctx, ws.id, JSON.stringify({ ID: "lock-1", Operation: "OperationTypePlan" }), second.jobId);
      clock += 31_000;
      assert.ok((await store.expireLeases(ctx)).lost >= 1);
      assert.equal((await store.getJob(ctx, second.jobId)).status, "errored");
      const lost = await store.getRun(ctx, run.id);
      assert.equal(lost.status, "errored");
      assert.match(lost.errorMessage ?? "", /agent lost/);
      const ws2 = await store.getWorkspace(ctx, ws.id);
      assert.equal(ws2.currentRunId, null);
      assert.equal(ws2.stateLocked, false, "the lost job's state lock is released");
      const log = await store.readLog(ctx, second.jobId, 0, 1e6);
      assert.match(log.data.toString(), /agent lost/);
      assert.equal(log.complete, true);
    });

    test("claims: concurrent claimers never get the same job", async () => {
      const pool = await store.createPool(ctx, unique("p"));
      const tok = await store.createPoolToken(ctx, pool.id, "", "http://drover.test");
      const agents = await Promise.all(
        Array.from({ length: 8 }, (_, i) =>
          store.registerAgent(ctx, {
            poolId: pool.id,
            poolTokenId: tok.id,
            name: `a${i}`,
            version: "t",
            driver: "local",
            capacity: 100,
          }),
        ),
      );
      const runs = [];
      for (let i = 0; i < 40; i++) {
        const { ws, cv } = await workspaceWithConfiguration(ctx, unique("cw"), pool.id, archive);
        runs.push(await newRun(ws.id, cv.id));
      }
      const claimed: string[] = [];
      await Promise.all(
        agents.map(async ({ agent }) => {
          for (;;) {
            const job = await store.claimNextJob(ctx, agent);
            if (!job) return;
            claimed.push(job.jobId);
          }
        }),
      );
      assert.equal(claimed.length, 40);
      assert.equal(new Set(claimed).size, 40);
    });

    test("long-poll: a waiting poller gets a job queued after it started waiting", async () => {
      const { agent, ws, cv } = await fixture();
      const realNow = ctx.now;
      const realEvents = ctx.events;
      ctx.now = () => Date.now();
      // A bus whose periodic re-check never comes within the test: only the queue event can
      // hand the job over before the poll's own (long) wait ends.
      ctx.events = localEventBus();
      store.poolWaiters(ctx.events, 3_600_000);
      try {
        const startedAt = Date.now();
        const polling = store.pollForJob(ctx, agent, 120_000);
        await new Promise((r) => setTimeout(r, 100));
        const run = await newRun(ws.id, cv.id);
        const job = await polling;
        assert.equal(job?.runId, run.id);
        assert.ok(Date.now() - startedAt < 60_000, "woken by the queue event, not by the end of the wait");
        assert.equal(await store.pollForJob(ctx, agent, 50), null, "an empty poll answers null after its wait");
      } finally {
        ctx.now = realNow;
        ctx.events = realEvents;
      }
    });

    test("long-poll: concurrent polls of a pool share one look at the queue, and one that times out does not look again", async () => {
      const { pool, tok, agent, ws, cv } = await fixture();
      const others = await Promise.all(
        Array.from({ length: 19 }, () =>
          store.registerAgent(ctx, {
            poolId: pool.id,
            poolTokenId: tok.id,
            name: unique("poller"),
            version: "t",
            driver: "local",
            capacity: 1,
          }),
        ),
      );
      const pollers = [agent, ...others.map((o) => o.agent)];
      const empty = loggingStatements(ctx);
      assert.deepEqual(
        await Promise.all(pollers.map((a) => store.claimNextJob(empty.ctx, a))),
        pollers.map(() => null),
      );
      assert.equal(
        empty.statements.length,
        1,
        `20 polls of an empty queue, one statement: ${empty.statements.join("\n")}`,
      );

      // With a job queued, the shared look says so to all, and exactly one claim takes it.
      const run = await newRun(ws.id, cv.id);
      const claims = (await Promise.all(pollers.map((a) => store.claimNextJob(ctx, a)))).filter((j) => j !== null);
      assert.deepEqual(
        claims.map((j) => j.runId),
        [run.id],
      );

      const realNow = ctx.now;
      ctx.now = () => Date.now();
      try {
        // Its own bus, whose waiters re-check the queue once an hour: the default 2 s re-check
        // could fall inside the 30 ms wait on a loaded machine and look a second time.
        const events = localEventBus();
        store.poolWaiters(events, 3_600_000);
        const timing = loggingStatements({ ...ctx, events });
        assert.equal(await store.pollForJob(timing.ctx, agent, 30), null);
        assert.equal(
          timing.statements.filter((q) => q.startsWith("select")).length,
          1,
          `one look, at the start of the wait: ${timing.statements.join("\n")}`,
        );
      } finally {
        ctx.now = realNow;
      }
    });

    test("logs: resent bytes are ignored, overlaps keep the new tail, gaps are refused", async () => {
      const { agent, ws, cv } = await fixture();
      await newRun(ws.id, cv.id);
      const job = await claim(agent);
      const row = await jobRow(job);
      assert.equal(await store.appendLog(ctx, row, 0, Buffer.from("hello ")), 6);
      assert.equal(
        await store.appendLog(ctx, row, 0, Buffer.from("hello ")),
        6,
        "a retry of the same chunk is ignored",
      );
      assert.equal(await store.appendLog(ctx, row, 3, Buffer.from("lo world")), 11);
      const gap = await rejectsWith(store.appendLog(ctx, row, 20, Buffer.from("x")), "log_gap");
      assert.equal(gap.details?.expectedOffset, 11);
      await rejectsWith(store.appendLog(ctx, row, 11, Buffer.alloc(1024 * 1024 + 1)), "payload_too_large");
      assert.equal((await store.readLog(ctx, job.jobId, 0, 100)).data.toString(), "hello world");
      assert.equal((await store.readLog(ctx, job.jobId, 4, 3)).data.toString(), "o w");
      const tail = await store.readLog(ctx, job.jobId, 11, 100);
      assert.equal(tail.data.length, 0);
      assert.equal(tail.complete, false);
    });

    test("logs: a resend whose overlap differs from the stored bytes is refused, nothing stored", async () => {
      const { agent, ws, cv } = await fixture();
      await newRun(ws.id, cv.id);
      const job = await claim(agent);
      const row = await jobRow(job);
      // Two stored chunks, so the overlap is read across a chunk boundary.
      assert.equal(await store.appendLog(ctx, row, 0, Buffer.from("line 1\nli")), 9);
      assert.equal(await store.appendLog(ctx, row, 9, Buffer.from("ne 2\n")), 14);
      // A sender whose offset is 2 bytes behind its data: keeping only the "new tail" would drop
      // "3\n" and store "line 3" where "line 4" was meant.
      const wrong = await rejectsWith(store.appendLog(ctx, row, 12, Buffer.from("line 3\n")), "log_conflict");
      assert.equal(wrong.details?.expectedOffset, 14);
      await rejectsWith(store.appendLog(ctx, row, 0, Buffer.from("line 1\nline 3\nline 4\n")), "log_conflict");
      assert.equal((await store.readLog(ctx, job.jobId, 0, 100)).data.toString(), "line 1\nline 2\n");
      // An honest resend, split anywhere, still adds only its tail.
      assert.equal(await store.appendLog(ctx, row, 5, Buffer.from("1\nline 2\nline 3\n")), 21);
      for (let limit = 1; limit <= 22; limit++) {
        let text = "";
        for (let offset = 0; ;) {
          const page = await store.readLog(ctx, job.jobId, offset, limit);
          text += page.data.toString();
          if (page.data.length === 0) break;
          assert.equal(page.nextOffset, offset + page.data.length);
          offset = page.nextOffset;
        }
        assert.equal(text, "line 1\nline 2\nline 3\n", `read ${limit} bytes a page`);
      }
    });

    test("logs: appends arriving in order subscribe to no wake-up; one ahead of its turn waits for the log event", async () => {
      const { agent, ws, cv } = await fixture();
      await newRun(ws.id, cv.id);
      const job = await claim(agent);
      const row = await jobRow(job);
      const realEvents = ctx.events;
      const bus = localEventBus();
      let subscriptions = 0;
      ctx.events = {
        publish: (t, k) => bus.publish(t, k),
        subscribe: (t, k, l) => (subscriptions++, bus.subscribe(t, k, l)),
        subscribeTopic: (t, l) => bus.subscribeTopic(t, l),
        wakeAll: () => bus.wakeAll(),
        onWakeAll: (l) => bus.onWakeAll(l),
        close: () => bus.close(),
      };
      try {
        let offset = 0;
        for (let i = 0; i < 20; i++)
          offset = await store.appendLogInOrder(ctx, row, offset, Buffer.from(`line ${i}\n`), 60_000);
        assert.equal(subscriptions, 0, "an append in order subscribes nothing");
        const early = store.appendLogInOrder(ctx, row, offset + 5, Buffer.from("late\n"), 60_000);
        // Held, not refused: it subscribed and waits for the bytes before it.
        while (subscriptions === 0) await new Promise((r) => setImmediate(r));
        assert.equal(await store.appendLogInOrder(ctx, row, offset, Buffer.from("mid.\n"), 60_000), offset + 5);
        assert.equal(await early, offset + 10);
        assert.ok(subscriptions <= 3, `a held append subscribes once per wait (${subscriptions})`);
        assert.match((await store.readLog(ctx, job.jobId, 0, 1000)).data.toString(), /line 19\nmid\.\nlate\n$/);
      } finally {
        ctx.events = realEvents;
      }
    });

    test("a run created while another transaction holds its workspace waits for it (PostgreSQL)", async (t) => {
      if (backend !== "postgres") return t.skip("SQLite runs one transaction at a time");
      // A run that ends frees the workspace and promotes the next pending run in one transaction
      // that holds the workspace's row. A run created meanwhile must wait for that row: else it
      // can commit after the promotion looked, and stay pending on a free workspace for ever.
      const { ws, cv } = await fixture();
      assert.equal((await newRun(ws.id, cv.id)).status, "queued", "the workspace's current run");
      let release: () => void = () => undefined;
      const released = new Promise<void>((r) => (release = r));
      let held: () => void = () => undefined;
      const holding = new Promise<void>((r) => (held = r));
      // Held as the ending run's UPDATE of the workspace holds it (a run's insert, with its
      // foreign key, does not wait for that lock by itself).
      const holder = ctx.db.transaction().execute(async (trx) => {
        await trx.selectFrom("workspaces").select("id").where("id", "=", ws.id).forNoKeyUpdate().execute();
        held();
        await released;
      });
      await holding;
      const created = newRun(ws.id, cv.id);
      try {
        assert.equal(await within(created, 500), null, "the create waited for the workspace's row");
      } finally {
        release();
        await holder;
      }
      assert.equal((await created).status, "pending", "behind the current run");
    });

    test("a cancel racing the job's finish ends in a coded answer, not a deadlock (PostgreSQL)", async (t) => {
      if (backend !== "postgres") return t.skip("SQLite runs one transaction at a time");
      // A cancel holds the run, then the job; a finish holds the job, then the run. Lined up
      // behind a third transaction that holds the run, they deadlock as soon as it lets go: the
      // cancel gets the run and waits for the job, which the finish holds while waiting for the run.
      const { agent, ws, cv } = await fixture();
      const run = await newRun(ws.id, cv.id);
      const plan = await claim(agent);
      await store.startJob(ctx, await jobRow(plan), "starter");
      const planRow = await jobRow(plan);
      let release: () => void = () => undefined;
      const released = new Promise<void>((r) => (release = r));
      let held: () => void = () => undefined;
      const holding = new Promise<void>((r) => (held = r));
      const holder = ctx.db.transaction().execute(async (trx) => {
        await trx.selectFrom("runs").select("id").where("id", "=", run.id).forUpdate().execute();
        held();
        await released;
      });
      await holding;
      const waitingForLocks = async () => {
        const { rows } = await sql<{ n: string }>`select count(*) as n from pg_stat_activity
          where datname = current_database() and wait_event_type = 'Lock'`.execute(ctx.db);
        return Number(rows[0]?.n ?? 0);
      };
      const cancel = store.cancelRun(ctx, run.id);
      await lookUntil("the cancel to wait for the run", async () =>
        (await waitingForLocks()) >= 1 ? true : undefined,
      );
      const finish = store.finishJob(ctx, planRow, "succeeded", null, {
        add: 1,
        change: 0,
        destroy: 0,
        hasChanges: true,
      });
      try {
        await lookUntil("the finish to wait for the run", async () =>
          (await waitingForLocks()) >= 2 ? true : undefined,
        );
      } finally {
        release();
        await holder;
      }
      for (const outcome of await Promise.allSettled([cancel, finish])) {
        if (outcome.status === "rejected")
          assert.ok(outcome.reason instanceof DroverError, `a coded error, not ${String(outcome.reason)}`);
      }
      assert.equal((await store.getJob(ctx, plan.jobId)).status, "succeeded", "the agent's outcome stands");
      assert.equal((await store.getRun(ctx, run.id)).status, "canceled", "the user's cancel stands");
    });

    test("state: versions kept; the lock is idempotent for its holder and refuses others", async () => {
      const { ws } = await fixture();
      assert.equal(await store.currentState(ctx, ws.id), null);
      const info = JSON.stringify({ ID: "aaa", Operation: "OperationTypeApply", Who: "me" });
      await store.lockState(ctx, ws.id, info, null);
      await store.lockState(ctx, ws.id, info, null);
      const err = await rejectsWith(store.lockState(ctx, ws.id, JSON.stringify({ ID: "bbb" }), null), "state_locked");
      assert.ok(err instanceof store.StateLockedError);
      assert.equal(JSON.parse(err.holderInfo).ID, "aaa");
      await rejectsWith(
        store.writeState(ctx, {
          workspaceId: ws.id,
          body: Buffer.from('{"serial":1}'),
          contentMd5: undefined,
          lockId: "bbb",
          runId: null,
        }),
        "state_locked",
      );
      await store.writeState(ctx, {
        workspaceId: ws.id,
        body: Buffer.from('{"serial":1,"lineage":"l"}'),
        contentMd5: undefined,
        lockId: "aaa",
        runId: null,
      });
      const second = {
        workspaceId: ws.id,
        body: Buffer.from('{"serial":2,"lineage":"l"}'),
        contentMd5: undefined,
        lockId: "aaa",
        runId: null,
      };
      const written = await store.writeState(ctx, second);
      // The same write again (terraform's retry after a lost answer): the version it made, not a second.
      assert.equal((await store.writeState(ctx, second)).id, written.id);
      await rejectsWith(store.unlockState(ctx, ws.id, JSON.stringify({ ID: "bbb" })), "state_locked");
      await store.unlockState(ctx, ws.id, info);
      assert.equal((await store.getWorkspace(ctx, ws.id)).stateLocked, false);
      const current = await store.currentState(ctx, ws.id);
      assert.ok(current);
      assert.equal((await store.storedBytes(current)).toString(), '{"serial":2,"lineage":"l"}');
      const versions = await store.listStateVersions(ctx, ws.id);
      assert.deepEqual(
        versions.map((v) => v.serial),
        [2, 1],
      );
      await rejectsWith(
        store.writeState(ctx, {
          workspaceId: ws.id,
          body: Buffer.from("{}"),
          contentMd5: "AAAA",
          lockId: undefined,
          runId: null,
        }),
        "bad_request",
      );
      await store.lockState(ctx, ws.id, info, null);
      await store.unlockState(ctx, ws.id, "");
      assert.equal((await store.getWorkspace(ctx, ws.id)).stateLocked, false, "an empty unlock body is a force-unlock");
    });

    test("bodies: state, plan and configuration larger than a chunk round-trip from files, byte for byte; a refused state leaves nothing", async () => {
      const { ws, agent } = await fixture();
      const dir = mkdtempSync(join(tmpdir(), "drover-store-bodies-"));
      try {
        const spool = (name: string, bytes: Buffer): store.BodyFile => {
          const path = join(dir, name);
          writeFileSync(path, bytes);
          return { path, size: bytes.length };
        };
        const padding = randomBytes(Math.ceil(store.chunkBytes * 1.6)).toString("base64");
        const state = Buffer.from(JSON.stringify({ version: 4, serial: 7, lineage: "lin", padding }));
        assert.ok(state.length > 2 * store.chunkBytes);
        const version = await store.writeState(ctx, {
          workspaceId: ws.id,
          body: spool("state", state),
          contentMd5: createHash("md5").update(state).digest("base64"),
          lockId: undefined,
          runId: null,
        });
        assert.deepEqual([version.serial, version.lineage, version.size], [7, "lin", state.length]);
        const current = await store.currentState(ctx, ws.id);
        assert.ok(current);
        assert.equal(current.size, state.length);
        assert.ok((await store.storedBytes(current)).equals(state));
        assert.ok((await store.storedBytes(await store.readStateVersion(ctx, version.id))).equals(state));
        // Truncated JSON is refused and stores no version and no chunk.
        await rejectsWith(
          store.writeState(ctx, {
            workspaceId: ws.id,
            body: spool("cut", state.subarray(0, state.length - 1)),
            contentMd5: undefined,
            lockId: undefined,
            runId: null,
          }),
          "invalid_json",
        );
        assert.equal((await store.listStateVersions(ctx, ws.id)).length, 1);
        const chunks = await db.kysely
          .selectFrom("state_version_chunks")
          .select((eb) => eb.fn.countAll<number>().as("n"))
          .executeTakeFirstOrThrow();
        const expected = await db.kysely
          .selectFrom("state_versions")
          .select((eb) => eb.fn.countAll<number>().as("n"))
          .executeTakeFirstOrThrow();
        assert.ok(Number(chunks.n) >= Number(expected.n), "chunks belong to stored versions only");

        const big = rawTarGz([
          { path: "main.tf", content: "" },
          { path: "blob.bin", content: randomBytes(Math.ceil(store.chunkBytes * 1.5)).toString("base64") },
        ]);
        const cv = await store.createConfigurationVersion(ctx, ws.id, spool("cv.tar.gz", big), {
          maxCompressedBytes: 1e8,
          maxUnpackedBytes: 1e8,
          maxEntries: 100,
        });
        assert.equal(cv.sha256, createHash("sha256").update(big).digest("hex"));
        assert.ok((await store.storedBytes(await store.readConfigurationArchive(ctx, cv.id))).equals(big));

        const run = await newRun(ws.id, cv.id);
        const plan = await claim(agent);
        assert.equal(plan.runId, run.id);
        const planFile = randomBytes(store.chunkBytes * 2 + 5);
        await store.savePlanFile(ctx, await jobRow(plan), spool("plan", planFile));
        assert.ok((await store.storedBytes(await store.readPlanFile(ctx, run.id))).equals(planFile));
        // A retried upload replaces the file whole.
        await store.savePlanFile(ctx, await jobRow(plan), Buffer.from("short"));
        assert.equal((await store.storedBytes(await store.readPlanFile(ctx, run.id))).toString(), "short");
      } finally {
        rmSync(dir, { recursive: true, force: true });
      }
    });

    test("lifecycle: the store refuses a run transition the table does not allow and leaves the run as it was", async () => {
      const { ws, cv } = await fixture();
      const run = await newRun(ws.id, cv.id);
      assert.equal(run.status, "queued");
      const err = await rejectsWith(
        db.kysely.transaction().execute((trx) => store.moveRun(ctx, trx, { id: run.id, status: "queued" }, "applied")),
        "invalid_transition",
      );
      assert.match(err.message, /queued and cannot become applied/);
      assert.equal((await store.getRun(ctx, run.id)).status, "queued");
      await store.cancelRun(ctx, run.id);
      await rejectsWith(
        db.kysely.transaction().execute((trx) => store.moveRun(ctx, trx, { id: run.id, status: "canceled" }, "queued")),
        "invalid_transition",
      );
      await rejectsWith(store.confirmRun(ctx, run.id), "invalid_transition");
      assert.equal((await store.getRun(ctx, run.id)).status, "canceled");
    });

    test("lifecycle: the store refuses a job transition the table does not allow and leaves the job as it was", async () => {
      const { ws, cv, agent } = await fixture();
      const run = await newRun(ws.id, cv.id);
      const a = await claim(agent);
      const row = await jobRow(a);
      assert.equal(row.status, "assigned");
      const move = (from: store.JobRow, to: store.JobRow["status"]) =>
        db.kysely.transaction().execute((trx) => store.moveJob(ctx, trx, from, to));
      const err = await rejectsWith(move(row, "succeeded"), "invalid_transition");
      assert.match(err.message, /assigned and cannot become succeeded: from assigned it may only become/);
      assert.equal((await jobRow(a)).status, "assigned");
      await store.startJob(ctx, row, "starter");
      await store.finishJob(ctx, await jobRow(a), "failed", "boom");
      const [ended] = await store.listRunJobs(ctx, run.id);
      assert.equal(ended?.status, "failed");
      const finished = { ...row, status: "failed" as const };
      for (const to of ["queued", "running", "succeeded", "canceled"] as const)
        await rejectsWith(move(finished, to), "invalid_transition");
      assert.equal((await store.getJob(ctx, row.id)).status, "failed");
      // A legal move of a row that changed since it was read does not happen (another process won).
      assert.equal(await move({ ...row, status: "running" }, "succeeded"), false);
      assert.equal((await store.getJob(ctx, row.id)).status, "failed");
    });

    test("job tokens: retired when the job stops being leased, kept for the retention, then deleted in batches within a deadline", async () => {
      const { ws, cv, agent } = await fixture();
      await newRun(ws.id, cv.id, { planOnly: true });
      const tokenRows = (jobId: string) =>
        db.kysely
          .selectFrom("job_tokens")
          .select(["attempt", "retired_at"])
          .where("job_id", "=", jobId)
          .orderBy("attempt")
          .execute();
      const first = await claim(agent);
      assert.deepEqual(
        await tokenRows(first.jobId),
        [{ attempt: 1, retired_at: null }],
        "the current token is not retired",
      );
      // The lease lapses before the job starts: requeued, its token retired but still known.
      clock += ctx.settings.leaseTtlMs + 1;
      await store.expireLeases(ctx);
      const requeuedAt = clock;
      assert.deepEqual(await tokenRows(first.jobId), [{ attempt: 1, retired_at: requeuedAt }]);
      // Back in the queue and not claimed again yet: that attempt is over all the same.
      await rejectsWith(store.authenticateJobToken(ctx, first.jobToken), "stale_attempt");
      const second = await claim(agent);
      await rejectsWith(store.authenticateJobToken(ctx, first.jobToken), "stale_attempt");
      await store.startJob(ctx, await jobRow(second), "starter");
      clock += 1000;
      await store.finishJob(ctx, await jobRow(second), "succeeded", null);
      const finishedAt = clock;
      assert.deepEqual(await tokenRows(first.jobId), [
        { attempt: 1, retired_at: requeuedAt },
        { attempt: 2, retired_at: finishedAt },
      ]);
      await rejectsWith(store.authenticateJobToken(ctx, second.jobToken), "job_finished");

      const retention = 60_000;
      // Within the retention nothing goes, and the finished job's token still says why it stopped.
      clock = finishedAt + retention - 1;
      await store.deleteRetiredJobTokens(ctx, retention);
      assert.equal((await tokenRows(first.jobId)).length, 1, "the requeued attempt's token is past its retention");
      await rejectsWith(store.authenticateJobToken(ctx, second.jobToken), "job_finished");
      clock = finishedAt + retention + 1;
      await store.deleteRetiredJobTokens(ctx, retention);
      assert.deepEqual(await tokenRows(first.jobId), []);
      await rejectsWith(store.authenticateJobToken(ctx, second.jobToken), "unauthorized");

      // A backlog is deleted a batch at a time; a passed deadline stops after the first batch.
      const backlog = Array.from({ length: 5 }, (_, i) => ({
        token_hash: unique(`backlog-${i}-`),
        job_id: first.jobId,
        attempt: 100 + i,
        created_at: 0,
        retired_at: 0,
      }));
      await db.kysely.insertInto("job_tokens").values(backlog).execute();
      const stepping = { ...ctx, now: () => (clock += 10) };
      assert.equal(await store.deleteRetiredJobTokens(stepping, retention, { batch: 2, deadlineMs: 0 }), 2);
      assert.equal((await tokenRows(first.jobId)).length, 3);
      assert.equal(await store.deleteRetiredJobTokens(ctx, retention, { batch: 2 }), 3);
      assert.deepEqual(await tokenRows(first.jobId), []);
    });

    test("job tokens: each batch of the cleanup is one DELETE (no read of the hashes first)", async () => {
      const { ws, cv, agent } = await fixture();
      await newRun(ws.id, cv.id, { planOnly: true });
      const { jobId } = await claim(agent);
      const backlog = Array.from({ length: 5 }, (_, i) => ({
        token_hash: unique(`batched-${i}-`),
        job_id: jobId,
        attempt: 200 + i,
        created_at: 0,
        retired_at: 0,
      }));
      await db.kysely.insertInto("job_tokens").values(backlog).execute();
      const logged = loggingStatements(ctx);
      assert.equal(await store.deleteRetiredJobTokens(logged.ctx, 60_000, { batch: 2 }), 5);
      assert.equal(logged.statements.length, 3, logged.statements.join("\n"));
      assert.ok(
        logged.statements.every((q) => /^delete from "job_tokens"/.test(q)),
        logged.statements.join("\n"),
      );
      const left = await db.kysely.selectFrom("job_tokens").select("attempt").where("job_id", "=", jobId).execute();
      assert.deepEqual(
        left.map((r) => r.attempt),
        [1],
        "the current token stays",
      );
    });

    test("agents: a stopping agent's unstarted jobs go back to the queue in one UPDATE, tokens retired, started ones kept", async () => {
      const { pool, agent, ws, cv } = await fixture();
      const { ws: ws2, cv: cv2 } = await workspaceWithConfiguration(ctx, unique("ws"), pool.id, archive);
      const { ws: ws3, cv: cv3 } = await workspaceWithConfiguration(ctx, unique("ws"), pool.id, archive);
      await newRun(ws.id, cv.id);
      await newRun(ws2.id, cv2.id);
      await newRun(ws3.id, cv3.id);
      const [a, b, c] = [await claim(agent), await claim(agent), await claim(agent)];
      await store.startJob(ctx, await jobRow(c), "starter");
      const woken = { count: 0 };
      const off = ctx.events.subscribe("job-queued", pool.id, () => woken.count++);
      const logged = loggingStatements(ctx);
      await store.releaseUnstartedJobs(logged.ctx, agent.id);
      off();
      // One UPDATE of the jobs and one retiring their tokens, however many there are (it was a read and two writes per job).
      assert.equal(logged.statements.length, 2, logged.statements.join("\n"));
      assert.equal(woken.count, 2, "one wake-up per requeued job");
      for (const j of [a, b]) {
        const row = await store.getJob(ctx, j.jobId);
        assert.deepEqual([row.status, row.agentId], ["queued", null]);
        await rejectsWith(store.authenticateJobToken(ctx, j.jobToken), "stale_attempt");
        const retired = await db.kysely
          .selectFrom("job_tokens")
          .select("retired_at")
          .where("job_id", "=", j.jobId)
          .executeTakeFirstOrThrow();
        assert.equal(retired.retired_at, clock);
      }
      assert.equal((await store.getJob(ctx, c.jobId)).status, "running", "a started job is not released");
      const again = await claim(agent);
      assert.ok([a.jobId, b.jobId].includes(again.jobId));
      assert.equal(again.attempt, 2);
      await rejectsWith(
        store.authenticateJobToken(ctx, again.jobId === a.jobId ? a.jobToken : b.jobToken),
        "stale_attempt",
      );
    });

    test("cancel --force: the job cancelRun locked is ended without reading it again", async () => {
      const { agent, ws, cv } = await fixture();
      const run = await newRun(ws.id, cv.id);
      const job = await claim(agent);
      await store.startJob(ctx, await jobRow(job), "starter");
      const logged = loggingStatements(ctx);
      assert.equal((await store.cancelRun(logged.ctx, run.id, { force: true })).status, "canceled");
      const jobReads = logged.statements.filter((q) => /^select \* from "jobs"/.test(q));
      assert.equal(jobReads.length, 1, jobReads.join("\n"));
      await rejectsWith(store.authenticateJobToken(ctx, job.jobToken), "job_finished");
      assert.equal((await store.getJob(ctx, job.jobId)).status, "canceled");
    });

    test("variables: sensitive values are write-only except for the job", async () => {
      const { ws } = await fixture();
      await store.setVariable(ctx, ws.id, "region", { value: "eu", kind: "terraform", sensitive: false });
      const secret = await store.setVariable(ctx, ws.id, "password", {
        value: "hunter2",
        kind: "terraform",
        sensitive: true,
      });
      assert.equal(secret.value, null);
      const listed = await store.listVariables(ctx, ws.id);
      assert.deepEqual(
        listed.map((v) => [v.key, v.value]),
        [
          ["password", null],
          ["region", "eu"],
        ],
      );
      const forJob = await store.variablesForJob(ctx, ws.id);
      assert.equal(forJob.find((v) => v.key === "password")?.value, "hunter2");
    });

    test("configuration versions: a rejected archive stores nothing", async () => {
      const { ws } = await fixture();
      const before = (await store.listConfigurationVersions(ctx, ws.id)).length;
      const limits = { maxCompressedBytes: 1e6, maxUnpackedBytes: 1e7, maxEntries: 100 };
      await rejectsWith(
        store.createConfigurationVersion(ctx, ws.id, rawTarGz([{ path: "../evil.tf", content: "x" }]), limits),
        "invalid_archive",
      );
      await rejectsWith(
        store.createConfigurationVersion(ctx, ws.id, Buffer.from("not gzip"), limits),
        "invalid_archive",
      );
      assert.equal((await store.listConfigurationVersions(ctx, ws.id)).length, before);
    });
  });
}
