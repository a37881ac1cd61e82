import assert from "node:assert/strict";
import { describe, test } from "node:test";
import { DroverError } from "@drover/protocol";
import { store, type StoreContext } from "@drover/server";
import { backends } from "../support/databases.js";
import { useStoreDatabase } from "../support/store-database.js";

// Migration 0071 on both databases: who may read a workspace's state from their runs (decision 0072).

for (const backend of backends) {
  describe(`remote state consumers: ${backend}`, () => {
    let ctx: StoreContext;
    let counter = 0;
    const unique = (p: string) => `${p}${++counter}`;
    useStoreDatabase(
      backend,
      () => 1_700_000_000_000,
      (_db, c) => (ctx = c),
    );

    async function workspaces(n: number) {
      const pool = await store.createPool(ctx, unique("pool"));
      const made = [];
      for (let i = 0; i < n; i++)
        made.push(
          await store.createWorkspace(ctx, {
            name: unique("ws"),
            pool: pool.id,
            engine: "terraform",
            engineVersion: null,
            workingDirectory: "",
            autoApply: false,
          }),
        );
      return made;
    }

    /** Whether a run of `reader` may read `target`'s state, as the TFE read routes decide it. */
    async function mayRead(readerId: string, targetId: string): Promise<boolean> {
      const row = await ctx.db
        .selectFrom("workspaces")
        .select(["id", "remote_state_consumers"])
        .where("id", "=", targetId)
        .executeTakeFirstOrThrow();
      return store.mayReadState(readerId, { id: row.id, consumers: row.remote_state_consumers });
    }

    test("a new workspace is read by its own runs only; a list by name or id opens it to those, shown by name", async () => {
      const [b, a, c] = await workspaces(3);
      assert.ok(a && b && c);
      assert.deepEqual([b.remoteStateConsumers, b.globalRemoteState], [[], false]);
      assert.equal(await mayRead(b.id, b.id), true);
      assert.equal(await mayRead(a.id, b.id), false);

      const updated = await store.updateWorkspace(ctx, b.id, { remoteStateConsumers: [a.name, c.id, a.id] });
      assert.deepEqual(updated.remoteStateConsumers, [a.name, c.name].sort());
      assert.equal(await mayRead(a.id, b.id), true);
      assert.equal(await mayRead(c.id, b.id), true);
      assert.equal(await mayRead(b.id, a.id), false, "not the other way round");
      const listed = (await store.listWorkspaces(ctx, { search: b.name })).items[0];
      assert.deepEqual(listed?.remoteStateConsumers, [a.name, c.name].sort());

      const fewer = await store.changeRemoteStateConsumers(ctx, b.name, { remove: [c.name] });
      assert.deepEqual(fewer.remoteStateConsumers, [a.name]);
      assert.equal(await mayRead(c.id, b.id), false);
      await store.updateWorkspace(ctx, b.id, { remoteStateConsumers: [] });
      assert.equal(await mayRead(a.id, b.id), false);
    });

    test("global remote state opens the state to every workspace and keeps the list for when it is turned off", async () => {
      const [b, a, c] = await workspaces(3);
      assert.ok(a && b && c);
      await store.updateWorkspace(ctx, b.id, { remoteStateConsumers: [a.id] });
      const global = await store.updateWorkspace(ctx, b.id, { globalRemoteState: true });
      assert.deepEqual([global.globalRemoteState, global.remoteStateConsumers], [true, [a.name]]);
      assert.equal(await mayRead(c.id, b.id), true);
      const added = await store.changeRemoteStateConsumers(ctx, b.id, { add: [c.id] });
      assert.equal(added.globalRemoteState, true, "changing the list keeps the global flag");
      const off = await store.updateWorkspace(ctx, b.id, { globalRemoteState: false });
      assert.deepEqual([off.globalRemoteState, off.remoteStateConsumers], [false, [a.name, c.name].sort()]);
      await store.changeRemoteStateConsumers(ctx, b.id, { remove: [c.id] });
      assert.equal(await mayRead(c.id, b.id), false);
    });

    test("an unknown consumer, or the workspace itself, is refused; a deleted consumer drops out of the names", async () => {
      const [b, a] = await workspaces(2);
      assert.ok(a && b);
      await assert.rejects(store.updateWorkspace(ctx, b.id, { remoteStateConsumers: ["no-such"] }), (err) => {
        assert.ok(err instanceof DroverError);
        assert.equal(err.code, "not_found");
        return true;
      });
      await assert.rejects(store.updateWorkspace(ctx, b.id, { remoteStateConsumers: [b.name] }), /its own state/);
      await store.updateWorkspace(ctx, b.id, { remoteStateConsumers: [a.id] });
      await store.deleteWorkspace(ctx, a.id);
      assert.deepEqual((await store.getWorkspace(ctx, b.id)).remoteStateConsumers, []);
    });

    test("consumers added at once (terraform's relationship calls, in parallel) are all kept", async () => {
      const [target, ...readers] = await workspaces(9);
      assert.ok(target);
      await Promise.all([
        ...readers.map((r) => store.changeRemoteStateConsumers(ctx, target.id, { add: [r.name] })),
        store.updateWorkspace(ctx, target.id, { globalRemoteState: true, autoApply: true }),
      ]);
      const after = await store.getWorkspace(ctx, target.id);
      assert.deepEqual([...after.remoteStateConsumers].sort(), readers.map((r) => r.name).sort());
      assert.equal(after.globalRemoteState, true);
      assert.equal(after.autoApply, true);
    });

    test("a column that is not a JSON list allows no one", () => {
      assert.deepEqual(store.parseRemoteStateConsumers("not json"), { global: false, ids: [] });
      assert.deepEqual(store.parseRemoteStateConsumers('{"a":1}'), { global: false, ids: [] });
      assert.deepEqual(store.parseRemoteStateConsumers('["*","ws_1",2]'), { global: true, ids: ["ws_1"] });
      assert.equal(store.mayReadState("ws_2", { id: "ws_1", consumers: "oops" }), false);
    });
  });
}
