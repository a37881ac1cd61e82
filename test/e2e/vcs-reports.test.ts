import assert from "node:assert/strict";
import { mkdirSync, mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { after, before, test } from "node:test";
import { routes } from "@drover/protocol";
import { defaultArchiveLimits } from "@drover/runtime";
import { fetchCommit, store } from "@drover/server";
import { pino } from "pino";
import { startGithubApi, type GithubApi } from "../support/github-api.js";
import { commitAndPush, gitAs, hostedRepository } from "../support/git-repo.js";
import { startGitHttpServer } from "../support/git-http-server.js";
import { lookUntil } from "../support/poll.js";
import { startStack, type Stack } from "../support/stack.js";
import { linkArgs } from "../support/vcs-cli.js";

/*
 * Reports to the VCS, end to end: a real server and agent plan commits fetched over real git,
 * and the GitHub stand-in records what Drover tells it — the webhook linking registers, a
 * commit status per run (pending, then success or failure with the plan summary and the run's
 * page), one pull-request comment edited in place, and reports held back by an API outage
 * delivered once it ends.
 */

const token = "ghp_REPORTtoken0123456789abcdefSECRET";
const logLines: string[] = [];
let stack: Stack;
let gh: GithubApi;
let git: Awaited<ReturnType<typeof startGitHttpServer>>;
let root: string;
let work: string;
const sh = gitAs("Ada", "ada@example.com");

function commit(message: string, files: Record<string, string>): string {
  const sha = commitAndPush(sh, work, "feature", message, files);
  gh.repos.get("org/infra")!.commits[sha] = { message, author: { name: "Ada", email: "ada@example.com" } };
  return sha;
}

const resources = (n: number) =>
  Array.from({ length: n }, (_, i) => `resource "terraform_data" "r${i}" {\n  input = "${i}"\n}\n`).join("");

const waitFor = <T>(what: string, look: () => Promise<T | undefined> | T | undefined, timeoutMs?: number) =>
  lookUntil(what, look, {
    ...(timeoutMs === undefined ? {} : { timeoutMs }),
    diagnose: () => JSON.stringify(gh.calls.slice(-5)),
  });

/** A speculative run of `sha` for a pull request (7 unless told), as a pull-request webhook starts one. */
async function pullRequestRun(sha: string, pullRequest = 7): Promise<string> {
  const ctx = stack.server.store;
  const fetched = await fetchCommit(ctx, {
    access: { provider: "github", url: git.url, token },
    repository: "org/infra",
    branch: "feature",
    sha,
    workspace: "infra",
    limits: defaultArchiveLimits,
  });
  assert.ok(fetched);
  const run = await store.createRun(ctx, {
    workspace: "infra",
    configurationVersionId: fetched.configurationVersion.id,
    planOnly: true,
    isDestroy: false,
    message: fetched.source.message,
    source: {
      ...fetched.source,
      pullRequest: { number: pullRequest, url: `https://github.example/org/infra/pull/${pullRequest}` },
    },
  });
  return run.id;
}

const statusesOf = (sha: string) => gh.repos.get("org/infra")!.statuses.filter((s) => s.sha === sha);

before(async () => {
  root = mkdtempSync(join(tmpdir(), "drover-vcs-reports-"));
  mkdirSync(join(root, "org"));
  work = hostedRepository(sh, root, "org/infra");
  git = await startGitHttpServer(root, undefined, { basicAuth: { user: "x-access-token", password: token } });
  gh = await startGithubApi({ token, prefix: "/api/v3" });
  gh.addRepo("org/infra");
  stack = await startStack(
    {},
    {
      logger: pino({ level: "debug" }, { write: (line: string) => void logLines.push(line) }),
      vcsReportTiming: { sweepMs: 300, backoffMs: 50, maxBackoffMs: 200 },
    },
  );
  await stack.startAgent("reports-agent");
});
after(async () => {
  await stack?.stop();
  await git?.close();
  await gh?.close();
  rmSync(root, { recursive: true, force: true });
});

test("linking registers the webhook; a pull request's runs report statuses and one comment, edited in place", async () => {
  const tokenFile = join(stack.dir, "vcs-token");
  writeFileSync(tokenFile, `${token}\n`);
  const args = ["vcs", "connect", "gh", "--provider", "github", "--vcs-url", git.url, "--api-url", gh.apiUrl];
  const connected = await stack.cli([...args, "--vcs-token-file", tokenFile, "--json"]);
  assert.equal(connected.code, 0, connected.stderr);
  assert.equal(JSON.parse(connected.stdout).apiUrl, gh.apiUrl);
  await stack.server.api(routes.createWorkspace, { body: { name: "infra", pool: stack.pool } });
  const linked = await stack.cli([...linkArgs("infra", "gh", "org/infra", "main"), "--json"]);
  assert.equal(linked.code, 0, linked.stderr);
  const link = JSON.parse(linked.stdout);
  const hooks = [...gh.repos.get("org/infra")!.hooks.entries()];
  assert.equal(hooks.length, 1);
  const [hookId, hook] = hooks[0]!;
  // The URL the VCS is told to deliver to, as the provider sees it: a literal on purpose.
  // eslint-disable-next-line no-restricted-syntax
  const hookUrl = `${stack.server.url}/api/v1/vcs/gh/webhook`;
  assert.equal(link.webhookId, hookId);
  assert.deepEqual(link.webhook, {
    registered: true,
    url: hookUrl,
    contentType: "json",
    events: ["push", "pull_request"],
  });
  assert.equal(hook.url, hookUrl);
  assert.equal(hook.secret, await store.vcsWebhookSecret(stack.server.store, "gh"));
  assert.deepEqual(hook.events, ["push", "pull_request"]);
  assert.equal(hook.contentType, "json");

  // First run of the pull request: pending, then success with the summary; one comment.
  const c1 = commit("Add two", { "main.tf": resources(2) });
  const run1 = await pullRequestRun(c1);
  assert.equal((await stack.waitForRun(run1, ["planned_and_finished"])).status, "planned_and_finished");
  const page1 = `${stack.server.url}/app/workspaces/infra/runs/${run1}`;
  await waitFor("run 1's success status", () => (statusesOf(c1).some((s) => s.state === "success") ? true : undefined));
  const s1 = statusesOf(c1);
  assert.equal(s1[0]!.state, "pending");
  assert.deepEqual(s1[s1.length - 1], {
    sha: c1,
    state: "success",
    context: "drover/infra",
    description: "Plan: +2 ~0 -0",
    targetUrl: page1,
  });
  assert.ok(s1.every((s) => s.context === "drover/infra" && s.targetUrl === page1));
  const comments = gh.repos.get("org/infra")!.comments;
  await waitFor("the comment", () => (comments.size === 1 ? true : undefined));
  const [commentId, comment] = [...comments.entries()][0]!;
  assert.equal(comment.issue, 7);
  assert.match(comment.body, /Plan: 2 to add, 0 to change, 0 to destroy/);
  assert.ok(comment.body.includes(page1));

  // The pull request updated: the same comment is edited, not a second one posted.
  const c2 = commit("Add one more", { "main.tf": resources(3) });
  const run2 = await pullRequestRun(c2);
  await stack.waitForRun(run2, ["planned_and_finished"]);
  await waitFor("run 2's comment", () => (comments.get(commentId)?.body.includes(run2) ? true : undefined));
  assert.equal(comments.size, 1);
  assert.match(comments.get(commentId)!.body, /Plan: 3 to add/);
  assert.equal(gh.calls.filter((c) => c.method === "POST" && c.path.endsWith("/issues/7/comments")).length, 1);
  assert.ok(
    gh.calls.some((c) => c.method === "PATCH" && c.path === `/api/v3/repos/org/infra/issues/comments/${commentId}`),
  );
  await waitFor("run 2's success", () => (statusesOf(c2).some((s) => s.state === "success") ? true : undefined));

  // A plan that fails: a failure status.
  const c3 = commit("Break it", { "main.tf": `${resources(1)}output "x" {\n  value = var.missing\n}\n` });
  const run3 = await pullRequestRun(c3);
  await stack.waitForRun(run3, ["errored"]);
  await waitFor("run 3's failure", () => (statusesOf(c3).some((s) => s.state === "failure") ? true : undefined));
  assert.match(statusesOf(c3).find((s) => s.state === "failure")!.description, /^Errored/);
  await waitFor("run 3's comment", () =>
    comments.get(commentId)?.body.includes("The plan failed") ? true : undefined,
  );
  assert.equal(comments.size, 1);
  assert.deepEqual(gh.invalid, []);
});

test("with the VCS API down, reports are retried and delivered once it is back; the run does not wait", async () => {
  gh.state.down = true;
  const failedBefore = gh.calls.length;
  const c4 = commit("While down", { "main.tf": resources(4) });
  const run4 = await pullRequestRun(c4);
  assert.equal((await stack.waitForRun(run4, ["planned_and_finished"])).status, "planned_and_finished");
  const ws = (await stack.server.api(routes.getWorkspace, { params: { ws: "infra" } })).body.id as string;
  await waitFor("retried deliveries", async () => {
    const reports = await store.listVcsReports(stack.server.store, ws);
    return reports.some((r) => r.run_id === run4 && r.attempts >= 2 && r.due_at !== null) ? true : undefined;
  });
  assert.ok(gh.calls.length - failedBefore >= 2, "the reporter tried the API");
  assert.equal(statusesOf(c4).length, 0);
  const reports = await store.listVcsReports(stack.server.store, ws);
  assert.match(reports.find((r) => r.run_id === run4)!.last_error ?? "", /503/);

  gh.state.down = false;
  await waitFor("the status after the outage", () =>
    statusesOf(c4).some((s) => s.state === "success") ? true : undefined,
  );
  assert.equal(statusesOf(c4).find((s) => s.state === "success")!.description, "Plan: +4 ~0 -0");
  await waitFor("the comment after the outage", () =>
    [...gh.repos.get("org/infra")!.comments.values()][0]?.body.includes(run4) ? true : undefined,
  );
  assert.equal(gh.repos.get("org/infra")!.comments.size, 1);
  await waitFor("every report delivered", async () =>
    (await store.listVcsReports(stack.server.store, ws)).every((r) => r.due_at === null) ? true : undefined,
  );
  assert.ok(!logLines.join("").includes(token), "the server log holds the token");
  assert.ok(!JSON.stringify(await store.listVcsReports(stack.server.store, ws)).includes(token));
});

test("a comment whose creation lost its answer is found on the retry and edited, not posted twice", async () => {
  const comments = gh.repos.get("org/infra")!.comments;
  const onEight = () => [...comments.entries()].filter(([, c]) => c.issue === 8);
  gh.state.loseCommentAnswers = 1;
  const c5 = commit("Answer lost", { "main.tf": resources(5) });
  const run5 = await pullRequestRun(c5, 8);
  await stack.waitForRun(run5, ["planned_and_finished"]);
  const ws = (await stack.server.api(routes.getWorkspace, { params: { ws: "infra" } })).body.id as string;
  const report = async () =>
    (await store.listVcsReports(stack.server.store, ws)).find(
      (r) => r.kind === "comment" && r.pull_request_number === 8,
    );
  await waitFor("the comment report delivered after its failed first try", async () => {
    const r = await report();
    return r && r.comment_id !== null && r.due_at === null ? r : undefined;
  });
  assert.equal(gh.state.loseCommentAnswers, 0, "the first creation's answer was lost");
  const [id, comment] = onEight()[0] ?? [];
  assert.equal(onEight().length, 1, "one comment");
  assert.match(comment!.body, /Plan: 5 to add/);
  assert.ok(comment!.body.includes(run5));
  assert.equal(Number((await report())!.comment_id), id);
});

test("unlinking deletes the webhook", async () => {
  assert.equal(gh.repos.get("org/infra")!.hooks.size, 1);
  const unlinked = await stack.cli(["workspace", "unlink", "infra"]);
  assert.equal(unlinked.code, 0, unlinked.stderr);
  assert.equal(gh.repos.get("org/infra")!.hooks.size, 0);
  assert.equal(gh.calls[gh.calls.length - 1]!.method, "DELETE");
});

test("workspaces linked to one repository at once share one webhook", async () => {
  const names = ["par-0", "par-1", "par-2", "par-3"];
  for (const name of names) await stack.server.api(routes.createWorkspace, { body: { name, pool: stack.pool } });
  const linked = await Promise.all(
    names.map((ws) =>
      stack.server.api(routes.linkWorkspaceVcs, {
        params: { ws },
        body: { connection: "gh", repository: "org/infra", branch: "main", triggerPaths: [] },
      }),
    ),
  );
  const hooks = [...gh.repos.get("org/infra")!.hooks.keys()];
  assert.equal(hooks.length, 1);
  for (const res of linked) {
    assert.equal(res.status, 200, JSON.stringify(res.body));
    assert.deepEqual([res.body.webhookId, res.body.webhook?.registered], [hooks[0], true], JSON.stringify(res.body));
  }
  for (const ws of names) await stack.server.api(routes.unlinkWorkspaceVcs, { params: { ws } });
  assert.equal(gh.repos.get("org/infra")!.hooks.size, 0, "the last unlink deleted it");
  assert.deepEqual(gh.invalid, []);
});

test("when the token may not manage webhooks, linking still links and says exactly what to register", async () => {
  gh.state.forbidHooks = true;
  try {
    await stack.server.api(routes.createWorkspace, { body: { name: "manual", pool: stack.pool } });
    const linked = await stack.cli(linkArgs("manual", "gh", "org/infra", "main"));
    assert.equal(linked.code, 0, linked.stderr);
    const secret = await store.vcsWebhookSecret(stack.server.store, "gh");
    // eslint-disable-next-line no-restricted-syntax -- the URL the user is told to register
    assert.ok(linked.stdout.includes(`URL:          ${stack.server.url}/api/v1/vcs/gh/webhook`), linked.stdout);
    assert.ok(linked.stdout.includes(`Secret:       ${secret}`), linked.stdout);
    assert.match(linked.stdout, /Content type: application\/json/);
    assert.ok(linked.stdout.includes("Events:       push, pull_request"), linked.stdout);
    assert.match(linked.stdout, /may not manage webhooks of org\/infra \(403\)/);
    assert.equal(gh.repos.get("org/infra")!.hooks.size, 0);
    const link = await stack.server.api(routes.getWorkspaceVcs, { params: { ws: "manual" } });
    assert.equal(link.body.webhookId, null);
    assert.equal(link.body.webhook, undefined, "the secret is shown by the link only");
  } finally {
    gh.state.forbidHooks = false;
  }
});
