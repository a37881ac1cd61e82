import assert from "node:assert/strict";
import { generateKeyPairSync } from "node:crypto";
import { after, before, test } from "node:test";
import { DroverError, messageOf } from "@drover/protocol";
import { vcsClient, vcsStatusOf, type VcsClient } from "@drover/vcs";
import { startGithubApi, type GithubApi } from "../support/github-api.js";

/*
 * Every VCS operation against the GitHub stand-in through the real Octokit client: what was
 * sent (method, path, body), what came back, refusals, the deadline, and that neither the
 * token nor a GitHub App's key shows in an error.
 */

const token = "ghp_STANDINtoken0123456789abcdefSECRET";
const sha1 = "a".repeat(40);
const sha2 = "b".repeat(40);
let gh: GithubApi;
let client: VcsClient;

before(async () => {
  gh = await startGithubApi({ token, prefix: "/api/v3" });
  gh.addRepo("org/infra", {
    branches: { main: sha1, "feature/x": sha2 },
    commits: {
      [sha1]: { message: "Add v\n\nbody", author: { name: "Ada", email: "ada@example.com" } },
      [sha2]: { message: "Change v", author: { name: "Bo", email: "bo@example.com" } },
    },
    compare: { [`${sha1}...${sha2}`]: ["main.tf", "modules/a/b.tf"] },
  });
  client = vcsClient({ provider: "github", url: gh.url, apiUrl: gh.apiUrl, auth: { kind: "token", token } });
});
after(async () => gh?.close());

const last = () => gh.calls[gh.calls.length - 1]!;

test("reads: branch head, commit, changed files — each a request under the API base with the token", async () => {
  assert.deepEqual(await client.run({ op: "branchHead", repository: "org/infra", branch: "main" }), { sha: sha1 });
  assert.equal(last().path, "/api/v3/repos/org/infra/branches/main");
  assert.equal(last().headers.authorization, `token ${token}`);
  assert.deepEqual(await client.run({ op: "branchHead", repository: "org/infra", branch: "feature/x" }), { sha: sha2 });
  assert.equal(last().path, "/api/v3/repos/org/infra/branches/feature%2Fx");
  assert.deepEqual(await client.run({ op: "branchHead", repository: "org/infra", branch: "gone" }), { sha: null });
  assert.deepEqual(await client.run({ op: "commit", repository: "org/infra", sha: sha1 }), {
    sha: sha1,
    message: "Add v",
    author: "Ada <ada@example.com>",
  });
  assert.equal(last().path, `/api/v3/repos/org/infra/commits/${sha1}`);
  assert.deepEqual(await client.run({ op: "changedFiles", repository: "org/infra", base: sha1, head: sha2 }), {
    files: ["main.tf", "modules/a/b.tf"],
  });
  assert.equal(last().path, `/api/v3/repos/org/infra/compare/${sha1}...${sha2}?per_page=300`);
  assert.deepEqual(gh.invalid, []);
});

test("writes: a commit status, one comment created then edited, a webhook created then deleted", async () => {
  const targetUrl = "https://drover.example.com/app/workspaces/infra/runs/run_1";
  await client.run({
    op: "setCommitStatus",
    repository: "org/infra",
    sha: sha2,
    state: "pending",
    context: "drover/infra",
    description: "queued",
    targetUrl,
  });
  assert.equal(last().method, "POST");
  assert.equal(last().path, `/api/v3/repos/org/infra/statuses/${sha2}`);
  assert.deepEqual(last().body, {
    state: "pending",
    context: "drover/infra",
    description: "queued",
    target_url: targetUrl,
  });

  const made = await client.run({
    op: "upsertPullRequestComment",
    repository: "org/infra",
    number: 7,
    commentId: null,
    body: "one",
    marker: "drover:vrp-one",
  });
  // Without an id, the pull request's comments are read for the marked one first.
  const [listed, created] = gh.calls.slice(-2);
  assert.equal(listed!.method, "GET");
  assert.equal(listed!.path, "/api/v3/repos/org/infra/issues/7/comments?per_page=100");
  assert.equal(created!.path, "/api/v3/repos/org/infra/issues/7/comments");
  assert.deepEqual(created!.body, { body: "one\n\n<!-- drover:vrp-one -->" });
  const edited = await client.run({
    op: "upsertPullRequestComment",
    repository: "org/infra",
    number: 7,
    commentId: made.commentId,
    body: "two",
    marker: "drover:vrp-one",
  });
  assert.equal(edited.commentId, made.commentId);
  assert.equal(last().method, "PATCH");
  assert.equal(last().path, `/api/v3/repos/org/infra/issues/comments/${made.commentId}`);
  const repo = gh.repos.get("org/infra")!;
  assert.deepEqual([...repo.comments.values()], [{ issue: 7, body: "two\n\n<!-- drover:vrp-one -->" }]);
  // A comment someone deleted is replaced by a new one.
  repo.comments.clear();
  const again = await client.run({
    op: "upsertPullRequestComment",
    repository: "org/infra",
    number: 7,
    commentId: made.commentId,
    body: "three",
    marker: "drover:vrp-one",
  });
  assert.notEqual(again.commentId, made.commentId);
  assert.deepEqual([...repo.comments.values()], [{ issue: 7, body: "three\n\n<!-- drover:vrp-one -->" }]);

  // A creation whose answer is lost made the comment: the retry finds it by its marker and edits
  // it. A later comment carrying the same marker (copied by someone) is not Drover's.
  gh.state.loseCommentAnswers = 1;
  const lost = { op: "upsertPullRequestComment", repository: "org/infra", number: 7, commentId: null } as const;
  await assert.rejects(client.run({ ...lost, body: "four", marker: "drover:vrp-two" }));
  const [made4] = [...repo.comments.entries()].find(([, c]) => c.body.startsWith("four")) ?? [];
  assert.ok(made4 !== undefined, "the comment was made");
  repo.comments.set(made4 + 1_000, { issue: 7, body: "copied\n\n<!-- drover:vrp-two -->" });
  const retried = await client.run({ ...lost, body: "five", marker: "drover:vrp-two" });
  assert.equal(retried.commentId, made4);
  assert.equal(last().method, "PATCH");
  assert.equal(repo.comments.get(made4)!.body, "five\n\n<!-- drover:vrp-two -->");
  assert.equal([...repo.comments.values()].filter((c) => c.body.startsWith("five")).length, 1);
  assert.equal(repo.comments.get(made4 + 1_000)!.body, "copied\n\n<!-- drover:vrp-two -->");
  // A body GitHub keeps with CR LF line ends (edited on the web) still carries its marker.
  repo.comments.set(made4 + 2_000, { issue: 7, body: "edited\r\n\r\n<!-- drover:vrp-three -->\r\n" });
  const crlf = await client.run({ ...lost, body: "six", marker: "drover:vrp-three" });
  assert.equal(crlf.commentId, made4 + 2_000);
  // On a long pull request the marked comment is found on a later page (GitHub gives 100 a page).
  for (let i = 0; i < 150; i++)
    repo.comments.set(made4 + 3_000 + i, { issue: 10, body: i === 120 ? "x\n\n<!-- drover:vrp-four -->" : `c${i}` });
  const paged = await client.run({ ...lost, number: 10, body: "seven", marker: "drover:vrp-four" });
  assert.equal(paged.commentId, made4 + 3_120);
  assert.ok(gh.calls.some((c) => c.path === "/api/v3/repos/org/infra/issues/10/comments?per_page=100&page=2"));
  // From a server older than its VCS agents, an operation without a marker: posted as it is.
  const calls = gh.calls.length;
  await client.run({ ...lost, number: 9, body: "unmarked" });
  assert.deepEqual(
    gh.calls.slice(calls).map((c) => [c.method, c.body]),
    [["POST", { body: "unmarked" }]],
  );

  const secret = "s".repeat(64);
  const hook = await client.run({
    op: "createWebhook",
    repository: "org/infra",
    url: "https://drover.example.com/api/v1/vcs/gh/webhook",
    secret,
  });
  assert.deepEqual(last().body, {
    name: "web",
    active: true,
    events: ["push", "pull_request"],
    config: {
      url: "https://drover.example.com/api/v1/vcs/gh/webhook",
      content_type: "json",
      secret,
      insecure_ssl: "0",
    },
  });
  assert.equal(repo.hooks.size, 1);
  await client.run({ op: "deleteWebhook", repository: "org/infra", webhookId: hook.webhookId });
  assert.equal(last().method, "DELETE");
  assert.equal(last().path, `/api/v3/repos/org/infra/hooks/${hook.webhookId}`);
  assert.equal(repo.hooks.size, 0);
  // Deleting one already gone is done.
  await client.run({ op: "deleteWebhook", repository: "org/infra", webhookId: hook.webhookId });
  assert.deepEqual(gh.invalid, []);
});

test("refusals: a bad token is 401, an unknown repository 404, a forbidden hook 403 — none shows a secret", async () => {
  const bad = vcsClient({
    provider: "github",
    url: gh.url,
    apiUrl: gh.apiUrl,
    auth: { kind: "token", token: "ghp_WRONGwrongWRONG" },
  });
  const refused = await bad.run({ op: "commit", repository: "org/infra", sha: sha1 }).catch((e: unknown) => e);
  assert.ok(refused instanceof DroverError);
  assert.equal(refused.code, "vcs_error");
  assert.equal(vcsStatusOf(refused), 401);
  assert.match(refused.message, /GitHub API call commit failed: 401/);
  assert.ok(!JSON.stringify(refused).includes("WRONGwrong") && !refused.message.includes("WRONGwrong"));

  const missing = await client
    .run({ op: "branchHead", repository: "org/nothing", branch: "main" })
    .catch((e: unknown) => e);
  assert.equal(vcsStatusOf(missing), 404);
  assert.ok(!messageOf(missing).includes(token));

  gh.state.forbidHooks = true;
  const forbidden = await client
    .run({ op: "createWebhook", repository: "org/infra", url: "https://d.example.com/h", secret: "x".repeat(32) })
    .catch((e: unknown) => e);
  gh.state.forbidHooks = false;
  assert.equal(vcsStatusOf(forbidden), 403);
  assert.deepEqual(gh.invalid, []);
});

test("nothing outside the schema is sent: a path in a repository, a bad sha, a URL as a branch", async () => {
  const before = gh.calls.length;
  for (const op of [
    { op: "commit", repository: "org/../admin", sha: sha1 },
    { op: "commit", repository: "org/infra", sha: "HEAD" },
    { op: "branchHead", repository: "org/infra", branch: "../../x" },
    { op: "deleteWebhook", repository: "org/infra", webhookId: -1 },
  ] as const) {
    const err = await client.run(op as Parameters<VcsClient["run"]>[0]).catch((e: unknown) => e);
    assert.ok(err instanceof DroverError && err.code === "bad_request", `${JSON.stringify(op)}: ${messageOf(err)}`);
  }
  assert.equal(gh.calls.length, before);
});

test("a VCS API that does not answer fails at the deadline", async () => {
  const { createServer } = await import("node:net");
  const silent = createServer(() => {});
  await new Promise<void>((r) => silent.listen(0, "127.0.0.1", r));
  const port = (silent.address() as { port: number }).port;
  const slow = vcsClient(
    { provider: "github", url: "http://x", apiUrl: `http://127.0.0.1:${port}`, auth: { kind: "token", token } },
    { deadlineMs: 200 },
  );
  const err = await slow.run({ op: "commit", repository: "org/infra", sha: sha1 }).catch((e: unknown) => e);
  silent.close();
  assert.ok(err instanceof DroverError);
  assert.match(err.message, /no answer within the deadline/);
});

test("a GitHub App whose token request gets no answer fails at the deadline, for git and for API calls", async () => {
  const { createServer } = await import("node:net");
  const silent = createServer(() => {});
  await new Promise<void>((r) => silent.listen(0, "127.0.0.1", r));
  const port = (silent.address() as { port: number }).port;
  const pem = generateKeyPairSync("rsa", { modulusLength: 2048 })
    .privateKey.export({ type: "pkcs1", format: "pem" })
    .toString();
  const app = vcsClient(
    {
      provider: "github",
      url: "http://x",
      apiUrl: `http://127.0.0.1:${port}`,
      auth: { kind: "github-app", appId: "4242", installationId: 99, privateKey: pem },
    },
    { deadlineMs: 200 },
  );
  try {
    for (const call of [() => app.gitToken(), () => app.run({ op: "commit", repository: "org/infra", sha: sha1 })]) {
      const err = await call().catch((e: unknown) => e);
      assert.ok(err instanceof DroverError, messageOf(err));
      assert.match(err.message, /no answer within the deadline/);
    }
  } finally {
    silent.close();
  }
});

test("GitHub App: an installation token is minted with a signed JWT and used; the key never shows", async () => {
  const { privateKey, publicKey } = generateKeyPairSync("rsa", { modulusLength: 2048 });
  const pem = privateKey.export({ type: "pkcs1", format: "pem" }).toString();
  const app = await startGithubApi({
    app: { appId: "4242", installationId: 99, publicKey: publicKey.export({ type: "spki", format: "pem" }).toString() },
  });
  try {
    app.addRepo("org/infra", { branches: { main: sha1 } });
    const c = vcsClient({
      provider: "github",
      url: app.url,
      apiUrl: app.apiUrl,
      auth: { kind: "github-app", appId: "4242", installationId: 99, privateKey: pem },
    });
    assert.deepEqual(await c.run({ op: "branchHead", repository: "org/infra", branch: "main" }), { sha: sha1 });
    const mint = app.calls.find((x) => x.path === "/app/installations/99/access_tokens");
    assert.ok(mint, "no installation token was minted");
    assert.equal(app.minted.size, 1);
    const [used] = [...app.minted];
    assert.equal(app.calls[app.calls.length - 1]!.headers.authorization, `token ${used}`);
    assert.equal(await c.gitToken(), used);
    assert.deepEqual(app.invalid, []);

    // Another app's key: the stand-in refuses the JWT; the error carries neither key nor token.
    const other = generateKeyPairSync("rsa", { modulusLength: 2048 })
      .privateKey.export({ type: "pkcs1", format: "pem" })
      .toString();
    const wrong = vcsClient({
      provider: "github",
      url: app.url,
      apiUrl: app.apiUrl,
      auth: { kind: "github-app", appId: "4242", installationId: 99, privateKey: other },
    });
    const err = await wrong.run({ op: "branchHead", repository: "org/infra", branch: "main" }).catch((e: unknown) => e);
    assert.ok(err instanceof DroverError, messageOf(err));
    assert.equal(vcsStatusOf(err), 401);
    assert.ok(!err.message.includes("PRIVATE KEY") && !err.message.includes(other.slice(40, 80)));
  } finally {
    await app.close();
  }
});
