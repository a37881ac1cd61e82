import assert from "node:assert/strict";
import { after, before, test } from "node:test";
import { routes } from "@drover/protocol";
import { startTestServer, type TestServer } from "../support/server.js";
import { deliver, githubPush, processedDelivery } from "../support/webhooks.js";

/*
 * A connection reached through a VCS agent pool with no agent running: its first task waits out
 * DROVER_VCS_AGENT_TASK_SECONDS, and the connection's other workspaces are then not asked in the
 * same delivery or poll round. Each would wait as long again, and a repository linked to twenty
 * workspaces would hold the connection's next delivery (and the poll of every other connection)
 * for twenty deadlines.
 */

const linked = ["away-1", "away-2", "away-3"];
const noAgent = "no VCS agent of the connection's pool took the task in time: is one running?";
let server: TestServer;
let secret: string;

before(async () => {
  server = await startTestServer({ DROVER_VCS_AGENT_TASK_SECONDS: "1", DROVER_VCS_POLL_SECONDS: "0" });
  await server.api(routes.createPool, { body: { name: "away", kind: "vcs" } });
  const connection = await server.api(routes.createVcsConnection, {
    body: { name: "private", provider: "github", url: "https://ghe.internal.invalid", viaPool: "away" },
  });
  assert.equal(connection.status, 201, JSON.stringify(connection.body));
  secret = connection.body.webhookSecret as string;
  await server.api(routes.createPool, { body: { name: "runs" } });
  for (const ws of linked) {
    await server.api(routes.createWorkspace, { body: { name: ws, pool: "runs" } });
    const link = await server.api(routes.linkWorkspaceVcs, {
      params: { ws },
      body: { connection: "private", repository: "org/app", branch: "main", triggerPaths: [] },
    });
    assert.equal(link.status, 200, JSON.stringify(link.body));
  }
});
after(() => server?.stop());

test("a push waits for an agent once, not once per linked workspace; each workspace's outcome says why", async () => {
  const sha = "a".repeat(40);
  const sent = await deliver(server.url, "private", {
    provider: "github",
    event: "push",
    secret,
    body: githubPush("org/app", "main", "0".repeat(40), sha, [
      { id: sha, added: ["main.tf"], modified: [], removed: [] },
    ]),
  });
  assert.equal(sent.status, 202, JSON.stringify(sent.body));
  const delivery = await processedDelivery(server, "private", sent);
  // The workspaces are taken in the links' order, which their random ids decide: one is asked.
  const details = delivery.outcomes.map((o) => `${o.outcome}: ${o.detail}`).sort();
  assert.deepEqual(details, [
    `fetch_failed: ${noAgent}`,
    `fetch_failed: not fetched: ${noAgent}`,
    `fetch_failed: not fetched: ${noAgent}`,
  ]);
  assert.deepEqual(delivery.outcomes.map((o) => o.workspace).sort(), linked);
});

test("a poll round asks the connection once; its other links wait for the next round", async () => {
  const outcomes = await server.pollVcs();
  assert.deepEqual(outcomes.map((o) => o.workspace).sort(), linked);
  assert.deepEqual(outcomes.map((o) => o.failed).sort(), [noAgent, `not polled: ${noAgent}`, `not polled: ${noAgent}`]);
});
