import assert from "node:assert/strict";
import { mkdirSync, mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { after, before, test } from "node:test";
import { maxWebhookBytes, routes, type RunSource, type VcsDelivery } from "@drover/protocol";
import { pino } from "pino";
import { commitAndPush, gitAs, hostedRepository, valueConfig } from "../support/git-repo.js";
import { statusBeforeBody } from "../support/answer-before-body.js";
import { startGitHttpServer } from "../support/git-http-server.js";
import { startGithubApi } from "../support/github-api.js";
import { lookUntil } from "../support/poll.js";
import { startStack, type Stack } from "../support/stack.js";
import { routeCall } from "../support/typed-api.js";
import {
  deliver,
  githubPullRequest,
  githubPush,
  gitlabMergeRequest,
  gitlabPush,
  type Delivery,
  type PushedCommit,
  processedDelivery,
} from "../support/webhooks.js";

/*
 * Runs from VCS webhooks, end to end: deliveries built from the providers' published examples,
 * signed (or not) as GitHub and GitLab sign them, sent to the real server; repositories served by
 * `git http-backend`; a real agent running real terraform. The poller is off, so every run here
 * comes from a delivery.
 */

const token = "ghp_TOKENhooks0123456789abcdefSECRET";
const zero = "0".repeat(40);
const logLines: string[] = [];
let stack: Stack;
let gh: Awaited<ReturnType<typeof startGitHttpServer>>;
let gl: Awaited<ReturnType<typeof startGitHttpServer>>;
let root: string;
const secrets: Record<string, string> = {};

const sh = gitAs("Ada", "ada@example.com");

/** A bare repository at `path` (under root) and a work tree pushing to it. */
const repo = (path: string): string => hostedRepository(sh, root, path);

/** Commits `files` (null removes) on the work tree's current branch, pushes it to `branch`; the commit as payloads list it. */
function commit(work: string, branch: string, message: string, files: Record<string, string | null>): PushedCommit {
  const id = commitAndPush(sh, work, branch, message, files);
  const changed: PushedCommit = { id, added: [], modified: [], removed: [] };
  for (const line of sh(work, "diff-tree", "--no-commit-id", "--root", "--name-status", "-r", id).split("\n")) {
    const [status, file] = line.split("\t");
    if (!file) continue;
    (status === "A" ? changed.added : status === "D" ? changed.removed : changed.modified).push(file);
  }
  return changed;
}

const tf = valueConfig;

const waitFor = <T>(what: string, look: () => Promise<T | undefined>, timeoutMs?: number) =>
  lookUntil(what, look, {
    ...(timeoutMs === undefined ? {} : { timeoutMs }),
    diagnose: () => logLines.slice(-40).join(""),
  });

type ListedRun = {
  id: string;
  status: string;
  planOnly: boolean;
  errorMessage: string | null;
  source: RunSource | null;
};
const runsOf = async (ws: string) =>
  (await stack.server.api(routes.listRuns, { query: { workspace: ws } })).body.items as ListedRun[];

const deliveriesOf = async (connection: string) =>
  (await stack.server.api(routes.listVcsDeliveries, { params: { connection }, query: { limit: 100 } })).body
    .items as VcsDelivery[];

/** The delivery the webhook's answer named, once the server has acted on it. */
const processed = (connection: string, sent: { body: { delivery: string } }) =>
  processedDelivery(stack.server, connection, sent, () => logLines.slice(-40).join(""));

const hookUrl = (connection: string) =>
  `${stack.server.url}${routes.receiveVcsWebhook.path.replace(":connection", connection)}`;
const send = (connection: string, d: Omit<Delivery, "secret"> & { secret?: string | undefined }) =>
  deliver(stack.server.url, connection, { secret: secrets[connection], ...d });

async function connect(name: string, provider: "github" | "gitlab", url: string) {
  const tokenFile = join(stack.dir, `token-${name}`);
  writeFileSync(tokenFile, `${token}\n`);
  const res = await stack.cli([
    "vcs",
    "connect",
    name,
    "--provider",
    provider,
    "--vcs-url",
    url,
    "--vcs-token-file",
    tokenFile,
    "--json",
  ]);
  assert.equal(res.code, 0, res.stderr);
  const created = JSON.parse(res.stdout) as { webhookUrl: string; webhookSecret: string };
  assert.equal(created.webhookUrl, hookUrl(name));
  assert.match(created.webhookSecret, /^[0-9a-f]{64}$/);
  secrets[name] = created.webhookSecret;
}

async function link(ws: string, connection: string, repository: string, triggers: string[] = []) {
  await stack.server.api(routes.linkWorkspaceVcs, {
    params: { ws },
    body: { connection, repository, branch: "main", triggerPaths: triggers },
  });
}

before(async () => {
  root = mkdtempSync(join(tmpdir(), "drover-hooks-repos-"));
  mkdirSync(join(root, "org"));
  mkdirSync(join(root, "grp/sub"), { recursive: true });
  gh = await startGitHttpServer(root, undefined, { basicAuth: { user: "x-access-token", password: token } });
  gl = await startGitHttpServer(root, undefined, { basicAuth: { user: "oauth2", password: token } });
  stack = await startStack(
    { DROVER_VCS_POLL_SECONDS: "0" },
    { logger: pino({ level: "debug" }, { write: (line: string) => void logLines.push(line) }) },
  );
  await stack.startAgent("hooks-agent");
  await connect("gh", "github", gh.url);
  await connect("gl", "gitlab", gl.url);
});
after(async () => {
  await stack?.stop();
  await gh?.close();
  await gl?.close();
  if (root) rmSync(root, { recursive: true, force: true });
});

test("a GitHub push applies; a replayed delivery starts nothing; deliveries say what happened", async () => {
  const work = repo("org/infra");
  await stack.server.api(routes.createWorkspace, { body: { name: "infra", pool: stack.pool, autoApply: true } });
  await link("infra", "gh", "org/infra");
  const c1 = commit(work, "main", "Add v", { "main.tf": tf("one") });
  const push = githubPush("org/infra", "main", zero, c1.id, [c1]);
  const sent = await send("gh", { provider: "github", event: "push", body: push });
  assert.equal(sent.status, 202, JSON.stringify(sent.body));
  assert.equal(sent.body.duplicate, false);
  // Asked at once, while the server fetches the commit: answered when the delivery is processed,
  // not when the wait ends.
  const asked = Date.now();
  const waited = await stack.server.api(routes.getVcsDelivery, {
    params: { connection: "gh", delivery: sent.body.delivery },
    query: { wait: 50_000 },
  });
  assert.ok(Date.now() - asked < 50_000, "answered before the wait ended");
  const d1 = waited.body as VcsDelivery;
  assert.equal(d1.status, "processed");
  assert.equal(d1.event, "push");
  assert.equal(d1.outcomes.length, 1);
  assert.equal(d1.outcomes[0]?.outcome, "started");
  const runId = d1.outcomes[0]?.runId ?? "";
  assert.equal((await stack.waitForRun(runId, ["applied"])).status, "applied");
  const [run] = await runsOf("infra");
  assert.deepEqual(run?.source, {
    repository: "org/infra",
    branch: "main",
    commitSha: c1.id,
    message: "Add v",
    author: "Ada <ada@example.com>",
    pullRequest: null,
  });

  // The same delivery again (GitHub's redeliver): answered, one delivery, no second run.
  const replay = await send("gh", { provider: "github", event: "push", body: push, deliveryId: sent.deliveryId });
  assert.equal(replay.status, 202);
  assert.deepEqual(replay.body, { delivery: d1.id, duplicate: true });
  // A ping (GitHub's first delivery) is stored and ignored; it is processed after anything queued before.
  const ping = await send("gh", { provider: "github", event: "ping", body: { zen: "Keep it logically awesome." } });
  assert.equal(ping.status, 202);
  const pinged = await processed("gh", ping);
  assert.equal(pinged.outcomes[0]?.outcome, "ignored");
  assert.equal((await runsOf("infra")).length, 1);
  assert.equal((await deliveriesOf("gh")).filter((d) => d.deliveryId === sent.deliveryId).length, 1);

  // The CLI lists deliveries newest first with each workspace's outcome; show has the URL, never the secret.
  const listed = await stack.cli(["vcs", "deliveries", "gh"]);
  assert.equal(listed.code, 0, listed.stderr);
  assert.match(
    listed.stdout,
    new RegExp(`push  ${sent.deliveryId}  processed[\\s\\S]*infra: started \\(run ${runId}\\)`),
  );
  assert.ok(listed.stdout.indexOf(ping.deliveryId) < listed.stdout.indexOf(sent.deliveryId), listed.stdout);
  const json = JSON.parse((await stack.cli(["vcs", "deliveries", "gh", "--json"])).stdout) as VcsDelivery[];
  assert.equal(json.find((d) => d.deliveryId === sent.deliveryId)?.outcomes[0]?.runId, runId);
  const shown = await stack.cli(["vcs", "show", "gh"]);
  assert.match(shown.stdout, new RegExp(`webhook URL: ${hookUrl("gh").replace(/[.]/g, "\\.")}`));
  assert.ok(!shown.stdout.includes(secrets.gh ?? "?"));
  const all = JSON.stringify([
    (await stack.server.api(routes.listVcsConnections, {})).body,
    (await stack.server.api(routes.getVcsConnection, { params: { connection: "gh" } })).body,
    await deliveriesOf("gh"),
  ]);
  assert.ok(!all.includes(secrets.gh ?? "?"), "the webhook secret is shown only at creation");
  assert.ok(!logLines.join("").includes(secrets.gh ?? "?"), "the webhook secret is in no log line");
});

test("bad or missing signatures, unknown connections and oversize bodies are refused and store nothing", async () => {
  const work = join(root, "work-org-infra");
  const before = (await runsOf("infra")).length;
  const stored = (await deliveriesOf("gh")).length;
  const head = sh(work, "rev-parse", "HEAD");
  const c2 = commit(work, "main", "Change v", { "main.tf": tf("two") });
  const push = githubPush("org/infra", "main", head, c2.id, [c2]);
  const wrong = await send("gh", { provider: "github", event: "push", body: push, signWith: "not-the-secret" });
  assert.equal(wrong.status, 401);
  assert.equal(wrong.body.error, "unauthorized");
  assert.equal((await send("gh", { provider: "github", event: "push", body: push, secret: undefined })).status, 401);
  // A body changed after signing: the signature no longer matches.
  const tampered = await send("gh", {
    provider: "github",
    event: "push",
    body: { ...push, after: head },
    signedBody: Buffer.from(JSON.stringify(push)),
  });
  assert.equal(tampered.status, 401);
  const glWrong = await send("gl", {
    provider: "gitlab",
    event: "Push Hook",
    body: gitlabPush("grp/sub/infra", "main", head, c2.id, [c2]),
    signWith: secrets.gh,
  });
  assert.equal(glWrong.status, 401);

  // Unknown connections: one 404 body whatever else the request holds.
  const unknown = [
    await deliver(stack.server.url, "nope", {
      provider: "github",
      event: "push",
      body: push,
      secret: secrets.gh,
    }),
    await deliver(stack.server.url, "nope", {
      provider: "gitlab",
      event: "Push Hook",
      body: {},
      secret: undefined,
    }),
    await deliver(stack.server.url, "x".repeat(60), {
      provider: "github",
      event: "push",
      body: Buffer.alloc(6 * 1024 * 1024),
      secret: undefined,
    }),
  ];
  for (const res of unknown) {
    assert.equal(res.status, 404);
    assert.deepEqual(res.body, { error: "not_found", message: "not found" });
  }
  // Over the body limit: 413, nothing stored.
  const big = await send("gh", {
    provider: "github",
    event: "push",
    body: Buffer.alloc(maxWebhookBytes + 1, 0x20),
  });
  assert.equal(big.status, 413);

  let deliveries = await deliveriesOf("gh");
  assert.equal(deliveries.length, stored, "no refused delivery is stored");
  assert.equal((await runsOf("infra")).length, before, "no refused delivery started a run");

  // The same push, signed: it runs.
  const good = await send("gh", { provider: "github", event: "push", body: push });
  assert.equal(good.status, 202);
  assert.equal((await processed("gh", good)).outcomes[0]?.outcome, "started");
  deliveries = await deliveriesOf("gh");
  assert.equal(deliveries.length, stored + 1);
  const runs = await waitFor("c2's run", async () => {
    const rs = await runsOf("infra");
    return rs.length > before ? rs : undefined;
  });
  assert.equal(runs.length, before + 1);
  assert.equal(runs[0]?.source?.commitSha, c2.id);
  await stack.waitForRun(runs[0]?.id ?? "", ["applied"]);
});

test("a delivery whose headers lack the proof is refused before its body is sent", async () => {
  const answerToHeaders = (connection: string, headers: Record<string, string>) =>
    statusBeforeBody(
      hookUrl(connection),
      routes.receiveVcsWebhook.method,
      { "content-type": "application/json", ...headers },
      4 * 1024 * 1024,
    );
  assert.equal(await answerToHeaders("gl", { "x-gitlab-event": "Push Hook" }), 401);
  assert.equal(await answerToHeaders("gl", { "x-gitlab-event": "Push Hook", "x-gitlab-token": "wrong" }), 401);
  assert.equal(await answerToHeaders("gh", { "x-github-event": "push" }), 401);
  assert.equal(await answerToHeaders("gh", { "x-github-event": "push", "x-hub-signature-256": "sha1=0a1b" }), 401);
});

test("a pull request plans speculatively; a new commit supersedes its plan still queued", async () => {
  const work = repo("org/app");
  const idle = await stack.createPool("pr-pool");
  await stack.server.api(routes.createWorkspace, { body: { name: "app", pool: idle.pool, autoApply: true } });
  const base = commit(work, "main", "Base", { "main.tf": tf("base") });
  await link("app", "gh", "org/app");
  sh(work, "checkout", "-q", "-b", "feature");
  const f1 = commit(work, "feature", "Try one", { "main.tf": tf("pr-one") });
  const pr = {
    number: 7,
    base: "main",
    baseSha: base.id,
    head: "feature",
    url: "https://github.example/org/app/pull/7",
  };
  const opened = await send("gh", {
    provider: "github",
    event: "pull_request",
    body: githubPullRequest("opened", "org/app", { ...pr, headSha: f1.id }),
  });
  assert.equal(opened.status, 202);
  const first = await processed("gh", opened);
  assert.equal(first.event, "pull_request.opened");
  assert.equal(first.outcomes[0]?.outcome, "started");
  const runA = first.outcomes[0]?.runId ?? "";
  // No agent serves the pool yet: the plan waits.
  const [a] = await runsOf("app");
  assert.equal(a?.id, runA);
  assert.equal(a?.status, "queued");
  assert.equal(a?.planOnly, true);
  assert.deepEqual(a?.source?.pullRequest, { number: 7, url: pr.url });

  const f2 = commit(work, "feature", "Try two", { "main.tf": tf("pr-two") });
  const synced = await send("gh", {
    provider: "github",
    event: "pull_request",
    body: githubPullRequest("synchronize", "org/app", { ...pr, headSha: f2.id }),
  });
  const second = await processed("gh", synced);
  const runB = second.outcomes[0]?.runId ?? "";
  assert.equal(second.outcomes[0]?.outcome, "started");
  const superseded = await stack.waitForRun(runA, ["canceled"]);
  assert.match(superseded.errorMessage ?? "", /superseded: commit .* came after it/);
  const older = (await deliveriesOf("gh")).find((d) => d.deliveryId === opened.deliveryId);
  assert.equal(older?.outcomes[0]?.outcome, "superseded");
  assert.match(older?.outcomes[0]?.detail ?? "", new RegExp(`by run ${runB}`));
  // The older commit's delivery, late (deliveries come in any order): it plans nothing and leaves
  // the newer plan alone.
  const late = await send("gh", {
    provider: "github",
    event: "pull_request",
    body: githubPullRequest("synchronize", "org/app", { ...pr, headSha: f1.id }),
  });
  assert.deepEqual(
    (await processed("gh", late)).outcomes.map((o) => [o.outcome, o.detail]),
    [["superseded", `the pull request has moved on to ${f2.id.slice(0, 12)}`]],
  );
  assert.equal((await runsOf("app")).find((r) => r.id === runB)?.status, "queued");

  // A closed (merged) pull request starts nothing; its merge's push is what applies.
  const closed = await send("gh", {
    provider: "github",
    event: "pull_request",
    body: githubPullRequest("closed", "org/app", { ...pr, headSha: f2.id }),
  });
  assert.equal((await processed("gh", closed)).outcomes[0]?.outcome, "ignored");
  // From a fork: anyone's code, run with the workspace's variables. It plans nothing.
  const forked = githubPullRequest("opened", "org/app", { ...pr, number: 8, headSha: f2.id });
  forked.pull_request.head.repo.full_name = "mallory/app";
  const fromFork = await send("gh", { provider: "github", event: "pull_request", body: forked });
  const forkOutcome = (await processed("gh", fromFork)).outcomes[0];
  assert.equal(forkOutcome?.outcome, "ignored");
  assert.match(forkOutcome?.detail ?? "", /^a pull request from another repository \(mallory\/app\) starts no run/);

  // Repository paths are case-insensitive: a payload naming ORG/App is the linked org/app.
  const cased = await send("gh", {
    provider: "github",
    event: "pull_request",
    body: githubPullRequest("opened", "ORG/App", { ...pr, number: 9, headSha: f2.id }),
  });
  const casedOutcome = (await processed("gh", cased)).outcomes[0];
  assert.equal(casedOutcome?.outcome, "started", casedOutcome?.detail ?? "");

  await stack.startAgent("pr-agent", { DROVER_TOKEN: idle.token }, idle.pool);
  const done = await stack.waitForRun(runB, ["planned_and_finished"]);
  assert.equal(done.planOnly, true);
  assert.deepEqual(done.source, {
    repository: "org/app",
    branch: "feature",
    commitSha: f2.id,
    message: "Try two",
    author: "Ada <ada@example.com>",
    pullRequest: { number: 7, url: pr.url },
  });
  const casedRun = await stack.waitForRun(casedOutcome?.runId ?? "", ["planned_and_finished"]);
  assert.equal(casedRun.source?.repository, "org/app", "the link's own spelling");
  assert.equal((await runsOf("app")).length, 3);
});

test("monorepo: one push runs only the workspaces whose trigger paths or directory it changed", async () => {
  const work = repo("org/mono");
  const n = 20;
  const pad = (i: number) => String(i).padStart(2, "0");
  const files: Record<string, string> = {};
  for (let i = 0; i < n; i++) {
    files[`stacks/s${pad(i)}/main.tf`] = tf(`s${i}`);
    files[`modules/m${pad(i)}/main.tf`] = tf(`m${i}`);
  }
  const c1 = commit(work, "main", "All stacks", files);
  const mono = await stack.createPool("mono-pool");
  for (let i = 0; i < n; i++) {
    const ws = `mono-${pad(i)}`;
    await stack.server.api(routes.createWorkspace, {
      body: { name: ws, pool: mono.pool, workingDirectory: `stacks/s${pad(i)}` },
    });
    await link(ws, "gh", "org/mono", [`modules/m${pad(i)}/**`]);
  }
  const c2 = commit(work, "main", "Two changes", {
    "stacks/s03/main.tf": tf("s3-changed"),
    "modules/m07/main.tf": tf("m7-changed"),
    "README.md": "docs only\n",
  });
  const sent = await send("gh", {
    provider: "github",
    event: "push",
    body: githubPush("org/mono", "main", c1.id, c2.id, [c2]),
  });
  const d = await processed("gh", sent);
  const started = d.outcomes.filter((o) => o.outcome === "started").map((o) => o.workspace);
  assert.deepEqual(started, ["mono-03", "mono-07"]);
  assert.equal(d.outcomes.filter((o) => o.outcome === "paths_unmatched").length, n - 2);
  for (let i = 0; i < n; i++)
    assert.equal((await runsOf(`mono-${pad(i)}`)).length, i === 3 || i === 7 ? 1 : 0, `mono-${pad(i)}`);

  // A forced push lists no usable files: git compares the trees against the commit each link saw last.
  const c3 = commit(work, "main", "Three", { "stacks/s11/main.tf": tf("s11-changed") });
  const c4 = commit(work, "main", "Four", { "modules/m12/main.tf": tf("m12-changed") });
  const forced = githubPush("org/mono", "main", c2.id, c4.id, [c3, c4]);
  forced.forced = true;
  const d2 = await processed("gh", await send("gh", { provider: "github", event: "push", body: forced }));
  assert.deepEqual(
    d2.outcomes.filter((o) => o.outcome === "started").map((o) => o.workspace),
    ["mono-11", "mono-12"],
  );
  // A commit too large for GitHub to list in time is sent with no files: git compares the trees.
  const big = commit(work, "main", "Large", { "modules/m05/main.tf": tf("m5-changed") });
  const unlisted = githubPush("org/mono", "main", c4.id, big.id, [{ ...big, added: [], modified: [], removed: [] }]);
  const d2b = await processed("gh", await send("gh", { provider: "github", event: "push", body: unlisted }));
  assert.deepEqual(
    d2b.outcomes.filter((o) => o.outcome === "started").map((o) => o.workspace),
    ["mono-05"],
  );

  // The poller finds the next commit first: it starts the run and cancels mono-03's run still
  // queued for c2; the push's delivery, arriving after, starts nothing more.
  // The others are unlinked first: a poll looks at every link, and twenty fetches are slow here.
  for (let i = 0; i < n; i++)
    if (i !== 3) await stack.server.api(routes.unlinkWorkspaceVcs, { params: { ws: `mono-${pad(i)}` } });
  const c5 = commit(work, "main", "Five", { "stacks/s03/main.tf": tf("s3-again") });
  const polled = await stack.server.pollVcs();
  const byPoll = polled.find((o) => o.workspace === "mono-03")?.started ?? "";
  assert.ok(byPoll, JSON.stringify(polled));
  const mono03 = await runsOf("mono-03");
  assert.equal(mono03.length, 2);
  const older = mono03.find((r) => r.id !== byPoll);
  assert.equal(older?.status, "canceled");
  assert.match(older?.errorMessage ?? "", /superseded: commit .* came after it/);
  const first = (await deliveriesOf("gh")).find((x) => x.deliveryId === sent.deliveryId);
  assert.deepEqual(
    first?.outcomes.filter((o) => o.workspace === "mono-03").map((o) => [o.outcome, o.detail]),
    [["superseded", `by run ${byPoll} (commit ${c5.id.slice(0, 12)})`]],
  );
  const late = await send("gh", {
    provider: "github",
    event: "push",
    body: githubPush("org/mono", "main", big.id, c5.id, [c5]),
  });
  const d3 = await processed("gh", late);
  assert.equal(d3.outcomes.find((o) => o.workspace === "mono-03")?.outcome, "already_started");
  assert.equal((await runsOf("mono-03")).length, 2);
});

test("GitLab: a Push Hook applies, a Merge Request Hook plans speculatively, a wrong token is refused", async () => {
  const work = repo("grp/sub/infra");
  await stack.server.api(routes.createWorkspace, { body: { name: "glws", pool: stack.pool, autoApply: true } });
  const c1 = commit(work, "main", "GitLab base", { "main.tf": tf("gl-one") });
  await link("glws", "gl", "grp/sub/infra");
  const c2 = commit(work, "main", "GitLab change", { "main.tf": tf("gl-two") });
  const pushed = await send("gl", {
    provider: "gitlab",
    event: "Push Hook",
    body: gitlabPush("grp/sub/infra", "main", c1.id, c2.id, [c2]),
  });
  assert.equal(pushed.status, 202);
  const d = await processed("gl", pushed);
  assert.equal(d.outcomes[0]?.outcome, "started");
  const run = await stack.waitForRun(d.outcomes[0]?.runId ?? "", ["applied"]);
  assert.equal(run.source.commitSha, c2.id);
  // The push of the older commit, delivered late: the branch has moved on, nothing runs.
  const late = await send("gl", {
    provider: "gitlab",
    event: "Push Hook",
    body: gitlabPush("grp/sub/infra", "main", zero, c1.id, [c1]),
  });
  const stale = await processed("gl", late);
  assert.deepEqual(
    stale.outcomes.map((o) => [o.outcome, o.detail]),
    [["superseded", `the branch has moved on to ${c2.id.slice(0, 12)}`]],
  );

  sh(work, "checkout", "-q", "-b", "ms-viewport");
  const f1 = commit(work, "ms-viewport", "MR change", { "main.tf": tf("gl-mr") });
  const mr = {
    iid: 1,
    target: "main",
    source: "ms-viewport",
    url: "https://gitlab.example/grp/sub/infra/-/merge_requests/1",
  };
  const opened = await send("gl", {
    provider: "gitlab",
    event: "Merge Request Hook",
    body: gitlabMergeRequest("open", "grp/sub/infra", { ...mr, lastCommit: f1.id }),
  });
  const od = await processed("gl", opened);
  assert.equal(od.event, "Merge Request Hook.open");
  const plan = await stack.waitForRun(od.outcomes[0]?.runId ?? "", ["planned_and_finished"]);
  assert.equal(plan.planOnly, true);
  assert.deepEqual(plan.source.pullRequest, { number: 1, url: mr.url });
  assert.equal(plan.source.commitSha, f1.id);
  // GitLab's retry of the same event: its Idempotency-Key, new UUIDs. One delivery, no second plan.
  const retried = await send("gl", {
    provider: "gitlab",
    event: "Merge Request Hook",
    body: gitlabMergeRequest("open", "grp/sub/infra", { ...mr, lastCommit: f1.id }),
    deliveryId: opened.deliveryId,
  });
  assert.deepEqual(retried.body, { delivery: od.id, duplicate: true });

  // An update without new commits (a title edit) starts nothing.
  const edited = await send("gl", {
    provider: "gitlab",
    event: "Merge Request Hook",
    body: gitlabMergeRequest("update", "grp/sub/infra", { ...mr, lastCommit: f1.id }),
  });
  assert.equal((await processed("gl", edited)).outcomes[0]?.outcome, "ignored");
  const forked = gitlabMergeRequest("open", "grp/sub/infra", { ...mr, iid: 2, lastCommit: f1.id });
  forked.object_attributes.source.path_with_namespace = "mallory/infra";
  const fromFork = await send("gl", { provider: "gitlab", event: "Merge Request Hook", body: forked });
  const forkOutcome = (await processed("gl", fromFork)).outcomes[0];
  assert.equal(forkOutcome?.outcome, "ignored");
  assert.match(forkOutcome?.detail ?? "", /^a pull request from another repository \(mallory\/infra\) starts no run/);
  const refused = await send("gl", {
    provider: "gitlab",
    event: "Merge Request Hook",
    body: gitlabMergeRequest("open", "grp/sub/infra", { ...mr, lastCommit: f1.id }),
    signWith: "wrong",
  });
  assert.equal(refused.status, 401);
  assert.equal((await runsOf("glws")).length, 2);
});

test("a pull request plans the workspaces its own changes trigger, not those its base branch changed after it branched off", async () => {
  const api = await startGithubApi({ token, prefix: "/api/v3" });
  try {
    api.addRepo("org/split");
    const work = repo("org/split");
    const tokenFile = join(stack.dir, "token-gha");
    writeFileSync(tokenFile, `${token}\n`);
    const connectArgs = ["vcs", "connect", "gha", "--provider", "github", "--vcs-url", gh.url, "--api-url", api.apiUrl];
    const connected = await stack.cli([...connectArgs, "--vcs-token-file", tokenFile, "--json"]);
    assert.equal(connected.code, 0, connected.stderr);
    secrets["gha"] = (JSON.parse(connected.stdout) as { webhookSecret: string }).webhookSecret;
    commit(work, "main", "Base", { "a/main.tf": tf("a"), "b/main.tf": tf("b") });
    const split = await stack.createPool("split-pool");
    for (const dir of ["a", "b"]) {
      await stack.server.api(routes.createWorkspace, {
        body: { name: `split-${dir}`, pool: split.pool, workingDirectory: dir },
      });
      await link(`split-${dir}`, "gha", "org/split", [`${dir}/**`]);
    }
    sh(work, "checkout", "-q", "-b", "change-a");
    const head = commit(work, "change-a", "Change a", { "a/main.tf": tf("a2") });
    sh(work, "checkout", "-q", "main");
    const tip = commit(work, "main", "Change b", { "b/main.tf": tf("b2") });
    // GitHub's three-dot compare lists what the branch changed since its merge base with the tip.
    const own = sh(work, "diff", "--name-only", `${tip.id}...${head.id}`).trim().split("\n");
    assert.deepEqual(own, ["a/main.tf"]);
    api.repos.get("org/split")!.compare[`${tip.id}...${head.id}`] = own;
    const pr = { number: 11, base: "main", baseSha: tip.id, head: "change-a", url: "https://github.example/pull/11" };
    const opened = await send("gha", {
      provider: "github",
      event: "pull_request",
      body: githubPullRequest("opened", "org/split", { ...pr, headSha: head.id }),
    });
    const decided = (await processed("gha", opened)).outcomes.map((o) => [o.workspace, o.outcome]);
    assert.deepEqual(decided.sort(), [
      ["split-a", "started"],
      ["split-b", "paths_unmatched"],
    ]);
    assert.ok(api.calls.some((c) => c.path.includes(`/compare/${tip.id}...${head.id}`)));

    // The API down: the diff with the base branch's tip decides, as the list of a bigger change would.
    api.state.down = true;
    const synced = await send("gha", {
      provider: "github",
      event: "pull_request",
      body: githubPullRequest("opened", "org/split", { ...pr, number: 12, headSha: head.id }),
    });
    const fallback = (await processed("gha", synced)).outcomes.map((o) => [o.workspace, o.outcome]);
    assert.deepEqual(fallback.sort(), [
      ["split-a", "started"],
      ["split-b", "started"],
    ]);
    assert.ok(logLines.some((l) => l.includes("the VCS did not list the pull request's changed files")));
  } finally {
    await api.close();
  }
});

test("a new link's first push is judged by its own change; a GitLab force push runs what the commits it drops trigger", async () => {
  const work = repo("grp/forced");
  await stack.server.api(routes.createWorkspace, { body: { name: "forced", pool: stack.pool, autoApply: true } });
  const base = commit(work, "main", "base", { "main.tf": tf("forced-base"), "README.md": "one\n" });
  await link("forced", "gl", "grp/forced", ["main.tf"]);
  const pushed = async (before: string, after: string, commits: PushedCommit[]) =>
    processed(
      "gl",
      await send("gl", {
        provider: "gitlab",
        event: "Push Hook",
        body: gitlabPush("grp/forced", "main", before, after, commits),
      }),
    );
  // The link has seen no commit: the push's own change (README.md) triggers nothing; its commit is seen.
  const start = commit(work, "main", "readme", { "README.md": "one and a half\n" });
  const first = await pushed(base.id, start.id, [start]);
  assert.equal(first.outcomes[0]?.outcome, "paths_unmatched", JSON.stringify(first.outcomes));
  assert.equal(
    (await stack.server.api(routes.getWorkspaceVcs, { params: { ws: "forced" } })).body.lastCommitSha,
    start.id,
  );
  const changed = commit(work, "main", "change main.tf", { "main.tf": tf("forced-two") });
  const second = await pushed(start.id, changed.id, [changed]);
  assert.equal(second.outcomes[0]?.outcome, "started");
  await stack.waitForRun(second.outcomes[0]?.runId ?? "", ["applied"]);
  // Dropped by a force push: main.tf goes back as it was, though GitLab lists only the new
  // commit, which changes README.md alone.
  sh(work, "reset", "-q", "--hard", start.id);
  writeFileSync(join(work, "README.md"), "two\n");
  sh(work, "commit", "-q", "-am", "readme");
  sh(work, "push", "-q", "--force", "origin", "HEAD:main");
  const readme: PushedCommit = { id: sh(work, "rev-parse", "HEAD"), added: [], modified: ["README.md"], removed: [] };
  const forced = await pushed(changed.id, readme.id, [readme]);
  assert.equal(forced.outcomes[0]?.outcome, "started", JSON.stringify(forced.outcomes));
  const run = await stack.waitForRun(forced.outcomes[0]?.runId ?? "", ["applied"]);
  assert.equal(run.source.commitSha, readme.id);
  assert.equal((await runsOf("forced")).length, 2);
});

test("a connection whose VCS agents are gone holds up only its own deliveries", async () => {
  await stack.server.api(routes.createPool, { body: { name: "gone-agents", kind: "vcs" } });
  const ghe = await stack.server.api(routes.createVcsConnection, {
    body: { name: "ghe", provider: "github", url: gh.url, viaPool: "gone-agents" },
  });
  secrets.ghe = ghe.body.webhookSecret;
  await stack.server.api(routes.createWorkspace, { body: { name: "held", pool: stack.pool } });
  await link("held", "ghe", "org/held");
  // No agent serves the pool: the push's fetch waits for one (DROVER_VCS_AGENT_TASK_SECONDS).
  const sha = "1".repeat(40);
  const held = await send("ghe", {
    provider: "github",
    event: "push",
    body: githubPush("org/held", "main", zero, sha, [{ id: sha, added: ["main.tf"], modified: [], removed: [] }]),
  });
  assert.equal(held.status, 202);
  await waitFor("the relayed delivery taken", async () =>
    (await deliveriesOf("ghe")).find((d) => d.deliveryId === held.deliveryId && d.status === "processing"),
  );
  // Another connection's delivery is acted on meanwhile.
  await stack.server.api(routes.createWorkspace, { body: { name: "side", pool: stack.pool } });
  await link("side", "gh", "org/side");
  const other = await send("gh", {
    provider: "github",
    event: "pull_request",
    body: githubPullRequest("closed", "org/side", {
      number: 70,
      base: "main",
      baseSha: sha,
      head: "feature",
      headSha: sha,
      url: "https://github.example/org/side/pull/70",
    }),
  });
  assert.equal((await processed("gh", other)).outcomes[0]?.outcome, "ignored");
  const still = (await deliveriesOf("ghe")).find((d) => d.deliveryId === held.deliveryId);
  assert.equal(still?.status, "processing", "the relayed delivery still waits for an agent");
  // Waiting on one delivery ends at the wait's end with the delivery as it is, while it is not processed.
  const heldAsked = Date.now();
  const waited = await stack.server.api(routes.getVcsDelivery, {
    params: { connection: "ghe", delivery: held.body.delivery },
    query: { wait: 300 },
  });
  assert.ok(Date.now() - heldAsked >= 250, "the server held the answer for the wait");
  assert.deepEqual([waited.body.id, waited.body.status], [held.body.delivery, "processing"]);
  // A delivery is found through its own connection only.
  for (const [connection, delivery] of [
    ["gh", held.body.delivery],
    ["ghe", "vdel-unknown"],
    ["no-such-connection", held.body.delivery],
  ] as const) {
    const res = await routeCall(stack.server.url, routes.getVcsDelivery, {
      token: stack.server.adminToken,
      params: { connection, delivery },
    });
    assert.equal(res.status, 404, `${connection}/${delivery}`);
  }
});
