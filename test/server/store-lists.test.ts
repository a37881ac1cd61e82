import assert from "node:assert/strict";
import { before, describe, test } from "node:test";
import { DroverError } from "@drover/protocol";
import { store, type StoreContext } from "@drover/server";
import { rawTarGz } from "../support/archives.js";
import { backends } from "../support/databases.js";
import { useStoreDatabase } from "../support/store-database.js";

/*
 * The paged lists the web UI reads, on both databases: workspaces by name with a search that
 * takes `%`, `_` and case literally, a pool filter and each workspace's newest run; runs newest
 * first by workspace and status, a page at a time, with a cursor that survives equal times.
 */

const archive = rawTarGz([{ path: "main.tf", content: 'resource "terraform_data" "x" {}\n' }]);
const limits = { maxCompressedBytes: 1e6, maxUnpackedBytes: 1e7, maxEntries: 100 };

for (const backend of backends) {
  describe(`paged lists: ${backend}`, () => {
    let clock = 1_700_000_000_000;
    let ctx: StoreContext;
    useStoreDatabase(
      backend,
      () => clock,
      (_db, c) => (ctx = c),
    );
    const names = ["alpha", "Beta_1", "beta-2", "gamma%", "delta", "epsilon", "BETAX"];
    before(async () => {
      await store.createPool(ctx, "main");
      await store.createPool(ctx, "side");
      for (const name of names) {
        await store.createWorkspace(ctx, {
          name,
          pool: name === "delta" ? "side" : "main",
          engine: "terraform",
          engineVersion: null,
          workingDirectory: "",
          autoApply: false,
        });
      }
    });

    async function startRun(workspace: string) {
      const cv = await store.createConfigurationVersion(ctx, workspace, archive, limits);
      return store.createRun(ctx, {
        workspace,
        configurationVersionId: cv.id,
        planOnly: false,
        isDestroy: false,
        message: "",
      });
    }

    test("workspaces come by name, a page at a time, with the cursor of the next page", async () => {
      const all = (await store.listWorkspaces(ctx)).items.map((w) => w.name);
      assert.deepEqual(all, [...names].sort());
      const seen: string[] = [];
      let after: string | undefined;
      for (let pages = 0; pages < 10; pages++) {
        const page = await store.listWorkspaces(ctx, { limit: 3, after });
        assert.ok(page.items.length <= 3);
        seen.push(...page.items.map((w) => w.name));
        if (page.next === null) break;
        assert.equal(page.next, page.items.at(-1)?.name);
        after = page.next;
      }
      assert.deepEqual(seen, all, "every workspace once, in order");
    });

    test("the search matches any case and takes % and _ as plain characters", async () => {
      const search = async (s: string) => (await store.listWorkspaces(ctx, { search: s })).items.map((w) => w.name);
      assert.deepEqual(await search("beta"), ["BETAX", "Beta_1", "beta-2"].sort());
      assert.deepEqual(await search("a_"), ["Beta_1"]);
      assert.deepEqual(await search("%"), ["gamma%"]);
      assert.deepEqual(await search("nothing"), []);
    });

    test("the pool filter keeps a pool's workspaces, and an unknown pool is not found", async () => {
      assert.deepEqual(
        (await store.listWorkspaces(ctx, { pool: "side" })).items.map((w) => w.name),
        ["delta"],
      );
      await assert.rejects(
        store.listWorkspaces(ctx, { pool: "nope" }),
        (err: unknown) => err instanceof DroverError && err.code === "not_found",
      );
    });

    test("each workspace shows its newest run", async () => {
      await startRun("epsilon");
      clock += 1000;
      const newest = await startRun("epsilon");
      const [epsilon] = (await store.listWorkspaces(ctx, { search: "epsilon" })).items;
      assert.deepEqual(epsilon?.latestRun, { id: newest.id, status: newest.status, createdAt: newest.createdAt });
      const [alpha] = (await store.listWorkspaces(ctx, { search: "alpha" })).items;
      assert.equal(alpha?.latestRun, null);
    });

    test("runs come newest first, a page at a time, also when they share a time", async () => {
      const made: string[] = [];
      for (let i = 0; i < 7; i++) {
        made.push((await startRun("alpha")).id);
        if (i % 3 === 0) clock += 1000; // some runs share a creation time: the id orders them
      }
      const seen: string[] = [];
      let after: string | undefined;
      for (let pages = 0; pages < 10; pages++) {
        const page = await store.listRuns(ctx, { workspace: "alpha", limit: 2, after });
        seen.push(...page.items.map((r) => r.id));
        if (page.next === null) break;
        after = page.next;
      }
      const expected = (await store.listRuns(ctx, { workspace: "alpha", limit: 100 })).items.map((r) => r.id);
      assert.deepEqual(seen, expected, "the pages together are the whole list, once each");
      assert.deepEqual([...seen].sort(), [...made].sort());

      const queued = await store.listRuns(ctx, { workspace: "alpha", status: "queued" });
      assert.deepEqual(
        queued.items.map((r) => r.id),
        [made[0]],
        "one run of the workspace is queued, the rest wait behind it",
      );
      await assert.rejects(
        store.listRuns(ctx, { after: "run-unknown" }),
        (err: unknown) => err instanceof DroverError && err.code === "bad_request",
      );
    });
  });
}
