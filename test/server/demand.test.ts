// A pool's demand on both databases: queued and claimed-not-started jobs are pending, started
// ones running, planned runs awaiting confirmation need no agent, runs queued behind another
// run of their workspace are not demand (a plan-only run goes beside: it is), and other pools'
// work never counts.
import assert from "node:assert/strict";
import { after, before, describe, test } from "node:test";
import { localEventBus, openDatabase, store, type Db, type StoreContext } from "@drover/server";
import { backends, createTestDatabase, type TestDatabase } from "../support/databases.js";
import { rawTarGz } from "../support/archives.js";

const archive = rawTarGz([{ path: "main.tf", content: 'resource "terraform_data" "x" {}\n' }]);

for (const backend of backends) {
  describe(`pool demand: ${backend}`, () => {
    let database: TestDatabase;
    let db: Db;
    let ctx: StoreContext;
    before(async () => {
      database = await createTestDatabase(backend);
      db = await openDatabase(database.location);
      ctx = {
        db: db.kysely,
        dialect: db.dialect,
        events: localEventBus(),
        now: () => Date.now(),
        settings: { leaseTtlMs: 30_000, agentTtlMs: 60_000, heartbeatIntervalMs: 10_000 },
      };
    });
    after(async () => {
      await db.close();
      await database.drop();
    });

    async function workspace(pool: string, name: string) {
      const ws = await store.createWorkspace(ctx, {
        name,
        pool,
        engine: "terraform",
        engineVersion: null,
        workingDirectory: "",
        autoApply: false,
      });
      const cv = await store.createConfigurationVersion(ctx, ws.id, archive, {
        maxCompressedBytes: 1e6,
        maxUnpackedBytes: 1e7,
        maxEntries: 100,
      });
      return (planOnly = false) =>
        store.createRun(ctx, {
          workspace: ws.id,
          configurationVersionId: cv.id,
          planOnly,
          isDestroy: false,
          message: "",
        });
    }

    test("pending, running, awaiting confirmation and desired agents", async () => {
      const pool = await store.createPool(ctx, "busy");
      const other = await store.createPool(ctx, "other");
      const tok = await store.createPoolToken(ctx, pool.id, "t", "http://drover.test");
      const register = async (name: string, capacity: number) =>
        (
          await store.registerAgent(ctx, {
            poolId: pool.id,
            poolTokenId: tok.id,
            name,
            version: "t",
            driver: "local",
            capacity,
          })
        ).agent;
      const empty = await store.poolDemand(ctx, "busy");
      assert.deepEqual(
        { ...empty, pool: empty.pool.name },
        {
          pool: "busy",
          pending: 0,
          queued: 0,
          claimed: 0,
          running: 0,
          awaitingConfirmation: 0,
          agents: { online: 0, idle: 0, busy: 0 },
          jobsPerAgent: 1,
          desiredAgents: 0,
        },
      );

      const runs = [];
      for (let i = 0; i < 4; i++) {
        const run = await workspace(pool.id, `ws-${i}`);
        runs.push(run);
        await run();
        await run(); // queued behind the first: not demand
      }
      // A plan-only run goes beside its workspace's queue: demand at once.
      await runs[0]!(true);
      await (
        await workspace(other.id, "elsewhere")
      )();

      const a = await register("a", 2);
      const b = await register("b", 3);
      const first = await store.claimNextJob(ctx, a);
      const second = await store.claimNextJob(ctx, a);
      assert.ok(first && second);
      const started = await store.authenticateJobToken(ctx, first.jobToken);
      await store.startJob(ctx, started, "starter");
      let d = await store.poolDemand(ctx, pool.id);
      assert.deepEqual(
        {
          pending: d.pending,
          queued: d.queued,
          claimed: d.claimed,
          running: d.running,
          agents: d.agents,
          jobsPerAgent: d.jobsPerAgent,
          desired: d.desiredAgents,
        },
        {
          pending: 4,
          queued: 3,
          claimed: 1,
          running: 1,
          agents: { online: 2, idle: 1, busy: 1 },
          jobsPerAgent: 3,
          desired: 2,
        },
      );
      assert.equal((await store.poolDemand(ctx, pool.id, 1)).desiredAgents, 5);

      // The plan of a run that waits for confirmation ends: demand falls, the run is counted apart.
      const planned = first;
      assert.equal(planned.planOnly, false);
      const job = await store.authenticateJobToken(ctx, planned.jobToken);
      if (job.status !== "running") await store.startJob(ctx, job, "starter");
      await store.savePlanJson(
        ctx,
        job,
        Buffer.from(JSON.stringify({ resource_changes: [{ address: "x", change: { actions: ["create"] } }] })),
      );
      await store.finishJob(ctx, job, "succeeded", null);
      d = await store.poolDemand(ctx, pool.id);
      assert.equal(d.awaitingConfirmation, 1);
      assert.equal(d.pending + d.running, 4);

      const all = await store.allPoolDemands(ctx);
      assert.equal(all.find((x) => x.pool.name === "other")?.pending, 1);
      assert.equal(all.find((x) => x.pool.name === "busy")?.awaitingConfirmation, 1);
      await store.deregisterAgent(ctx, b.id);
      assert.equal((await store.poolDemand(ctx, pool.id)).agents.online, 1);
    });
  });
}
