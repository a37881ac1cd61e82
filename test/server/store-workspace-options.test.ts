import assert from "node:assert/strict";
import { describe, test } from "node:test";
import { DroverError } from "@drover/protocol";
import { store, type StoreContext } from "@drover/server";
import { rawTarGz } from "../support/archives.js";
import { backends } from "../support/databases.js";
import { useStoreDatabase } from "../support/store-database.js";

// Migration 0063 on both databases: HCL variables, outputs revealed on request, and the
// workspace's default for the destroy-all guard.

async function rejectsWith(promise: Promise<unknown>, code: string, message: RegExp): Promise<void> {
  await assert.rejects(promise, (err) => {
    assert.ok(err instanceof DroverError, String(err));
    assert.equal(err.code, code);
    assert.match(err.message, message);
    return true;
  });
}

for (const backend of backends) {
  describe(`workspace options: ${backend}`, () => {
    let ctx: StoreContext;
    let counter = 0;
    const unique = (p: string) => `${p}${++counter}`;
    useStoreDatabase(
      backend,
      () => 1_700_000_000_000,
      (_db, c) => (ctx = c),
    );

    /** A configuration version of an empty main.tf. */
    const configuration = (ws: string) =>
      store.createConfigurationVersion(ctx, ws, rawTarGz([{ path: "main.tf", content: "" }]), {
        maxCompressedBytes: 1e6,
        maxUnpackedBytes: 1e7,
        maxEntries: 10,
      });

    async function workspace(allowDestroyAll?: boolean) {
      const pool = await store.createPool(ctx, unique("pool"));
      return store.createWorkspace(ctx, {
        name: unique("ws"),
        pool: pool.id,
        engine: "terraform",
        engineVersion: null,
        workingDirectory: "",
        autoApply: true,
        allowDestroyAll,
      });
    }

    test("an HCL variable keeps its flag for users and jobs; setting it again as a string clears it", async () => {
      const ws = await workspace();
      const set = await store.setVariable(ctx, ws.id, "tags", {
        value: '{a = "b"}',
        kind: "terraform",
        sensitive: false,
        hcl: true,
      });
      assert.equal(set.hcl, true);
      await store.setVariable(ctx, ws.id, "region", { value: "eu", kind: "terraform", sensitive: false });
      const listed = await store.listVariables(ctx, ws.id);
      assert.deepEqual(
        listed.map((v) => [v.key, v.hcl, v.value]),
        [
          ["region", false, "eu"],
          ["tags", true, '{a = "b"}'],
        ],
      );
      assert.deepEqual(
        (await store.variablesForJob(ctx, ws.id)).map((v) => [v.key, v.hcl]),
        [
          ["region", false],
          ["tags", true],
        ],
      );
      await store.setVariable(ctx, ws.id, "tags", { value: "plain", kind: "terraform", sensitive: false });
      assert.equal((await store.listVariables(ctx, ws.id)).find((v) => v.key === "tags")?.hcl, false);
    });

    test("an HCL value is refused for env variables and with a line break, heredoc or control character", async () => {
      const ws = await workspace();
      const put = (value: string, kind: "terraform" | "env" = "terraform") =>
        store.setVariable(ctx, ws.id, "v", { value, kind, sensitive: false, hcl: true });
      await rejectsWith(put("{a = 1}", "env"), "bad_request", /environment variable is always a string/);
      await rejectsWith(put("  "), "bad_request", /cannot be empty/);
      for (const value of ['{a = "b"}\ninjected = 1', '"x"\n}\ninjected = 1', "<<EOT\nx\nEOT", "1\r\nx = 2", "1\u001b"])
        await rejectsWith(put(value), "bad_request", /one expression on one line/);
      // A tab is HCL whitespace.
      assert.equal((await put("{a =\t1}")).hcl, true);
      assert.equal((await store.listVariables(ctx, ws.id)).length, 1);
    });

    test("outputs: sensitive values are null unless revealed", async () => {
      const ws = await workspace();
      const cv = await configuration(ws.id);
      const run = await store.createRun(ctx, {
        workspace: ws.id,
        configurationVersionId: cv.id,
        planOnly: false,
        isDestroy: false,
        message: "",
      });
      const outputs = [
        { name: "open", sensitive: false, type: "string", value: "a" },
        { name: "secret", sensitive: true, type: "string", value: "s3cret" },
      ];
      await ctx.db
        .updateTable("runs")
        .set({ outputs_json: JSON.stringify(outputs) })
        .where("id", "=", run.id)
        .execute();
      assert.deepEqual(
        (await store.workspaceOutputs(ctx, ws.id)).map((o) => o.value),
        ["a", null],
      );
      assert.deepEqual(
        (await store.workspaceOutputs(ctx, ws.id, { reveal: true })).map((o) => o.value),
        ["a", "s3cret"],
      );
    });

    test("allowDestroyAll: a run that does not say takes the workspace's setting; one that says keeps its own", async () => {
      const ws = await workspace();
      assert.equal(ws.allowDestroyAll, false);
      const cv = await configuration(ws.id);
      const allowed = async (extra: { allowDestroyAll?: boolean }) => {
        const run = await store.createRun(ctx, {
          workspace: ws.id,
          configurationVersionId: cv.id,
          planOnly: false,
          isDestroy: false,
          message: "",
          ...extra,
        });
        const row = await ctx.db
          .selectFrom("runs")
          .select("allow_destroy_all")
          .where("id", "=", run.id)
          .executeTakeFirstOrThrow();
        return row.allow_destroy_all;
      };
      assert.equal(await allowed({}), 0);
      assert.equal(await allowed({ allowDestroyAll: true }), 1);
      const updated = await store.updateWorkspace(ctx, ws.id, { allowDestroyAll: true });
      assert.equal(updated.allowDestroyAll, true);
      assert.equal((await store.getWorkspace(ctx, ws.name)).allowDestroyAll, true);
      assert.equal(await allowed({}), 1);
      assert.equal(await allowed({ allowDestroyAll: false }), 0);
      assert.equal((await workspace(true)).allowDestroyAll, true);
    });
  });
}
