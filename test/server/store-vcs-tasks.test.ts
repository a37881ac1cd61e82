import assert from "node:assert/strict";
import { randomBytes } from "node:crypto";
import { before, describe, test } from "node:test";
import { DroverError, type Agent } from "@drover/protocol";
import { relayClient, store, type StoreContext } from "@drover/server";
import { rawTarGz } from "../support/archives.js";
import { backends } from "../support/databases.js";
import { useStoreDatabase } from "../support/store-database.js";

/*
 * Pool kinds and VCS agents' tasks (store/vcs-tasks.ts) on both databases: work of one kind never
 * reaches a pool of the other, tasks are leased with attempts and fenced, an expired lease is
 * taken by another agent, results are checked against the operation's schema, and a fetch's
 * archive is checked like a CLI upload.
 */

async function rejectsWith(promise: Promise<unknown>, code: string, message: RegExp): Promise<void> {
  await assert.rejects(promise, (err: unknown) => {
    assert.ok(err instanceof DroverError, String(err));
    assert.equal(err.code, code, err.message);
    assert.match(err.message, message);
    return true;
  });
}

const sha = "a".repeat(40);
const limits = { maxCompressedBytes: 4096, maxUnpackedBytes: 1e6, maxEntries: 100 };

for (const backend of backends) {
  describe(`vcs tasks store: ${backend}`, () => {
    let ctx: StoreContext;
    let clock = 1_700_000_000_000;
    useStoreDatabase(
      backend,
      () => clock,
      (_db, c) => (ctx = c),
    );
    let counter = 0;
    const unique = (p: string) => `${p}${++counter}`;
    const agentOf = async (pool: string): Promise<Agent> => {
      const tok = await store.createPoolToken(ctx, pool, "t", "http://drover.example");
      const { agent } = await store.registerAgent(ctx, {
        name: unique("a"),
        version: "1",
        driver: "local",
        capacity: 1,
        poolId: (await store.getPool(ctx, pool)).id,
        poolTokenId: tok.id,
      });
      return agent;
    };
    let vcsPool: string;
    let connectionId: string;
    let poolId: string;
    before(async () => {
      await store.createPool(ctx, "runs-pool");
      vcsPool = (await store.createPool(ctx, "relay", "vcs")).name;
      poolId = (await store.getPool(ctx, vcsPool)).id;
      const conn = await store.createVcsConnection(ctx, {
        name: "private-ghe",
        provider: "github",
        url: "https://ghe.internal",
        viaPool: vcsPool,
      });
      connectionId = conn.id;
    });
    const operation = { op: "branchHead", repository: "org/infra", branch: "main" };
    const enqueue = (task: Parameters<typeof store.enqueueVcsTask>[1]["task"] = { kind: "operation", operation }) =>
      store.enqueueVcsTask(ctx, { poolId, connectionId, task, deadlineMs: 600_000 });

    test("pools have a kind; workspaces and connections go only to pools of theirs", async () => {
      assert.equal((await store.getPool(ctx, "runs-pool")).kind, "runs");
      assert.deepEqual((await store.listPools(ctx)).map((p) => [p.name, p.kind]).sort(), [
        ["relay", "vcs"],
        ["runs-pool", "runs"],
      ]);
      const ws = { engine: "terraform" as const, engineVersion: null, workingDirectory: "", autoApply: false };
      await rejectsWith(
        store.createWorkspace(ctx, { ...ws, name: unique("ws"), pool: vcsPool }),
        "forbidden",
        /relay is a vcs pool: a workspace needs a runs pool/,
      );
      const placed = await store.createWorkspace(ctx, { ...ws, name: unique("ws"), pool: "runs-pool" });
      await rejectsWith(
        store.updateWorkspace(ctx, placed.id, { pool: vcsPool }),
        "forbidden",
        /a workspace needs a runs pool/,
      );
      await rejectsWith(
        store.createVcsConnection(ctx, {
          name: unique("c"),
          provider: "github",
          url: "https://github.com",
          viaPool: "runs-pool",
        }),
        "forbidden",
        /runs-pool is a runs pool: a connection through VCS agents needs a vcs pool/,
      );
      await rejectsWith(
        store.createVcsConnection(ctx, { name: unique("c"), provider: "github", url: "https://github.com" }),
        "bad_request",
        /a token or a GitHub App is needed/,
      );
      const shown = await store.getVcsConnection(ctx, "private-ghe");
      assert.equal(shown.viaPool, "relay");
      assert.deepEqual(await store.vcsRoute(ctx, connectionId), {
        via: "pool",
        poolId,
        connectionId,
        connection: "private-ghe",
      });
      // A runs pool's agent is refused tasks; a pool relaying a connection is not deleted.
      await rejectsWith(
        store.pollForVcsTask(ctx, await agentOf("runs-pool"), 0),
        "forbidden",
        /runs-pool is a runs pool: taking VCS tasks needs a vcs pool/,
      );
      await rejectsWith(store.deletePool(ctx, vcsPool), "conflict", /relays VCS connection private-ghe/);
    });

    test("only the closed operations are queued", async () => {
      for (const bad of [
        { op: "proxy", url: "https://evil.example/" },
        { op: "branchHead", repository: "../etc", branch: "main" },
        { op: "branchHead", repository: "https://evil.example/o/r", branch: "main" },
        { op: "branchHead", repository: "org/infra", branch: "a..b" },
        { op: "commit", repository: "org/infra", sha: "HEAD" },
        // Well formed, but a webhook would point the private VCS's events wherever the server says.
        { op: "createWebhook", repository: "org/infra", url: "https://evil.example/hook", secret: "0123456789abcdef" },
        { op: "deleteWebhook", repository: "org/infra", webhookId: 7 },
      ])
        await rejectsWith(enqueue({ kind: "operation", operation: bad }), "bad_request", /not a valid VCS operation/);
      await rejectsWith(
        enqueue({ kind: "fetch", fetch: { repository: "org/../x", sha, since: null } }),
        "bad_request",
        /not a valid VCS fetch/,
      );
    });

    test("a task is leased with an attempt; an expired lease goes to another agent, the first is fenced off", async () => {
      const [first, second] = [await agentOf(vcsPool), await agentOf(vcsPool)];
      const id = await enqueue();
      const taken = await store.claimVcsTask(ctx, first);
      assert.deepEqual(taken, { id, attempt: 1, connection: "private-ghe", kind: "operation", operation });
      assert.equal(await store.claimVcsTask(ctx, second), null, "a leased task is not handed out twice");
      await store.renewVcsTask(ctx, first, id, 1);
      clock += 20_000;
      assert.equal(await store.claimVcsTask(ctx, second), null, "a renewed lease holds");
      clock += 31_000;
      const again = await store.claimVcsTask(ctx, second);
      assert.equal(again?.attempt, 2);
      await rejectsWith(store.renewVcsTask(ctx, first, id, 1), "stale_attempt", /no longer this agent's/);
      await rejectsWith(
        store.completeVcsTask(ctx, first, id, { attempt: 1, result: { sha } }),
        "stale_attempt",
        /no longer this agent's/,
      );
      // The result is checked against the operation's result schema.
      await rejectsWith(
        store.completeVcsTask(ctx, second, id, { attempt: 2, result: { sha: "not-a-sha" } }),
        "bad_request",
        /result of branchHead/,
      );
      const waited = store.awaitVcsTask(ctx, id);
      await store.completeVcsTask(ctx, second, id, { attempt: 2, result: { sha } });
      assert.deepEqual((await waited).result, { sha });
    });

    test("relayClient runs an operation through a task and waits for its end by event", async () => {
      const agent = await agentOf(vcsPool);
      const client = relayClient(ctx, { poolId, connectionId, deadlineMs: 600_000 });
      const answer = client.run({ op: "branchHead", repository: "org/infra", branch: "main" });
      const task = await store.pollForVcsTask(ctx, agent, 5_000);
      assert.ok(task);
      await store.completeVcsTask(ctx, agent, task.id, { attempt: task.attempt, result: { sha } });
      assert.deepEqual(await answer, { sha });
      // A failure keeps its code, and no agent at all meets the deadline with a clear error.
      const failing = client.run({ op: "branchHead", repository: "org/infra", branch: "main" });
      const next = await store.pollForVcsTask(ctx, agent, 5_000);
      assert.ok(next);
      await store.completeVcsTask(ctx, agent, next.id, {
        attempt: next.attempt,
        error: "the archive is too large",
        code: "payload_too_large",
      });
      await rejectsWith(failing, "payload_too_large", /the VCS agent failed: the archive is too large/);
      const lonely = relayClient(ctx, { poolId, connectionId, deadlineMs: 0 });
      await rejectsWith(
        lonely.run({ op: "branchHead", repository: "org/infra", branch: "main" }),
        "internal",
        /no VCS agent of the connection's pool took the task in time/,
      );
    });

    test("a fetch's archive is checked like an upload and becomes the workspace's configuration version", async () => {
      const agent = await agentOf(vcsPool);
      const ws = await store.createWorkspace(ctx, {
        name: unique("ws"),
        pool: "runs-pool",
        engine: "terraform",
        engineVersion: null,
        workingDirectory: "",
        autoApply: false,
      });
      const fetch = {
        repository: "org/infra",
        sha,
        since: null,
        triggerPaths: [],
        workingDirectory: "",
        maxBytes: 4096,
      };
      const id = await store.enqueueVcsTask(ctx, {
        poolId,
        connectionId,
        workspaceId: ws.id,
        task: { kind: "fetch", fetch },
        deadlineMs: 600_000,
      });
      const task = await store.claimVcsTask(ctx, agent);
      assert.equal(task?.id, id);
      await rejectsWith(
        store.completeVcsTask(ctx, agent, id, { attempt: 1, result: { wanted: true, author: "A", message: "m" } }),
        "bad_request",
        /uploaded no archive/,
      );
      await rejectsWith(
        store.storeVcsArchive(
          ctx,
          agent,
          id,
          1,
          rawTarGz([{ path: "main.tf", content: randomBytes(8_000).toString("hex") }]),
          limits,
        ),
        "payload_too_large",
        /./,
      );
      await rejectsWith(
        store.storeVcsArchive(ctx, agent, id, 1, rawTarGz([{ path: "README.md", content: "hi" }]), limits),
        "invalid_archive",
        /nothing to plan/,
      );
      await store.storeVcsArchive(ctx, agent, id, 1, rawTarGz([{ path: "main.tf", content: "# ok\n" }]), limits);
      await store.completeVcsTask(ctx, agent, id, { attempt: 1, result: { wanted: true, author: "A", message: "m" } });
      const outcome = await store.awaitVcsTask(ctx, id);
      assert.equal((await store.listConfigurationVersions(ctx, ws.id))[0]?.id, outcome.configurationVersionId);
    });

    test("an agent forwards webhooks only for a connection its own pool relays", async () => {
      const agent = await agentOf(vcsPool);
      assert.deepEqual(await store.relayedConnection(ctx, agent, "private-ghe"), {
        id: connectionId,
        provider: "github",
      });
      await rejectsWith(store.relayedConnection(ctx, agent, "nope"), "not_found", /no VCS connection/);
      await store.createPool(ctx, "other-relay", "vcs");
      await rejectsWith(
        store.relayedConnection(ctx, await agentOf("other-relay"), "private-ghe"),
        "forbidden",
        /not relayed by this agent's pool/,
      );
    });
  });
}
