import assert from "node:assert/strict";
import { createHmac } from "node:crypto";
import type { IncomingMessage } from "node:http";
import { test } from "node:test";
import type { VcsOperation, VcsTaskEnvelope } from "@drover/protocol";
import { checkedTask, parseVcsConnections, runTask, verifiedDelivery, type TaskContext } from "@drover/agent/vcs";
import type { VcsClient } from "@drover/vcs";

/*
 * The VCS agent's own checks, without a server: a task outside the closed operations is refused
 * before anything runs, API operations go to the injected provider client (a recording stand-in
 * here), no message carries a connection's secrets, and webhook deliveries are verified with the
 * connection's secret from the agent's file.
 */

const token = "glpat-AGENTsecret0123456789";
const connections = parseVcsConnections(
  JSON.stringify({
    gl: { provider: "gitlab", url: "https://gitlab.internal", token, webhookSecret: "hook-secret-gl" },
    gh: { provider: "github", url: "https://ghe.internal", token, webhookSecret: "hook-secret-gh" },
  }),
  "connections.json",
);
const sha = "d".repeat(40);

function context(client?: VcsClient): TaskContext & { calls: VcsOperation[] } {
  const calls: VcsOperation[] = [];
  return {
    calls,
    connections,
    clientFor: client && ((_name, endpoint) => (assert.deepEqual(endpoint.auth, { kind: "token", token }), client)),
    upload: async () => assert.fail("no upload expected"),
    signal: new AbortController().signal,
  };
}

const task = (operation: object, connection = "gl"): VcsTaskEnvelope => ({
  id: "vtask-1",
  attempt: 1,
  connection,
  kind: "operation",
  operation,
});

test("the connections file gets API bases from the provider's URL; a bad file names the path, not the token", () => {
  assert.equal(connections.get("gl")?.apiUrl, "https://gitlab.internal/api/v4");
  assert.equal(connections.get("gh")?.apiUrl, "https://ghe.internal/api/v3");
  assert.throws(
    () => parseVcsConnections(JSON.stringify({ x: { provider: "bitbucket", url: "https://b", token } }), "f.json"),
    (err: Error) => /f\.json is not a map/.test(err.message) && !err.message.includes(token),
  );
});

test("tasks outside the closed operations are refused before anything runs", () => {
  for (const bad of [
    { op: "request", method: "GET", url: "https://evil.example/" },
    { op: "branchHead", repository: "../../etc/passwd", branch: "main" },
    { op: "branchHead", repository: "evil.example:443/o/r", branch: "main" },
    { op: "commit", repository: "org/r", sha: "HEAD~1" },
    { op: "createWebhook", repository: "org/r", url: "file:///etc/passwd", secret: "0123456789abcdef" },
    // Webhooks are registered by hand at the agents' listener: the server may not say where events go.
    { op: "createWebhook", repository: "org/r", url: "https://evil.example/hook", secret: "0123456789abcdef" },
    { op: "deleteWebhook", repository: "org/r", webhookId: 7 },
    // A marker that would end the hidden HTML comment and show text of the server's choosing.
    ...["drover:x --> shown <!--", "other:vrp-1", "drover:"].map((marker) => ({
      op: "upsertPullRequestComment",
      repository: "org/r",
      number: 7,
      commentId: null,
      body: "b",
      marker,
    })),
  ]) {
    const checked = checkedTask(task(bad));
    assert.ok("refused" in checked, JSON.stringify(bad));
    assert.match(checked.refused, /refused: not one of the VCS operations/);
  }
  assert.ok("refused" in checkedTask({ ...task({ op: "branchHead", repository: "o/r", branch: "m" }), extra: 1 }));
  assert.ok("task" in checkedTask(task({ op: "commit", repository: "group/sub/project", sha })));
});

test("API operations go to the injected provider client; without one, or for an unknown connection, the task fails", async () => {
  const ctx = context({
    async run(operation) {
      ctx.calls.push(operation);
      return { commentId: 42 } as never;
    },
    gitToken: async () => token,
  });
  const comment = {
    op: "upsertPullRequestComment",
    repository: "g/p",
    number: 7,
    commentId: null,
    body: "plan: 1 to add",
    marker: "drover:vrp-0123456789abcdef",
  };
  const checked = checkedTask(task(comment));
  assert.ok("task" in checked);
  assert.deepEqual(await runTask(checked.task, ctx), { result: { commentId: 42 } });
  assert.deepEqual(ctx.calls, [comment]);
  assert.deepEqual(await runTask(checked.task, context()), {
    error: "this VCS agent has no provider API client for upsertPullRequestComment",
    code: "bad_request",
  });
  const elsewhere = checkedTask(task(comment, "unknown"));
  assert.ok("task" in elsewhere);
  const missing = await runTask(elsewhere.task, ctx);
  assert.ok("error" in missing && missing.code === "not_found", JSON.stringify(missing));
});

test("a client's error reaches the server without the connection's token", async () => {
  const leaky: VcsClient = {
    async run() {
      throw new Error(`401 from https://oauth2:${token}@gitlab.internal: Authorization: Bearer ${token}`);
    },
    gitToken: async () => token,
  };
  const checked = checkedTask(task({ op: "commit", repository: "g/p", sha }));
  assert.ok("task" in checked);
  const end = await runTask(checked.task, context(leaky));
  assert.ok("error" in end);
  assert.ok(!end.error.includes(token), end.error);
  assert.match(end.error, /\[redacted\]/);
});

test("webhook deliveries are verified with the connection's own secret", () => {
  const body = Buffer.from('{"object_kind":"push"}');
  const req = (headers: Record<string, string>) => ({ headers }) as unknown as IncomingMessage;
  const gl = connections.get("gl")!;
  assert.deepEqual(
    verifiedDelivery(
      gl,
      req({ "x-gitlab-token": "hook-secret-gl", "x-gitlab-event": "Push Hook", "x-gitlab-event-uuid": "u-1" }),
      body,
    ),
    { event: "Push Hook", deliveryId: "u-1" },
  );
  // GitLab's Idempotency-Key is what a retry keeps: it names the delivery when sent.
  assert.equal(
    verifiedDelivery(
      gl,
      req({ "x-gitlab-token": "hook-secret-gl", "idempotency-key": "k-1", "x-gitlab-event-uuid": "u-2" }),
      body,
    )?.deliveryId,
    "k-1",
  );
  // An id the server would refuse (too long, unprintable): the body's digest instead.
  assert.match(
    verifiedDelivery(gl, req({ "x-gitlab-token": "hook-secret-gl", "idempotency-key": "k".repeat(300) }), body)
      ?.deliveryId ?? "",
    /^sha256:[0-9a-f]{64}$/,
  );
  assert.equal(verifiedDelivery(gl, req({ "x-gitlab-token": "hook-secret-gh" }), body), undefined);
  assert.equal(verifiedDelivery(gl, req({}), body), undefined);
  const gh = connections.get("gh")!;
  const sig = `sha256=${createHmac("sha256", "hook-secret-gh").update(body).digest("hex")}`;
  assert.equal(
    verifiedDelivery(gh, req({ "x-hub-signature-256": sig, "x-github-delivery": "g-1" }), body)?.deliveryId,
    "g-1",
  );
  assert.equal(verifiedDelivery(gh, req({ "x-hub-signature-256": sig }), Buffer.from("tampered")), undefined);
  // A GitLab-style token does not pass for a GitHub connection.
  assert.equal(verifiedDelivery(gh, req({ "x-gitlab-token": "hook-secret-gh" }), body), undefined);
});
