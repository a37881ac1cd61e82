import assert from "node:assert/strict";
import { before, describe, test } from "node:test";
import { DroverError } from "@drover/protocol";
import { store, type StoreContext } from "@drover/server";
import { rawTarGz } from "../support/archives.js";
import { backends } from "../support/databases.js";
import { useStoreDatabase } from "../support/store-database.js";

/*
 * VCS connections and repository links (store/vcs-connections.ts, store/workspace-vcs.ts) on both
 * databases: the token is never read back but by the fetch, repository paths of each provider are
 * checked, a connection in use is not deleted, and of two processes claiming one commit only one wins.
 */

async function rejectsWith(promise: Promise<unknown>, code: string, message: RegExp): Promise<void> {
  await assert.rejects(promise, (err: unknown) => {
    assert.ok(err instanceof DroverError, String(err));
    assert.equal(err.code, code, err.message);
    assert.match(err.message, message);
    return true;
  });
}

const token = "glpat-SECRET0123456789abcdef";
const limits = { maxCompressedBytes: 1e6, maxUnpackedBytes: 1e7, maxEntries: 100 };

for (const backend of backends) {
  describe(`vcs store: ${backend}`, () => {
    let ctx: StoreContext;
    useStoreDatabase(
      backend,
      () => 1_700_000_000_000,
      (_db, c) => (ctx = c),
    );
    let counter = 0;
    const unique = (p: string) => `${p}${++counter}`;
    const workspace = async () =>
      store.createWorkspace(ctx, {
        name: unique("ws"),
        pool: "p",
        engine: "terraform",
        engineVersion: null,
        workingDirectory: "",
        autoApply: false,
      });
    before(async () => {
      await store.createPool(ctx, "p");
    });

    test("a connection's token is kept for the fetch and in nothing else the store returns", async () => {
      const name = unique("gl");
      const conn = await store.createVcsConnection(ctx, {
        name,
        provider: "gitlab",
        url: "https://gitlab.example.com",
        token,
      });
      assert.equal(conn.authKind, "token");
      const shown = JSON.stringify([
        conn,
        await store.getVcsConnection(ctx, name),
        await store.listVcsConnections(ctx),
      ]);
      assert.ok(!shown.includes(token), shown);
      assert.deepEqual((await store.vcsEndpoint(ctx, conn.id)).auth, { kind: "token", token });
      // Each connection gets its own webhook secret, which nothing returned carries either.
      const secret = await store.vcsWebhookSecret(ctx, name);
      assert.match(secret, /^[0-9a-f]{64}$/);
      assert.ok(!shown.includes(secret), shown);
      const other = await store.createVcsConnection(ctx, {
        name: unique("gh"),
        provider: "github",
        url: "https://github.com",
        token,
      });
      assert.notEqual(await store.vcsWebhookSecret(ctx, other.id), secret);
      await rejectsWith(
        store.createVcsConnection(ctx, { name, provider: "github", url: "https://github.com", token }),
        "already_exists",
        /already exists/,
      );
    });

    test("repository paths are checked per provider; a connection in use is not deleted", async () => {
      const gh = await store.createVcsConnection(ctx, {
        name: unique("gh"),
        provider: "github",
        url: "https://github.com",
        token,
      });
      const gl = await store.createVcsConnection(ctx, {
        name: unique("gl"),
        provider: "gitlab",
        url: "https://gitlab.example.com",
        token,
      });
      const ws = await workspace();
      const link = (connection: string, repository: string) =>
        store.linkWorkspaceVcs(ctx, ws.name, { connection, repository, branch: "main", triggerPaths: [] });
      for (const bad of ["../x", "a/..", "-upload-pack=touch x/y", "https://evil.example/x/y", "a/b/c", "a", "a/.b"])
        await rejectsWith(link(gh.name, bad), "bad_request", /repository/);
      await rejectsWith(link(gl.name, "group"), "bad_request", /group/);
      const linked = await link(gl.name, "group/sub/project");
      assert.equal(linked.repository, "group/sub/project");
      assert.equal(linked.lastCommitSha, null);
      assert.deepEqual((await store.getWorkspaceVcs(ctx, ws.id)).provider, "gitlab");
      assert.deepEqual((await link(gh.name, "owner/name")).connection, gh.name);
      await rejectsWith(store.deleteVcsConnection(ctx, gh.name), "conflict", new RegExp(`workspace ${ws.name}`));
      await store.deleteVcsConnection(ctx, gl.name);
      await store.unlinkWorkspaceVcs(ctx, ws.name);
      await rejectsWith(store.getWorkspaceVcs(ctx, ws.name), "not_found", /not linked/);
      await rejectsWith(store.unlinkWorkspaceVcs(ctx, ws.name), "not_found", /not linked/);
      await store.deleteVcsConnection(ctx, gh.name);
      await rejectsWith(store.getVcsConnection(ctx, gh.name), "not_found", /no VCS connection/);
    });

    test("a connection's links are listed without the other connections' links", async () => {
      const [a, b] = await Promise.all(
        ["a", "b"].map((n) =>
          store.createVcsConnection(ctx, { name: unique(n), provider: "github", url: "https://github.com", token }),
        ),
      );
      const [wa, wb] = [await workspace(), await workspace()];
      await store.linkWorkspaceVcs(ctx, wa.name, {
        connection: a!.name,
        repository: "o/r",
        branch: "main",
        triggerPaths: [],
      });
      await store.linkWorkspaceVcs(ctx, wb.name, {
        connection: b!.name,
        repository: "o/r",
        branch: "main",
        triggerPaths: [],
      });
      const ofA = await store.listVcsLinks(ctx, a!.id);
      assert.deepEqual(
        ofA.map((l) => [l.workspaceName, l.connectionId]),
        [[wa.name, a!.id]],
      );
      const all = (await store.listVcsLinks(ctx)).map((l) => l.workspaceName);
      assert.ok(all.includes(wa.name) && all.includes(wb.name), "every link without a connection given");
      for (const ws of [wa, wb]) await store.unlinkWorkspaceVcs(ctx, ws.name);
    });

    test("of two claims of one new commit only one wins; a run takes its commit in its own transaction, or neither happens", async () => {
      const conn = await store.createVcsConnection(ctx, {
        name: unique("gh"),
        provider: "github",
        url: "https://github.com",
        token,
      });
      const ws = await workspace();
      const link = await store.linkWorkspaceVcs(ctx, ws.name, {
        connection: conn.name,
        repository: "o/r",
        branch: "main",
        triggerPaths: ["modules/**"],
      });
      assert.deepEqual(link.triggerPaths, ["modules/**"]);
      assert.equal(link.applyOnMerge, null, "unsaid: the workspace's auto-apply decides");
      for (const applyOnMerge of [true, false, null]) {
        const relinked = await store.linkWorkspaceVcs(ctx, ws.name, {
          connection: conn.name,
          repository: "o/r",
          branch: "main",
          triggerPaths: ["modules/**"],
          applyOnMerge,
        });
        assert.equal(relinked.applyOnMerge, applyOnMerge);
      }
      const sha = "a".repeat(40);
      const claims = await Promise.all([1, 2, 3].map(() => store.claimVcsCommit(ctx, link, null, sha)));
      assert.deepEqual(claims.filter(Boolean).length, 1);
      assert.equal((await store.getWorkspaceVcs(ctx, ws.id)).lastCommitSha, sha);
      // A commit's run takes the commit with it, in one transaction: both or neither. Each
      // server process stores its own copy of the fetched commit first.
      const fetched = async () => {
        const cv = await store.createConfigurationVersion(
          ctx,
          ws.id,
          rawTarGz([{ path: "main.tf", content: "" }]),
          limits,
        );
        return { workspace: ws.id, configurationVersionId: cv.id, planOnly: false, isDestroy: false, message: "" };
      };
      const next = "c".repeat(40);
      const runCount = async () => (await store.listRuns(ctx, { workspace: ws.id })).items.length;
      const storedCopies = async () => (await store.listConfigurationVersions(ctx, ws.id)).length;
      await assert.rejects(
        store.createClaimedRun(ctx, await fetched(), async (db) => {
          assert.equal(await store.claimVcsCommit(ctx, link, sha, next, db), true);
          throw new Error("the disk went away");
        }),
        /the disk went away/,
      );
      assert.equal((await store.getWorkspaceVcs(ctx, ws.id)).lastCommitSha, sha, "the failed run's claim is undone");
      assert.equal(await runCount(), 0);
      assert.equal(await storedCopies(), 0, "the failed run's configuration is not kept");
      const inputs = await Promise.all([1, 2, 3].map(fetched));
      const started = await Promise.all(
        inputs.map((input) =>
          store.createClaimedRun(ctx, input, (db) => store.claimVcsCommit(ctx, link, sha, next, db)),
        ),
      );
      assert.equal(started.filter((r) => r !== null).length, 1, "one run of the commit, whoever asks");
      assert.equal(await runCount(), 1);
      assert.equal(await storedCopies(), 1, "the losers' copies of the commit are deleted");
      // A loser whose configuration a run uses (not the case in the product) keeps it.
      const used = inputs.find(
        (i) => i.configurationVersionId === started.find((r) => r !== null)!.configurationVersionId,
      )!;
      assert.equal(await store.createClaimedRun(ctx, used, async () => false), null);
      assert.equal(await storedCopies(), 1);
      assert.equal((await store.getWorkspaceVcs(ctx, ws.id)).lastCommitSha, next);
      await store.recordVcsError(ctx, ws.id, null, "it failed");
      assert.equal((await store.getWorkspaceVcs(ctx, ws.id)).lastError, "it failed");
      assert.equal(await store.claimVcsCommit(ctx, link, next, "d".repeat(40)), true);
      assert.equal((await store.getWorkspaceVcs(ctx, ws.id)).lastError, null);
      // Deleting the workspace takes its link along.
      await store.cancelRun(ctx, started.find((r) => r !== null)!.id, { force: true });
      await store.deleteWorkspace(ctx, ws.name);
      assert.equal((await store.listVcsLinks(ctx)).filter((l) => l.workspaceId === ws.id).length, 0);
    });

    test("a run keeps its source commit and pull request; an uploaded run has none", async () => {
      const ws = await workspace();
      const archive = rawTarGz([{ path: "main.tf", content: "" }]);
      const cv = await store.createConfigurationVersion(ctx, ws.id, archive, limits);
      const source = {
        repository: "o/r",
        branch: "main",
        commitSha: "b".repeat(40),
        message: "Add x",
        author: "A <a@x>",
        pullRequest: null,
      };
      const proposed = {
        ...source,
        branch: "feature",
        pullRequest: { number: 7, url: "https://github.com/o/r/pull/7" },
      };
      const ids: string[] = [];
      for (const given of [source, proposed]) {
        const run = await store.createRun(ctx, {
          workspace: ws.id,
          configurationVersionId: cv.id,
          planOnly: given.pullRequest !== null,
          isDestroy: false,
          message: given.message,
          source: given,
        });
        assert.deepEqual((await store.getRun(ctx, run.id)).source, given);
        ids.push(run.id);
      }
      const upload = await store.createRun(ctx, {
        workspace: ws.id,
        configurationVersionId: cv.id,
        planOnly: false,
        isDestroy: false,
        message: "",
      });
      assert.equal(upload.source, null);
      const { items } = await store.listRuns(ctx, { workspace: ws.id });
      // One clock tick for both: compare by id, not by order.
      assert.deepEqual(Object.fromEntries(items.map((r) => [r.id, r.source?.commitSha ?? null])), {
        [ids[0]!]: source.commitSha,
        [ids[1]!]: source.commitSha,
        [upload.id]: null,
      });
    });
  });
}
