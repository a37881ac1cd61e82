import assert from "node:assert/strict";
import { after, before, test } from "node:test";
import { DroverError, messageOf } from "@drover/protocol";
import { vcsClient, vcsStatusOf, type VcsClient } from "@drover/vcs";
import { startGitlabApi, type GitlabApi } from "../support/gitlab-api.js";

/*
 * Every VCS operation against the GitLab stand-in through the real Gitbeaker client: what was
 * sent, what came back, the refusals, and that the token never shows in an error.
 */

const token = "glpat-STANDINtoken0123456789SECRET";
const sha1 = "c".repeat(40);
const sha2 = "d".repeat(40);
let gl: GitlabApi;
let client: VcsClient;

before(async () => {
  gl = await startGitlabApi({ token });
  gl.addProject("group/sub/infra", {
    branches: { main: sha1, "feature/x": sha2 },
    commits: {
      [sha1]: { message: "Add v\n\nbody", author: { name: "Ada", email: "ada@example.com" } },
      [sha2]: { message: "Change v", author: { name: "Bo", email: "bo@example.com" } },
    },
    compare: { [`${sha1}...${sha2}`]: ["main.tf", "modules/a/b.tf"] },
  });
  client = vcsClient({ provider: "gitlab", url: gl.url, apiUrl: gl.apiUrl, auth: { kind: "token", token } });
});
after(async () => gl?.close());

const last = () => gl.calls[gl.calls.length - 1]!;
const project = "/api/v4/projects/group%2Fsub%2Finfra";

test("reads: branch head, commit, changed files — the project path one encoded segment, the token in PRIVATE-TOKEN", async () => {
  assert.deepEqual(await client.run({ op: "branchHead", repository: "group/sub/infra", branch: "main" }), {
    sha: sha1,
  });
  assert.equal(last().path, `${project}/repository/branches/main`);
  assert.equal(last().headers["private-token"], token);
  assert.deepEqual(await client.run({ op: "branchHead", repository: "group/sub/infra", branch: "feature/x" }), {
    sha: sha2,
  });
  assert.equal(last().path, `${project}/repository/branches/feature%2Fx`);
  assert.deepEqual(await client.run({ op: "branchHead", repository: "group/sub/infra", branch: "gone" }), {
    sha: null,
  });
  assert.deepEqual(await client.run({ op: "commit", repository: "group/sub/infra", sha: sha1 }), {
    sha: sha1,
    message: "Add v",
    author: "Ada <ada@example.com>",
  });
  assert.equal(last().path, `${project}/repository/commits/${sha1}`);
  assert.deepEqual(await client.run({ op: "changedFiles", repository: "group/sub/infra", base: sha1, head: sha2 }), {
    files: ["main.tf", "modules/a/b.tf"],
  });
  assert.equal(last().path, `${project}/repository/compare?from=${sha1}&to=${sha2}&straight=false`);
  assert.deepEqual(gl.invalid, []);
});

test("writes: a commit status (twice the same state is fine), one note created then edited, a webhook", async () => {
  const targetUrl = "https://drover.example.com/app/workspaces/infra/runs/run_1";
  const status = {
    op: "setCommitStatus",
    repository: "group/sub/infra",
    sha: sha2,
    context: "drover/infra",
    targetUrl,
  } as const;
  await client.run({ ...status, state: "pending", description: "Queued" });
  assert.equal(last().method, "POST");
  assert.equal(last().path, `${project}/statuses/${sha2}`);
  assert.deepEqual(last().body, {
    state: "pending",
    name: "drover/infra",
    description: "Queued",
    target_url: targetUrl,
  });
  await client.run({ ...status, state: "pending", description: "Queued" });
  await client.run({ ...status, state: "failure", description: "Errored" });
  assert.deepEqual(
    gl.projects.get("group/sub/infra")!.statuses.map((s) => s.state),
    ["pending", "failed"],
  );

  const made = await client.run({
    op: "upsertPullRequestComment",
    repository: "group/sub/infra",
    number: 3,
    commentId: null,
    body: "one",
    marker: "drover:vrp-one",
  });
  const [listed, created] = gl.calls.slice(-2);
  assert.equal(listed!.method, "GET");
  assert.equal(listed!.path.split("?")[0], `${project}/merge_requests/3/notes`);
  assert.equal(created!.path, `${project}/merge_requests/3/notes`);
  assert.deepEqual(created!.body, { body: "one\n\n<!-- drover:vrp-one -->" });
  const edited = await client.run({
    op: "upsertPullRequestComment",
    repository: "group/sub/infra",
    number: 3,
    commentId: made.commentId,
    body: "two",
    marker: "drover:vrp-one",
  });
  assert.equal(edited.commentId, made.commentId);
  assert.equal(last().method, "PUT");
  assert.equal(last().path, `${project}/merge_requests/3/notes/${made.commentId}`);
  const notes = gl.projects.get("group/sub/infra")!.notes;
  assert.deepEqual([...notes.values()], [{ mr: 3, body: "two\n\n<!-- drover:vrp-one -->" }]);

  // A creation whose answer is lost made the note: the retry finds it by its marker and edits it.
  gl.state.loseNoteAnswers = 1;
  const lost = { op: "upsertPullRequestComment", repository: "group/sub/infra", number: 3, commentId: null } as const;
  await assert.rejects(client.run({ ...lost, body: "three", marker: "drover:vrp-two" }));
  const [made3] = [...notes.entries()].find(([, n]) => n.body.startsWith("three")) ?? [];
  assert.ok(made3 !== undefined, "the note was made");
  const retried = await client.run({ ...lost, body: "four", marker: "drover:vrp-two" });
  assert.equal(retried.commentId, made3);
  assert.equal(last().method, "PUT");
  assert.deepEqual(
    [...notes.values()].map((n) => n.body.split("\n")[0]),
    ["two", "four"],
  );
  // On a long merge request the marked note is found on a later page (GitLab gives 100 a page).
  for (let i = 0; i < 150; i++)
    notes.set(made3 + 1_000 + i, { mr: 5, body: i === 120 ? "x\n\n<!-- drover:vrp-three -->" : `n${i}` });
  const paged = await client.run({ ...lost, number: 5, body: "five", marker: "drover:vrp-three" });
  assert.equal(paged.commentId, made3 + 1_120);
  assert.ok(gl.calls.some((c) => c.method === "GET" && /merge_requests\/5\/notes\?.*page=2/.test(c.path)));

  const secret = "s".repeat(64);
  const hook = await client.run({
    op: "createWebhook",
    repository: "group/sub/infra",
    url: "https://drover.example.com/api/v1/vcs/gl/webhook",
    secret,
  });
  assert.deepEqual(last().body, {
    url: "https://drover.example.com/api/v1/vcs/gl/webhook",
    push_events: true,
    merge_requests_events: true,
    token: secret,
    enable_ssl_verification: true,
  });
  await client.run({ op: "deleteWebhook", repository: "group/sub/infra", webhookId: hook.webhookId });
  assert.equal(last().method, "DELETE");
  assert.equal(last().path, `${project}/hooks/${hook.webhookId}`);
  assert.equal(gl.projects.get("group/sub/infra")!.hooks.size, 0);
  assert.deepEqual(gl.invalid, []);
});

test("refusals: a bad token is 401, an unknown project 404; neither error shows the token", async () => {
  const bad = vcsClient({
    provider: "gitlab",
    url: gl.url,
    apiUrl: gl.apiUrl,
    auth: { kind: "token", token: "glpat-WRONGwrongWRONG" },
  });
  const refused = await bad.run({ op: "commit", repository: "group/sub/infra", sha: sha1 }).catch((e: unknown) => e);
  assert.ok(refused instanceof DroverError);
  assert.equal(vcsStatusOf(refused), 401);
  assert.match(refused.message, /GitLab API call commit failed: 401/);
  assert.ok(!refused.message.includes("WRONGwrong") && !JSON.stringify(refused).includes("WRONGwrong"));
  const missing = await client
    .run({ op: "branchHead", repository: "group/none", branch: "main" })
    .catch((e: unknown) => e);
  assert.equal(vcsStatusOf(missing), 404, messageOf(missing));
  assert.ok(!messageOf(missing).includes(token));
});

test("a GitLab connection's API URL must end in /api/v4", () => {
  assert.throws(
    () => vcsClient({ provider: "gitlab", url: gl.url, apiUrl: `${gl.url}/api/v3`, auth: { kind: "token", token } }),
    /ends in \/api\/v4/,
  );
});
