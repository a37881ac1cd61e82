import assert from "node:assert/strict";
import { before, describe, test } from "node:test";
import type { RunSource } from "@drover/protocol";
import { store, type StoreContext } from "@drover/server";
import { rawTarGz } from "../support/archives.js";
import { backends } from "../support/databases.js";
import { useStoreDatabase } from "../support/store-database.js";

/*
 * Webhook deliveries (store/vcs-deliveries.ts) and superseding waiting runs (store/vcs-supersede.ts)
 * on both databases: one row per (connection, delivery id) however many requests race, one
 * process takes a delivery's work, outcomes listed newest first, and a newer commit cancels only
 * the runs of the same branch (or pull request) that have not started.
 */

const limits = { maxCompressedBytes: 1e6, maxUnpackedBytes: 1e7, maxEntries: 100 };

for (const backend of backends) {
  describe(`vcs deliveries store: ${backend}`, () => {
    let ctx: StoreContext;
    let clock = 1_700_000_000_000;
    useStoreDatabase(
      backend,
      () => clock,
      (_db, c) => (ctx = c),
    );
    let counter = 0;
    const unique = (p: string) => `${p}${++counter}`;
    const connection = () =>
      store.createVcsConnection(ctx, { name: unique("gh"), provider: "github", url: "https://github.com", token: "t" });
    const workspace = () =>
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

    test("a delivery id is stored once per connection, whatever races; one process takes its work", async () => {
      const [a, b] = [await connection(), await connection()];
      const input = (connectionId: string) => ({
        connectionId,
        deliveryId: "72d3162e-cc78-11e3-81ab-4c9367dc0958",
        event: "push",
        summary: "push to main",
        work: JSON.stringify({ kind: "ignored", repository: null, reason: "test" }),
      });
      const raced = await Promise.all([1, 2, 3].map(() => store.recordVcsDelivery(ctx, input(a.id))));
      assert.equal(raced.filter((r) => !r.duplicate).length, 1);
      assert.equal(new Set(raced.map((r) => r.id)).size, 1);
      const again = await store.recordVcsDelivery(ctx, input(a.id));
      assert.deepEqual(again, { id: raced[0]!.id, duplicate: true });
      // Another connection's delivery with the same id is its own.
      const other = await store.recordVcsDelivery(ctx, input(b.id));
      assert.equal(other.duplicate, false);
      assert.notEqual(other.id, again.id);

      assert.deepEqual(
        (await store.unclaimedVcsDeliveries(ctx)).find((d) => d.id === again.id),
        { id: again.id, connectionId: a.id },
        "each unclaimed delivery with its connection, whose chain it joins",
      );
      const claims = await Promise.all([1, 2, 3].map(() => store.claimVcsDelivery(ctx, again.id, 30_000)));
      assert.equal(claims.filter(Boolean).length, 1);
      assert.ok(!(await store.unclaimedVcsDeliveries(ctx)).map((d) => d.id).includes(again.id));
      assert.equal((await store.vcsDeliveryWork(ctx, again.id))?.connectionId, a.id);
      // Given back (its work failed, or the server stopped), it is taken again at the next start, once.
      await store.releaseVcsDelivery(ctx, again.id);
      assert.ok((await store.unclaimedVcsDeliveries(ctx)).map((d) => d.id).includes(again.id));
      assert.equal(
        (await Promise.all([1, 2].map(() => store.claimVcsDelivery(ctx, again.id, 30_000)))).filter(Boolean).length,
        1,
      );
      await store.finishVcsDelivery(ctx, again.id);
      await store.releaseVcsDelivery(ctx, again.id);
      assert.ok(
        !(await store.unclaimedVcsDeliveries(ctx)).map((d) => d.id).includes(again.id),
        "a finished delivery stays finished",
      );
    });

    test("a claim its server stops renewing lapses and the delivery goes back; a renewed one stays taken", async () => {
      const conn = await connection();
      const record = async (deliveryId: string) =>
        (
          await store.recordVcsDelivery(ctx, {
            connectionId: conn.id,
            deliveryId,
            event: "push",
            summary: null,
            work: "{}",
          })
        ).id;
      const [dead, alive, done] = [await record("dead"), await record("alive"), await record("done")];
      for (const id of [dead, alive, done]) assert.equal(await store.claimVcsDelivery(ctx, id, 10_000), true);
      await store.finishVcsDelivery(ctx, done);
      clock += 6_000;
      assert.deepEqual(await store.reclaimLapsedVcsDeliveries(ctx), [], "no claim has lapsed yet");
      await store.renewVcsDeliveryClaim(ctx, alive, 10_000);
      clock += 6_000;
      // Earlier tests' deliveries are never claimed or finished: none is given back.
      assert.deepEqual(await store.reclaimLapsedVcsDeliveries(ctx), [dead]);
      assert.deepEqual(await store.reclaimLapsedVcsDeliveries(ctx), [], "given back once");
      assert.ok((await store.unclaimedVcsDeliveries(ctx)).map((d) => d.id).includes(dead));
      assert.ok(!(await store.unclaimedVcsDeliveries(ctx)).map((d) => d.id).includes(alive));
      assert.equal(await store.claimVcsDelivery(ctx, dead, 10_000), true, "taken again by the next processor");
      // A renewal after the claim went back does not take it again.
      await store.releaseVcsDelivery(ctx, dead);
      await store.renewVcsDeliveryClaim(ctx, dead, 10_000);
      assert.ok((await store.unclaimedVcsDeliveries(ctx)).map((d) => d.id).includes(dead));
      clock += 20_000;
      assert.deepEqual(await store.reclaimLapsedVcsDeliveries(ctx), [alive]);
      assert.equal(
        (await store.listVcsDeliveries(ctx, conn.id)).find((d) => d.deliveryId === "done")?.status,
        "processed",
      );
    });

    test("deliveries older than the retention go, with their outcomes; a replay of a kept one is still a duplicate", async () => {
      const conn = await connection();
      const ws = await workspace();
      const record = (deliveryId: string) =>
        store.recordVcsDelivery(ctx, {
          connectionId: conn.id,
          deliveryId,
          event: "push",
          summary: null,
          work: JSON.stringify({ kind: "ignored", repository: null, reason: "test" }),
        });
      const old = await record("old");
      await store.recordVcsDeliveryOutcomes(ctx, old.id, [
        { workspaceId: ws.id, workspaceName: ws.name, outcome: "ignored", runId: null, detail: null },
      ]);
      clock += store.vcsDeliveryRetentionMs - 1000;
      await record("recent");
      clock += 2000;
      // The earlier tests' deliveries are as old: they go too.
      assert.ok((await store.pruneVcsDeliveries(ctx)) >= 1);
      assert.deepEqual(
        (await store.listVcsDeliveries(ctx, conn.id)).map((d) => d.deliveryId),
        ["recent"],
      );
      const left = await ctx.db
        .selectFrom("vcs_delivery_outcomes")
        .select("delivery_id")
        .where("delivery_id", "=", old.id)
        .execute();
      assert.deepEqual(left, [], "its outcomes went with it");
      assert.equal((await record("recent")).duplicate, true);
      assert.equal(await store.pruneVcsDeliveries(ctx), 0);
    });

    test("deliveries list newest first with each workspace's outcome; superseded runs are marked", async () => {
      const conn = await connection();
      const [w1, w2] = [await workspace(), await workspace()];
      const ids: string[] = [];
      for (const deliveryId of ["d-old", "d-new"]) {
        clock += 1000;
        ids.push(
          (
            await store.recordVcsDelivery(ctx, {
              connectionId: conn.id,
              deliveryId,
              event: "push",
              summary: deliveryId,
              work: "{}",
            })
          ).id,
        );
      }
      await store.recordVcsDeliveryOutcomes(ctx, ids[0]!, [
        { workspaceId: w1.id, workspaceName: w1.name, outcome: "started", runId: "run-a", detail: null },
        { workspaceId: w2.id, workspaceName: w2.name, outcome: "paths_unmatched", runId: null, detail: "no match" },
      ]);
      // Recording again replaces rather than duplicates.
      await store.recordVcsDeliveryOutcomes(ctx, ids[0]!, [
        { workspaceId: w2.id, workspaceName: w2.name, outcome: "other_branch", runId: null, detail: "dev" },
      ]);
      await store.finishVcsDelivery(ctx, ids[0]!);
      await store.markVcsRunsSuperseded(ctx, ["run-a"], "by run run-b");
      const listed = await store.listVcsDeliveries(ctx, conn.name);
      assert.deepEqual(
        listed.map((d) => [d.deliveryId, d.status]),
        [
          ["d-new", "received"],
          ["d-old", "processed"],
        ],
      );
      assert.deepEqual(
        listed[1]!.outcomes.map((o) => [o.workspace, o.outcome, o.runId, o.detail]),
        [
          [w1.name, "superseded", "run-a", "by run run-b"],
          [w2.name, "other_branch", null, "dev"],
        ].sort((x, y) => String(x[0]).localeCompare(String(y[0]))),
      );
      assert.equal((await store.listVcsDeliveries(ctx, conn.name, 1)).length, 1);
      // One delivery, by Drover's id, through its own connection only.
      const one = await store.getVcsDelivery(ctx, conn.name, listed[1]!.id);
      assert.deepEqual(one, listed[1]);
      const other = await connection();
      for (const [c, id] of [
        [other.name, listed[1]!.id],
        [conn.name, "vdel-none"],
      ] as const)
        await assert.rejects(store.getVcsDelivery(ctx, c, id), (e: { code?: string }) => e.code === "not_found");
      // A deleted connection takes its deliveries along.
      await store.deleteVcsConnection(ctx, conn.name);
      const left = await ctx.db
        .selectFrom("vcs_deliveries")
        .select("id")
        .where("connection_id", "=", conn.id)
        .execute();
      assert.equal(left.length, 0);
    });

    test("a newer commit cancels the runs of its branch or pull request that have not started", async () => {
      const ws = await workspace();
      const cv = await store.createConfigurationVersion(
        ctx,
        ws.id,
        rawTarGz([{ path: "main.tf", content: "" }]),
        limits,
      );
      // A tick per run: the next in line is the oldest.
      const run = (source: RunSource) => (
        (clock += 1),
        store.createRun(ctx, {
          workspace: ws.id,
          configurationVersionId: cv.id,
          planOnly: source.pullRequest != null,
          isDestroy: false,
          message: source.message,
          source,
        })
      );
      const main = { repository: "o/r", branch: "main", message: "m", author: "A", pullRequest: null };
      const pr = { ...main, branch: "feature", pullRequest: { number: 3, url: "https://github.com/o/r/pull/3" } };
      const first = await run({ ...main, commitSha: "1".repeat(40) });
      const proposal = await run({ ...pr, commitSha: "2".repeat(40) });
      const otherPr = await run({ ...pr, pullRequest: { number: 4, url: "u" }, commitSha: "3".repeat(40) });
      const second = await run({ ...main, commitSha: "4".repeat(40) });
      assert.equal((await store.getRun(ctx, first.id)).status, "queued");
      assert.equal(second.status, "pending");
      const gone = await store.supersedeQueuedRuns(ctx, {
        workspaceId: ws.id,
        repository: "o/r",
        keepRunId: second.id,
        branch: "main",
        pullRequest: null,
        reason: "newer",
      });
      assert.deepEqual(gone, [first.id]);
      const canceled = await store.getRun(ctx, first.id);
      assert.equal(canceled.status, "canceled");
      assert.equal(canceled.errorMessage, "superseded: newer");
      // The pull requests' runs are not the branch's; plan-only, they were queued beside the
      // workspace's queue from the start, and the branch's next run took the workspace.
      assert.equal((await store.getRun(ctx, proposal.id)).status, "queued");
      assert.equal((await store.getRun(ctx, otherPr.id)).status, "queued");
      assert.equal((await store.getRun(ctx, second.id)).status, "queued");
      const newer = await run({ ...pr, commitSha: "5".repeat(40) });
      const prGone = await store.supersedeQueuedRuns(ctx, {
        workspaceId: ws.id,
        repository: "o/r",
        keepRunId: newer.id,
        branch: "feature",
        pullRequest: 3,
        reason: "newer pr commit",
      });
      assert.deepEqual(prGone, [proposal.id]);
      assert.equal((await store.getRun(ctx, otherPr.id)).status, "queued", "another pull request's plan stays");
      assert.equal((await store.getRun(ctx, second.id)).status, "queued");
    });
  });
}
