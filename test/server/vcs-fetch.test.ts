import assert from "node:assert/strict";
import { randomBytes } from "node:crypto";
import { mkdirSync, mkdtempSync, readdirSync, readFileSync, rmSync, symlinkSync, writeFileSync } from "node:fs";
import { createServer, type Socket } from "node:net";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { after, before, test } from "node:test";
import { routes } from "@drover/protocol";
import { branchHead } from "@drover/vcs";
import { createTestDatabase, type TestDatabase } from "../support/databases.js";
import { gitAs } from "../support/git-repo.js";
import { startGitHttpServer } from "../support/git-http-server.js";
import { startTestServer, type TestServer } from "../support/server.js";
import { tempDir } from "../support/temp-dir.js";

/*
 * The fetch and the poller's faults over real git, without agents: an archive over the size
 * limit, a symlink out of the repository, a VCS that never answers (the deadline, and the
 * token in no process's command line meanwhile), and two server processes polling one database.
 */

const token = "glpat-FETCHtoken0123456789SECRET";
let root: string;
let git: Awaited<ReturnType<typeof startGitHttpServer>>;
let database: TestDatabase;
let servers: TestServer[] = [];

const sh = gitAs("B", "b@example.com");

/** A bare repository group/<name>.git whose main holds `files` (a function may add more to the work tree). */
function repository(name: string, files: Record<string, string>, extra?: (work: string) => void): string {
  sh(root, "init", "-q", "--bare", "-b", "main", `group/${name}.git`);
  const work = join(root, `work-${name}`);
  mkdirSync(work);
  sh(work, "init", "-q", "-b", "main");
  for (const [path, content] of Object.entries(files)) writeFileSync(join(work, path), content);
  extra?.(work);
  sh(work, "add", "-A");
  sh(work, "commit", "-q", "-m", `commit of ${name}`);
  sh(work, "push", "-q", join(root, `group/${name}.git`), "HEAD:main");
  return sh(work, "rev-parse", "HEAD");
}

async function linked(server: TestServer, ws: string, repo: string, connection = "gl"): Promise<void> {
  await server.api(routes.createWorkspace, { body: { name: ws, pool: "p" } });
  const res = await server.api(routes.linkWorkspaceVcs, {
    params: { ws },
    body: { connection, repository: `group/${repo}`, branch: "main" },
  });
  assert.equal(res.status, 200, JSON.stringify(res.body));
}

before(async () => {
  root = mkdtempSync(join(tmpdir(), "drover-vcs-fetch-"));
  mkdirSync(join(root, "group"));
  git = await startGitHttpServer(root, undefined, { basicAuth: { user: "oauth2", password: token } });
  database = await createTestDatabase("postgres");
  for (let i = 0; i < 2; i++)
    servers.push(
      await startTestServer({
        DROVER_DATABASE_URL: database.url,
        DROVER_VCS_POLL_SECONDS: "0",
        DROVER_MAX_CONFIGURATION_MB: "1",
      }),
    );
  const [a] = servers as [TestServer];
  await a.api(routes.createPool, { body: { name: "p" } });
  await a.api(routes.createVcsConnection, { body: { name: "gl", provider: "gitlab", url: git.url, token } });
});
after(async () => {
  for (const s of servers) await s.stop();
  servers = [];
  await database?.drop();
  await git?.close();
  rmSync(root, { recursive: true, force: true });
});

test("two server processes polling at once start one run for a new commit", async () => {
  const [a, b] = servers as [TestServer, TestServer];
  const sha = repository("race", { "main.tf": "" });
  await linked(a, "race", "race");
  const [pa, pb] = await Promise.all([a.pollVcs(), b.pollVcs()]);
  const outcomes = [...pa, ...pb].filter((o) => o.workspace === "race");
  assert.equal(outcomes.filter((o) => o.started).length, 1, JSON.stringify(outcomes));
  const runs = (await a.api(routes.listRuns, { query: { workspace: "race" } })).body.items;
  assert.equal(runs.length, 1);
  assert.equal(runs[0].source.commitSha, sha);
  // Nothing new: no second run.
  await Promise.all([a.pollVcs(), b.pollVcs()]);
  assert.equal((await a.api(routes.listRuns, { query: { workspace: "race" } })).body.items.length, 1);
});

test("trigger paths: a commit starts a run when it changes a matching file or the working directory", async () => {
  const [a] = servers as [TestServer];
  repository("mono", { "README.md": "" }, (work) => {
    mkdirSync(join(work, "envs", "prod"), { recursive: true });
    mkdirSync(join(work, "modules", "net"), { recursive: true });
    writeFileSync(join(work, "envs", "prod", "main.tf"), "");
    writeFileSync(join(work, "modules", "net", "main.tf"), "");
  });
  await a.api(routes.createWorkspace, { body: { name: "mono", pool: "p", workingDirectory: "envs/prod" } });
  const linkedMono = await a.api(routes.linkWorkspaceVcs, {
    params: { ws: "mono" },
    body: { connection: "gl", repository: "group/mono", branch: "main", triggerPaths: ["modules/**"] },
  });
  assert.equal(linkedMono.status, 200, JSON.stringify(linkedMono.body));
  const work = join(root, "work-mono");
  const commit = async (path: string): Promise<{ sha: string; outcome: string }> => {
    writeFileSync(join(work, path), `changed ${Date.now()} ${Math.random()}\n`);
    sh(work, "add", "-A");
    sh(work, "commit", "-q", "-m", `change ${path}`);
    sh(work, "push", "-q", join(root, "group/mono.git"), "HEAD:main");
    const outcome = (await a.pollVcs()).find((o) => o.workspace === "mono");
    return {
      sha: sh(work, "rev-parse", "HEAD"),
      outcome: outcome?.started ? "started" : (outcome?.skipped ?? JSON.stringify(outcome)),
    };
  };
  // The first commit seen always runs: there is nothing to compare it with.
  assert.ok((await a.pollVcs()).find((o) => o.workspace === "mono")?.started);
  assert.deepEqual(await commit("README.md").then((c) => c.outcome), "no changed file matches the trigger paths");
  const viaModule = await commit("modules/net/main.tf");
  assert.equal(viaModule.outcome, "started");
  assert.equal((await commit("envs/prod/main.tf")).outcome, "started", "the working directory always triggers");
  assert.equal((await commit("README.md")).outcome, "no changed file matches the trigger paths");
  const runs = (await a.api(routes.listRuns, { query: { workspace: "mono" } })).body.items;
  assert.equal(runs.length, 3);
  assert.ok(runs.some((r: { source: { commitSha: string } }) => r.source.commitSha === viaModule.sha));
  // A skipped commit still counts as seen: the next comparison starts from it.
  assert.equal(
    (await a.api(routes.getWorkspaceVcs, { params: { ws: "mono" } })).body.lastCommitSha,
    sh(work, "rev-parse", "HEAD"),
  );
});

test("an archive over DROVER_MAX_CONFIGURATION_MB and a symlink out of the repository are refused, with no run", async () => {
  const [a] = servers as [TestServer];
  repository("big", { "main.tf": "", "blob.bin": randomBytes(1_200_000).toString("base64") });
  repository("link", { "main.tf": "" }, (work) => symlinkSync("/etc/passwd", join(work, "passwd.tf")));
  await linked(a, "big", "big");
  await linked(a, "link", "link");
  const outcomes = await a.pollVcs();
  const failed = (ws: string) => outcomes.find((o) => o.workspace === ws)?.failed ?? "";
  assert.match(
    failed("big"),
    /archive of group\/big at [0-9a-f]{12} is larger than 1 MB \(DROVER_MAX_CONFIGURATION_MB\)/,
  );
  assert.match(failed("link"), /archive link "passwd.tf" points to "\/etc\/passwd", outside the archive/);
  for (const ws of ["big", "link"]) {
    assert.equal((await a.api(routes.listRuns, { query: { workspace: ws } })).body.items.length, 0);
    assert.equal((await a.api(routes.getWorkspaceVcs, { params: { ws } })).body.lastError, failed(ws));
  }
});

test("a VCS that never answers meets the deadline; the token is in no git command line meanwhile", async () => {
  const sockets: Socket[] = [];
  let connected!: () => void;
  const reached = new Promise<void>((r) => (connected = r));
  const silent = createServer((s) => {
    sockets.push(s);
    connected();
  });
  await new Promise<void>((r) => silent.listen(0, "127.0.0.1", r));
  const port = (silent.address() as { port: number }).port;
  try {
    const polled = branchHead({ provider: "gitlab", url: `http://127.0.0.1:${port}`, token }, "group/x", "main", {
      deadlines: { lsRemoteMs: 1_000, fetchMs: 1_000 },
    });
    await reached;
    const gits = readdirSync("/proc")
      .filter((p) => /^\d+$/.test(p))
      .map((p) => {
        try {
          return readFileSync(`/proc/${p}/cmdline`, "utf8");
        } catch {
          return "";
        }
      })
      .filter((c) => c.includes(`127.0.0.1:${port}`));
    assert.ok(gits.length > 0, "git is running against the silent server");
    for (const c of gits) assert.ok(!c.includes(token), `a command line holds the token: ${c}`);
    await assert.rejects(polled, /git ls-remote did not finish within 1 s/);
  } finally {
    for (const s of sockets) s.destroy();
    silent.close();
  }
});

test("a server fetches in <data dir>/vcs-work, and empties it of what an earlier process left when it starts", async () => {
  const dataDir = tempDir("drover-vcs-workdir-");
  const work = join(dataDir, "vcs-work");
  // A server killed mid-fetch left its fetch's directory; the file beside it is no fetch's.
  mkdirSync(join(work, "drover-vcs-LEFT", "repo.git"), { recursive: true });
  writeFileSync(join(work, "notes.txt"), "not the server's");
  let during: string[] = [];
  const gated = await startGitHttpServer(root, undefined, {
    basicAuth: { user: "oauth2", password: token },
    beforeFetch: async () => void (during = readdirSync(work)),
  });
  const server = await startTestServer({ DROVER_DATA_DIR: dataDir, DROVER_VCS_POLL_SECONDS: "0" });
  try {
    assert.deepEqual(readdirSync(work), ["notes.txt"]);
    await server.api(routes.createPool, { body: { name: "p" } });
    const conn = { name: "gl-work", provider: "gitlab" as const, url: gated.url, token };
    assert.equal((await server.api(routes.createVcsConnection, { body: conn })).status, 201);
    repository("workdir", { "main.tf": "" });
    await linked(server, "workdir", "workdir", "gl-work");
    const outcome = (await server.pollVcs()).find((o) => o.workspace === "workdir");
    assert.ok(outcome?.started, JSON.stringify(outcome));
    assert.ok(
      during.some((n) => n.startsWith("drover-vcs-")),
      `the fetch worked in the data dir: ${JSON.stringify(during)}`,
    );
    assert.deepEqual(readdirSync(work), ["notes.txt"], "the fetch's directory is removed after it");
  } finally {
    await server.stop();
    await gated.close();
  }
});
