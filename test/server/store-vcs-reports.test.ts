import assert from "node:assert/strict";
import { generateKeyPairSync } from "node:crypto";
import { before, describe, test } from "node:test";
import { store, type StoreContext } from "@drover/server";
import { rawTarGz } from "../support/archives.js";
import { backends } from "../support/databases.js";
import { useStoreDatabase } from "../support/store-database.js";

/*
 * Connections' API bases and GitHub App credentials, and the VCS reports outbox
 * (store/vcs-reports.ts), on both databases: a run with a source queues its reports as it moves,
 * a claim is taken once, a delivery of a version since replaced leaves the report due, and a
 * GitHub-sized comment id (past 2^31) survives the round trip.
 */

const limits = { maxCompressedBytes: 1e6, maxUnpackedBytes: 1e7, maxEntries: 100 };
const privateKey = generateKeyPairSync("rsa", { modulusLength: 2048 })
  .privateKey.export({ type: "pkcs1", format: "pem" })
  .toString();

for (const backend of backends) {
  describe(`vcs reports store: ${backend}`, () => {
    let ctx: StoreContext;
    useStoreDatabase(
      backend,
      () => 1_700_000_000_000,
      (_db, c) => (ctx = c),
    );
    before(async () => {
      await store.createPool(ctx, "p");
    });

    test("API bases default from the provider and web URL; a GitHub App's key is for the client only", async () => {
      const gh = await store.createVcsConnection(ctx, {
        name: "gh",
        provider: "github",
        url: "https://github.com",
        token: "t1",
      });
      assert.equal(gh.apiUrl, "https://api.github.com");
      const ghe = await store.createVcsConnection(ctx, {
        name: "ghe",
        provider: "github",
        url: "https://ghe.example.com",
        githubApp: { appId: "12", installationId: 3_000_000_000, privateKey },
      });
      assert.equal(ghe.apiUrl, "https://ghe.example.com/api/v3");
      assert.equal(ghe.authKind, "github-app");
      assert.deepEqual(ghe.app, { appId: "12", installationId: 3_000_000_000 });
      assert.ok(!JSON.stringify([ghe, await store.listVcsConnections(ctx)]).includes("PRIVATE KEY"));
      const endpoint = await store.vcsEndpoint(ctx, "ghe");
      assert.deepEqual(endpoint.auth, { kind: "github-app", appId: "12", installationId: 3_000_000_000, privateKey });
      const gl = await store.createVcsConnection(ctx, {
        name: "gl",
        provider: "gitlab",
        url: "https://gitlab.example.com",
        apiUrl: "https://gitlab-api.example.com/api/v4",
        token: "t2",
      });
      assert.equal(gl.apiUrl, "https://gitlab-api.example.com/api/v4");
      assert.deepEqual((await store.vcsEndpoint(ctx, "gl")).auth, { kind: "token", token: "t2" });
    });

    test("a pull request's run queues its status; its end queues the comment; deliveries coalesce", async () => {
      const ws = await store.createWorkspace(ctx, {
        name: "infra",
        pool: "p",
        engine: "terraform",
        engineVersion: null,
        workingDirectory: "",
        autoApply: false,
      });
      await store.linkWorkspaceVcs(ctx, ws.id, {
        connection: "gh",
        repository: "org/infra",
        branch: "main",
        triggerPaths: [],
      });
      const cv = await store.createConfigurationVersion(
        ctx,
        ws.id,
        rawTarGz([{ path: "main.tf", content: "" }]),
        limits,
      );
      const sha = "e".repeat(40);
      const run = await store.createRun(ctx, {
        workspace: ws.id,
        configurationVersionId: cv.id,
        planOnly: true,
        isDestroy: false,
        message: "m",
        source: {
          repository: "org/infra",
          branch: "feature",
          commitSha: sha,
          message: "m",
          author: "a",
          pullRequest: { number: 7, url: "https://github.com/org/infra/pull/7" },
        },
      });
      // A run without a source queues nothing.
      await store.createRun(ctx, {
        workspace: ws.id,
        configurationVersionId: cv.id,
        planOnly: true,
        isDestroy: false,
        message: "x",
      });

      const due = await store.dueVcsReports(ctx, 10);
      assert.equal(due.length, 1);
      const status = due[0]!;
      assert.deepEqual(
        [status.kind, status.run_id, status.repository, status.commit_sha, status.pull_request_number, status.version],
        ["status", run.id, "org/infra", sha, 7, 1],
      );
      assert.equal(await store.claimVcsReport(ctx, status, 60_000), true);
      assert.equal(await store.claimVcsReport(ctx, status, 60_000), false, "a report is taken once");
      assert.equal((await store.dueVcsReports(ctx, 10)).length, 0);
      await store.failedVcsReport(ctx, status, "503", ctx.now());
      const retried = (await store.dueVcsReports(ctx, 10))[0]!;
      assert.equal(retried.attempts, 1);
      assert.equal(retried.last_error, "503");

      // The run ends: the status is due again (a new version) and the comment is queued.
      await ctx.db.transaction().execute((trx) => store.queueVcsReports(ctx, trx, run.id, "planned_and_finished"));
      const both = await store.dueVcsReports(ctx, 10);
      assert.deepEqual(both.map((r) => r.kind).sort(), ["comment", "status"]);
      const newer = both.find((r) => r.kind === "status")!;
      assert.equal(newer.version, 2);
      assert.equal(newer.attempts, 0);
      // The older version's delivery does not mark the newer one done.
      await store.deliveredVcsReport(ctx, retried, null);
      assert.equal((await store.dueVcsReports(ctx, 10)).length, 2);
      await store.deliveredVcsReport(ctx, newer, null);
      const comment = both.find((r) => r.kind === "comment")!;
      await store.deliveredVcsReport(ctx, comment, 4_000_000_000);
      assert.equal((await store.dueVcsReports(ctx, 10)).length, 0);
      const kept = (await store.listVcsReports(ctx, ws.id)).find((r) => r.kind === "comment")!;
      assert.equal(Number(kept.comment_id), 4_000_000_000);
      assert.equal(kept.due_at, null);
    });
  });
}
