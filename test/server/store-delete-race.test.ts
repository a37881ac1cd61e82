import assert from "node:assert/strict";
import { describe, test } from "node:test";
import { DroverError, type Run } from "@drover/protocol";
import { store, type StoreContext } from "@drover/server";
import { sql } from "kysely";
import { rawTarGz } from "../support/archives.js";
import { backends } from "../support/databases.js";
import { lookUntil } from "../support/poll.js";
import { useStoreDatabase } from "../support/store-database.js";
import { workspaceWithConfiguration } from "../support/store-fixtures.js";

// A workspace delete and a run created at the same moment: either the run is first and the delete
// refuses the workspace its run, or the delete is first and the run is refused. Never both done.

const archive = rawTarGz([{ path: "main.tf", content: 'resource "terraform_data" "x" {}\n' }]);

/** A promise and the function that settles it, for a step the test lets go of when it chooses. */
function gate(): { opened: Promise<void>; open: () => void } {
  let open = () => {};
  const opened = new Promise<void>((resolve) => (open = resolve));
  return { opened, open };
}

/** Whether `promise` has settled yet, read without waiting for it. */
function watch(promise: Promise<unknown>): () => boolean {
  let settled = false;
  promise.then(
    () => (settled = true),
    () => (settled = true),
  );
  return () => settled;
}

for (const backend of backends) {
  describe(`workspace delete beside run creation: ${backend}`, () => {
    let ctx: StoreContext;
    let counter = 0;
    const unique = (p: string) => `${p}${++counter}`;
    useStoreDatabase(
      backend,
      () => 1_700_000_000_000,
      (_db, c) => (ctx = c),
    );

    async function fixture() {
      const pool = await store.createPool(ctx, unique("pool"));
      const { ws, cv } = await workspaceWithConfiguration(ctx, unique("ws"), pool.id, archive);
      const input: store.CreateRunInput = {
        workspace: ws.id,
        configurationVersionId: cv.id,
        planOnly: false,
        isDestroy: false,
        message: "",
      };
      return { ws, cv, input };
    }

    /** PostgreSQL sessions of this test's database waiting for a lock another one holds. */
    async function lockWaiters(): Promise<number> {
      const { rows } = await sql<{ n: string }>`
        select count(*) as n from pg_stat_activity where datname = current_database() and wait_event_type = 'Lock'
      `.execute(ctx.db);
      return Number(rows[0]?.n ?? 0);
    }

    test("a delete asked while a run's transaction is open waits for it, then refuses the workspace its run", async () => {
      const { ws, input } = await fixture();
      const inRunTransaction = gate();
      const release = gate();
      // The claim runs in the run's transaction after the workspace is taken, before the run is inserted.
      const creating = store.createClaimedRun(ctx, input, async () => {
        inRunTransaction.open();
        await release.opened;
        return true;
      });
      await inRunTransaction.opened;
      const deleting = store.deleteWorkspace(ctx, ws.id);
      // SQLite: the run's transaction holds the one connection, so no statement of the delete runs
      // before it commits. PostgreSQL: the delete has gone as far as it can once it waits for a lock.
      if (backend === "postgres")
        await lookUntil("the delete waiting for a lock", async () => ((await lockWaiters()) === 1 ? true : undefined));
      release.open();
      const [created, deleted] = await Promise.allSettled([creating, deleting]);

      assert.equal(deleted.status, "rejected", "the delete went ahead under a run created after its check");
      assert.ok(deleted.reason instanceof DroverError && deleted.reason.code === "conflict", String(deleted.reason));
      assert.equal(created.status, "fulfilled", String(created.status === "rejected" && created.reason));
      assert.ok(created.value);
      assert.match(deleted.reason.message, new RegExp(`active run \\(${created.value.id}\\)`));
      assert.equal((await store.getRun(ctx, created.value.id)).status, "queued");
      assert.equal((await store.getWorkspace(ctx, ws.id)).currentRunId, created.value.id);
    });

    test(
      "a run asked for while a delete holds the workspace is refused as not found, and no run is left",
      // SQLite runs one transaction at a time on its one connection: a delete cannot be held half done.
      { skip: backend === "sqlite" && "SQLite runs one transaction at a time" },
      async () => {
        const { ws, cv, input } = await fixture();
        // A third transaction holds the configuration version's row, which the delete removes after
        // its checks: the delete stops there, its transaction open.
        const blocker = await ctx.db.startTransaction().execute();
        let settled: [PromiseSettledResult<void>, PromiseSettledResult<Run>];
        try {
          await blocker.selectFrom("configuration_versions").select("id").where("id", "=", cv.id).forUpdate().execute();
          const deleting = store.deleteWorkspace(ctx, ws.id);
          await lookUntil("the delete waiting for a lock", async () =>
            (await lockWaiters()) === 1 ? true : undefined,
          );
          const creating = store.createRun(ctx, input);
          const done = watch(creating);
          await lookUntil("the run's creation waiting behind the delete, or done", async () =>
            done() || (await lockWaiters()) === 2 ? true : undefined,
          );
          await blocker.commit().execute();
          settled = await Promise.allSettled([deleting, creating]);
        } catch (err) {
          await blocker.rollback().execute();
          throw err;
        }
        const [deleted, created] = settled;
        assert.equal(deleted.status, "fulfilled", String(deleted.status === "rejected" && deleted.reason));
        assert.equal(
          created.status,
          "rejected",
          `a run was created in a workspace being deleted: ${JSON.stringify(created.status === "fulfilled" && created.value)}`,
        );
        assert.ok(created.reason instanceof DroverError && created.reason.code === "not_found", String(created.reason));
        const left = await ctx.db.selectFrom("runs").select("id").where("workspace_id", "=", ws.id).execute();
        assert.deepEqual(left, []);
      },
    );

    // The state routes find the workspace, then write; a delete can land in between. The write
    // then meets the database's foreign key, which must read as the workspace gone, not a 500.
    test("a state lock or state write on a workspace deleted after it was found is not_found", async () => {
      const { ws } = await fixture();
      await store.deleteWorkspace(ctx, ws.id);
      const gone = (err: unknown) =>
        err instanceof DroverError && err.code === "not_found" && err.message.includes("was deleted");
      const info = JSON.stringify({ ID: "lock-1", Operation: "OperationTypePlan" });
      await assert.rejects(store.lockState(ctx, ws.id, info, null), gone);
      const state = Buffer.from(JSON.stringify({ version: 4, serial: 1, lineage: "l-1", resources: [] }));
      await assert.rejects(
        store.writeState(ctx, {
          workspaceId: ws.id,
          body: state,
          contentMd5: undefined,
          lockId: undefined,
          runId: null,
        }),
        gone,
      );
    });
  });
}
