import assert from "node:assert/strict";
import { mkdirSync, mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { after, before, test } from "node:test";
import { routes, type RunSource } from "@drover/protocol";
import { sql } from "kysely";
import { pino } from "pino";
import { commitAndPush, gitAs, hostedRepository, valueConfig } from "../support/git-repo.js";
import { startGitHttpServer } from "../support/git-http-server.js";
import { lookUntil } from "../support/poll.js";
import { startStack, type Stack } from "../support/stack.js";
import { linkArgs } from "../support/vcs-cli.js";

/*
 * Runs from git by polling, end to end over real git: a repository served by `git http-backend`
 * that demands the connection's token, a workspace linked to its branch, and a real agent running
 * real terraform on what the poller fetched.
 */

const token = "ghp_TOKENvcs0123456789abcdefSECRET";
const basic = Buffer.from(`x-access-token:${token}`).toString("base64");
const logLines: string[] = [];
let stack: Stack;
let git: Awaited<ReturnType<typeof startGitHttpServer>>;
let root: string;
let work: string;

const sh = gitAs("Ada", "ada@example.com");

/** Commits `files` (path → content; null removes it) to main and pushes; returns the commit id. */
const commit = (message: string, files: Record<string, string | null>) =>
  commitAndPush(sh, work, "main", message, files);

const tf = valueConfig;

const waitFor = <T>(what: string, look: () => Promise<T | undefined>, timeoutMs?: number) =>
  lookUntil(what, look, { ...(timeoutMs === undefined ? {} : { timeoutMs }), diagnose: () => logLines.join("") });

const runsOf = async (ws: string) =>
  (await stack.server.api(routes.listRuns, { query: { workspace: ws } })).body.items as {
    id: string;
    status: string;
    message: string;
    source: RunSource | null;
  }[];

before(async () => {
  root = mkdtempSync(join(tmpdir(), "drover-vcs-repos-"));
  mkdirSync(join(root, "org"));
  work = hostedRepository(sh, root, "org/infra");
  git = await startGitHttpServer(root, undefined, { basicAuth: { user: "x-access-token", password: token } });
  stack = await startStack(
    { DROVER_VCS_POLL_SECONDS: "1" },
    { logger: pino({ level: "debug" }, { write: (line: string) => void logLines.push(line) }) },
  );
  await stack.startAgent("vcs-agent");
});
after(async () => {
  await stack?.stop();
  await git?.close();
  rmSync(root, { recursive: true, force: true });
});

test("a linked branch's commits run and apply; a commit without configuration is refused; the token stays secret", async () => {
  const tokenFile = join(stack.dir, "vcs-token");
  writeFileSync(tokenFile, `${token}\n`);
  const connected = await stack.cli([
    "vcs",
    "connect",
    "gh",
    "--provider",
    "github",
    "--vcs-url",
    git.url,
    "--vcs-token-file",
    tokenFile,
    "--json",
  ]);
  assert.equal(connected.code, 0, connected.stderr);
  assert.equal(JSON.parse(connected.stdout).provider, "github");
  await stack.server.api(routes.createWorkspace, { body: { name: "infra", pool: stack.pool, autoApply: true } });
  const first = commit("Add v\n\nThe body is not the run's message.", { "main.tf": tf("one") });
  const linked = await stack.cli([...linkArgs("infra", "gh", "org/infra", "main"), "--json"]);
  assert.equal(linked.code, 0, linked.stderr);
  assert.equal(JSON.parse(linked.stdout).repository, "org/infra");

  // The poller sees the first commit: one run, applied, carrying the commit.
  const run1 = await waitFor("the first commit's run", async () => (await runsOf("infra"))[0]);
  assert.deepEqual(run1.source, {
    repository: "org/infra",
    branch: "main",
    commitSha: first,
    message: "Add v",
    author: "Ada <ada@example.com>",
    pullRequest: null,
  });
  assert.equal(run1.message, "Add v");
  assert.equal((await stack.waitForRun(run1.id, ["applied"])).status, "applied");
  // Linking also asked this host's /api/v3 (the connection's default API base) for a webhook; git's own requests all carried the token.
  const gitRefused = git.refused.filter((p) => !p.startsWith("/api/v3/"));
  assert.ok(gitRefused.length === 0, `git saw requests without the token: ${gitRefused.join(", ")}`);

  // A new commit: a second run, applied, with that commit.
  const second = commit("Change v", { "main.tf": tf("two") });
  const run2 = await waitFor("the second commit's run", async () => {
    const runs = await runsOf("infra");
    return runs.length === 2 ? runs[0] : undefined;
  });
  assert.equal(run2.source?.commitSha, second);
  assert.equal((await stack.waitForRun(run2.id, ["applied"])).status, "applied");
  const outputs = await stack.server.api(routes.workspaceOutputs, { params: { ws: "infra" } });
  assert.equal(outputs.body.items[0].value, "two");
  const listed = await stack.cli(["run", "list", "--workspace", "infra"]);
  assert.match(listed.stdout, new RegExp(`${second.slice(0, 8)} Change v`));
  assert.match(listed.stdout, new RegExp(`${first.slice(0, 8)} Add v`));
  const shown = await stack.cli(["run", "show", run2.id]);
  assert.match(shown.stdout, new RegExp(`commit ${second.slice(0, 8)} Change v \\(org/infra main, Ada`));
  // The run's message is the commit's first line, shown once, on the commit's line and in COMMIT.
  assert.doesNotMatch(shown.stdout, /^Message:/m);
  assert.equal((listed.stdout.match(/Change v/g) ?? []).length, 1, listed.stdout);

  // A commit whose root holds no .tf file: refused with the archive check's error, no run.
  const third = commit("Move everything away", { "main.tf": null, "docs/README.md": "nothing to plan\n" });
  const refusal = await waitFor("the refusal", async () => {
    const link = await stack.server.api(routes.getWorkspaceVcs, { params: { ws: "infra" } });
    return link.body.lastError ?? undefined;
  });
  assert.match(refusal, /no \.tf.* file in its root: nothing to plan/);
  assert.ok(
    logLines.some((l) => l.includes(third) && l.includes("nothing to plan")),
    "the log names the commit and why",
  );
  // Polls go on and still start nothing for it.
  const polled = await stack.server.pollVcs();
  assert.deepEqual(polled, [{ workspace: "infra", skipped: "this commit was refused before" }]);
  assert.equal((await runsOf("infra")).length, 2);

  // A connection with a wrong token: a clear error; the other link goes on.
  writeFileSync(tokenFile, "ghp_WRONGtoken000000000000000000");
  assert.equal(
    (
      await stack.cli([
        "vcs",
        "connect",
        "bad",
        "--provider",
        "github",
        "--vcs-url",
        git.url,
        "--vcs-token-file",
        tokenFile,
      ])
    ).code,
    0,
  );
  await stack.server.api(routes.createWorkspace, { body: { name: "wrong", pool: stack.pool } });
  assert.equal((await stack.cli(linkArgs("wrong", "bad", "org/infra", "main"))).code, 0);
  const fourth = commit("Back again", { "main.tf": tf("four") });
  const outcomes = await stack.server.pollVcs();
  // The failing link does not keep the poll from the other one.
  assert.deepEqual(outcomes.map((o) => o.workspace).sort(), ["infra", "wrong"]);
  const wrong = outcomes.find((o) => o.workspace === "wrong");
  assert.match(wrong?.failed ?? "", /the VCS refused the connection's token for org\/infra/);
  assert.ok(!(wrong?.failed ?? "").includes("WRONGtoken"), wrong?.failed);
  assert.ok(git.refused.length > 0);
  const run3 = await waitFor("the fourth commit's run", async () => {
    const runs = await runsOf("infra");
    return runs.length === 3 ? runs[0] : undefined;
  });
  assert.equal(run3.source?.commitSha, fourth);
  await stack.waitForRun(run3.id, ["applied"]);

  // Deleting a connection in use names the workspaces; unlinking frees it.
  const refused = await stack.cli(["vcs", "delete", "bad"]);
  assert.notEqual(refused.code, 0);
  assert.match(refused.stderr, /VCS connection bad is used by workspace wrong/);
  assert.equal((await stack.cli(["workspace", "unlink", "wrong"])).code, 0);
  assert.equal((await stack.cli(["vcs", "delete", "bad", "--json"])).code, 0);

  // The token is in no answer and no log line.
  const answers = JSON.stringify([
    (await stack.server.api(routes.listVcsConnections, {})).body,
    (await stack.server.api(routes.getVcsConnection, { params: { connection: "gh" } })).body,
    (await stack.server.api(routes.getWorkspaceVcs, { params: { ws: "infra" } })).body,
    await runsOf("infra"),
    connected.stdout,
    (await stack.cli(["vcs", "list"])).stdout,
  ]);
  const logs = logLines.join("");
  for (const secret of [token, basic, "WRONGtoken"]) {
    assert.ok(!answers.includes(secret), `an API answer holds ${secret}`);
    assert.ok(!logs.includes(secret), `the server log holds ${secret}`);
  }
});

test("a link's --apply-on-merge decides whether the branch's commits apply, whatever the workspace's auto-apply", async () => {
  // The branch's head (from the test above) has a configuration; each new link runs it once.
  await stack.server.api(routes.createWorkspace, { body: { name: "merged", pool: stack.pool, autoApply: false } });
  await stack.server.api(routes.createWorkspace, { body: { name: "held", pool: stack.pool, autoApply: true } });
  // -w names the workspace here, as in every command that acts on one.
  const link = (ws: string, flag: string) =>
    stack.cli([
      "workspace",
      "link",
      "-w",
      ws,
      "--vcs",
      "gh",
      "--repo",
      "org/infra",
      "--branch",
      "main",
      flag,
      "--json",
    ]);
  const merged = await link("merged", "--apply-on-merge");
  assert.equal(merged.code, 0, merged.stderr);
  assert.equal(JSON.parse(merged.stdout).applyOnMerge, true);
  const held = await link("held", "--no-apply-on-merge");
  assert.equal(held.code, 0, held.stderr);
  assert.equal(JSON.parse(held.stdout).applyOnMerge, false);
  const first = async (ws: string) => waitFor(`${ws}'s run`, async () => (await runsOf(ws))[0]);
  assert.equal((await stack.waitForRun((await first("merged")).id, ["applied"])).status, "applied");
  const waiting = await stack.waitForRun((await first("held")).id, ["planned"]);
  assert.equal(waiting.status, "planned", "the run waits for confirmation");
  assert.equal((await stack.cli(["workspace", "unlink", "merged"])).code, 0);
  const unlinked = await stack.cli(["workspace", "unlink", "--workspace", "held"]);
  assert.equal(unlinked.code, 0, unlinked.stderr);
  assert.equal((await stack.server.api(routes.getWorkspaceVcs, { params: { ws: "held" } })).status, 404);
  const none = await stack.cli(["workspace", "unlink"]);
  assert.equal(none.code, 2);
  assert.match(none.stderr, /which workspace\?/);
});

test("repository paths, branches and URLs that could reach outside the repository are refused", async () => {
  const bad = async (route: typeof routes.linkWorkspaceVcs | typeof routes.createVcsConnection, input: object) => {
    const res = await stack.server.api(route as typeof routes.linkWorkspaceVcs, input as never);
    assert.equal(res.status, 400, JSON.stringify(res.body));
    return res.body.message as string;
  };
  await stack.server.api(routes.createVcsConnection, {
    body: { name: "attacks", provider: "github", url: "https://github.com", token: "t0ken" },
  });
  await stack.server.api(routes.createWorkspace, { body: { name: "attacked", pool: stack.pool } });
  const link = (repository: string, branch = "main") =>
    bad(routes.linkWorkspaceVcs, { params: { ws: "attacked" }, body: { connection: "attacks", repository, branch } });
  assert.match(await link("../x"), /repository/);
  assert.match(await link("-upload-pack=touch /tmp/pwned"), /repository/);
  assert.match(await link("o/-upload-pack=x"), /repository/);
  assert.match(await link("https://evil.example/o/r"), /repository/);
  assert.match(await link("o/r", "--foo"), /not a valid git branch name/);
  assert.match(await link("o/r", "a..b"), /not a valid git branch name/);
  for (const url of [
    "file:///srv/git",
    "ext::sh -c touch% /tmp/pwned",
    "ssh://git@github.com",
    "https://u:p@github.com",
  ])
    assert.match(
      await bad(routes.createVcsConnection, { body: { name: "x", provider: "github", url, token: "t0ken" } }),
      /URL/,
    );
  assert.equal((await stack.server.api(routes.getWorkspaceVcs, { params: { ws: "attacked" } })).status, 404);
});

test("a commit whose run could not be written is retried, not lost: the run takes its commit in one transaction", async () => {
  const { db } = stack.server.store;
  const ws = (await stack.server.api(routes.createWorkspace, { body: { name: "lost", pool: stack.pool } })).body as {
    id: string;
  };
  // The database fails the run's insert and, had the commit been taken before it, its release:
  // what a server losing its database between the two statements leaves behind.
  await sql`CREATE TRIGGER lost_run BEFORE INSERT ON runs WHEN NEW.workspace_id = ${sql.lit(ws.id)}
    BEGIN SELECT RAISE(ABORT, 'the disk went away'); END`.execute(db);
  await sql`CREATE TRIGGER lost_release BEFORE UPDATE OF last_commit_sha ON workspace_vcs
    WHEN NEW.workspace_id = ${sql.lit(ws.id)} AND NEW.last_commit_sha IS NULL
    BEGIN SELECT RAISE(ABORT, 'the disk went away'); END`.execute(db);
  const linked = await stack.cli(linkArgs("lost", "gh", "org/infra", "main"));
  assert.equal(linked.code, 0, linked.stderr);
  const vcs = async () => (await stack.server.api(routes.getWorkspaceVcs, { params: { ws: "lost" } })).body;
  await waitFor("the failed run recorded on the link", async () =>
    /the disk went away/.test(String((await vcs()).lastError)) ? true : undefined,
  );
  assert.equal((await runsOf("lost")).length, 0);
  await sql`DROP TRIGGER lost_run`.execute(db);
  await sql`DROP TRIGGER lost_release`.execute(db);
  const run = await waitFor("the branch head's run, once the database takes it", async () => (await runsOf("lost"))[0]);
  assert.equal(run.source?.commitSha, (await vcs()).lastCommitSha);
  assert.equal((await stack.waitForRun(run.id, ["planned"])).status, "planned");
  assert.equal((await runsOf("lost")).length, 1);
});
