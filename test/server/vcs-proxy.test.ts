import assert from "node:assert/strict";
import { mkdirSync, mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { after, before, test } from "node:test";
import { messageOf } from "@drover/protocol";
import { branchHead, fetchCommitArchive, vcsClient, vcsStatusOf } from "@drover/vcs";
import { startGithubApi, type GithubApi } from "../support/github-api.js";
import { startGitlabApi, type GitlabApi } from "../support/gitlab-api.js";
import { startGitHttpServer } from "../support/git-http-server.js";
import { commitAndPush, gitAs, hostedRepository } from "../support/git-repo.js";
import { startHttpProxy } from "../support/http-proxy.js";

/*
 * A server or VCS agent whose network reaches its VCS only through a proxy: HTTP_PROXY,
 * HTTPS_PROXY and NO_PROXY (as documented for every outbound client) are honoured by the
 * provider API clients (Octokit, gitbeaker) as by git. The VCS hosts here have names only the
 * proxy can reach (.invalid), so an answer proves the request went through it.
 */

const ghToken = "ghp_PROXYtoken0123456789abcdefSECRET";
const glToken = "glpat-PROXYtoken0123456789SECRET";
const sha = "e".repeat(40);
let root: string;
let gh: GithubApi;
let gl: GitlabApi;
let git: Awaited<ReturnType<typeof startGitHttpServer>>;
let proxy: Awaited<ReturnType<typeof startHttpProxy>>;
let pushed: string;
const saved = { ...process.env };

const portOf = (url: string) => Number(new URL(url).port);

before(async () => {
  root = mkdtempSync(join(tmpdir(), "drover-vcs-proxy-"));
  mkdirSync(join(root, "org"));
  const sh = gitAs("P", "p@example.com");
  pushed = commitAndPush(sh, hostedRepository(sh, root, "org/infra"), "main", "through the proxy", {
    "main.tf": "# proxied\n",
  });
  gh = await startGithubApi({ token: ghToken, prefix: "/api/v3" });
  gh.addRepo("org/infra", {
    branches: { main: sha },
    commits: { [sha]: { message: "Add v", author: { name: "Ada", email: "ada@example.com" } } },
  });
  gl = await startGitlabApi({ token: glToken });
  gl.addProject("group/infra", {
    branches: { main: sha },
    commits: { [sha]: { message: "Add w", author: { name: "Bo", email: "bo@example.com" } } },
  });
  // One host serves git and the REST API under /api/v3, as GitHub Enterprise Server does.
  git = await startGitHttpServer(root, undefined, { api: { prefix: "/api/v3", target: gh.url } });
  proxy = await startHttpProxy({
    "ghe.proxied.invalid:80": portOf(git.url),
    "gitlab.proxied.invalid:80": portOf(gl.url),
  });
  // Set before the first VCS client is made: the clients read the environment then, as git reads it each run.
  for (const name of ["HTTP_PROXY", "http_proxy", "HTTPS_PROXY", "https_proxy"]) process.env[name] = proxy.url;
  process.env.NO_PROXY = process.env.no_proxy = "127.0.0.1,localhost";
});
after(async () => {
  for (const name of ["HTTP_PROXY", "http_proxy", "HTTPS_PROXY", "https_proxy", "NO_PROXY", "no_proxy"]) {
    if (saved[name] === undefined) delete process.env[name];
    else process.env[name] = saved[name];
  }
  await Promise.all([proxy?.close(), git?.close(), gh?.close(), gl?.close()]);
  rmSync(root, { recursive: true, force: true });
});

const github = { provider: "github" as const, url: "http://ghe.proxied.invalid" };

test("GitHub: the API calls and git's fetch of a host only the proxy reaches go through the proxy", async () => {
  const client = vcsClient({
    ...github,
    apiUrl: "http://ghe.proxied.invalid/api/v3",
    auth: { kind: "token", token: ghToken },
  });
  assert.deepEqual(await client.run({ op: "commit", repository: "org/infra", sha }), {
    sha,
    message: "Add v",
    author: "Ada <ada@example.com>",
  });
  assert.equal(gh.calls.at(-1)?.path, `/api/v3/repos/org/infra/commits/${sha}`);
  assert.equal(gh.calls.at(-1)?.headers.authorization, `token ${ghToken}`);
  // An http:// host in absolute form, as git asks for it: a proxy tunnels only to 443.
  assert.ok(proxy.seen.some((s) => s.target === "ghe.proxied.invalid:80" && s.method === "GET"));
  assert.ok(proxy.seen.every((s) => s.method !== "CONNECT"));

  const before = proxy.seen.length;
  const access = { ...github, token: ghToken };
  assert.equal(await branchHead(access, "org/infra", "main"), pushed);
  const fetched = await fetchCommitArchive({ access, repository: "org/infra", sha: pushed, maxBytes: 1 << 20 });
  assert.equal(fetched?.message.trim(), "through the proxy");
  assert.ok(proxy.seen.slice(before).length >= 2, JSON.stringify(proxy.seen.slice(before)));
  assert.ok(proxy.seen.slice(before).every((s) => s.target === "ghe.proxied.invalid:80"));
});

test("GitLab: the API calls go through the proxy", async () => {
  const before = proxy.seen.length;
  const client = vcsClient({
    provider: "gitlab",
    url: "http://gitlab.proxied.invalid",
    apiUrl: "http://gitlab.proxied.invalid/api/v4",
    auth: { kind: "token", token: glToken },
  });
  assert.deepEqual(await client.run({ op: "branchHead", repository: "group/infra", branch: "main" }), { sha });
  assert.equal(gl.calls.at(-1)?.headers["private-token"], glToken);
  assert.deepEqual(proxy.seen.slice(before), [{ method: "GET", target: "gitlab.proxied.invalid:80" }]);
});

test("NO_PROXY's hosts are reached straight; a host the proxy refuses is an error naming the proxy's 403", async () => {
  const before = proxy.seen.length;
  const direct = vcsClient({
    provider: "github",
    url: gh.url,
    apiUrl: gh.apiUrl,
    auth: { kind: "token", token: ghToken },
  });
  assert.equal((await direct.run({ op: "commit", repository: "org/infra", sha })).sha, sha);
  assert.deepEqual(proxy.seen.slice(before), [], "127.0.0.1 is in NO_PROXY");

  // An https host is tunnelled: a refused tunnel is no answer of the VCS, and says so.
  const refused = vcsClient({
    provider: "github",
    url: "https://elsewhere.invalid",
    apiUrl: "https://elsewhere.invalid/api/v3",
    auth: { kind: "token", token: ghToken },
  });
  await assert.rejects(refused.run({ op: "commit", repository: "org/infra", sha }), (err) => {
    assert.match(messageOf(err), /^GitHub API call commit failed: Proxy response \(403\)/);
    assert.equal(vcsStatusOf(err), undefined, "the proxy's answer is not the VCS's");
    assert.doesNotMatch(messageOf(err), new RegExp(ghToken));
    return true;
  });
  assert.deepEqual(proxy.seen.at(-1), { method: "CONNECT", target: "elsewhere.invalid:443" });
  // An http host is asked for in absolute form: the proxy's refusal is the answer, its text kept.
  const refusedPlain = vcsClient({
    provider: "github",
    url: "http://elsewhere.invalid",
    apiUrl: "http://elsewhere.invalid/api/v3",
    auth: { kind: "token", token: ghToken },
  });
  await assert.rejects(refusedPlain.run({ op: "commit", repository: "org/infra", sha }), (err) => {
    assert.match(messageOf(err), /^GitHub API call commit failed: 403 the proxy does not reach elsewhere\.invalid:80/);
    assert.doesNotMatch(messageOf(err), new RegExp(ghToken));
    return true;
  });
  assert.deepEqual(proxy.seen.at(-1), { method: "GET", target: "elsewhere.invalid:80" });
  const refusedGitlab = vcsClient({
    provider: "gitlab",
    url: "https://elsewhere.invalid",
    apiUrl: "https://elsewhere.invalid/api/v4",
    auth: { kind: "token", token: glToken },
  });
  await assert.rejects(refusedGitlab.run({ op: "commit", repository: "group/infra", sha }), (err) => {
    assert.match(messageOf(err), /^GitLab API call commit failed: Proxy response \(403\)/);
    assert.doesNotMatch(messageOf(err), new RegExp(glToken));
    return true;
  });
});
