import { after, before, test } from "node:test";
import assert from "node:assert/strict";
import { execFileSync } from "node:child_process";
import { createHash } from "node:crypto";
import { mkdirSync, mkdtempSync, readFileSync, rmSync, statSync, writeFileSync } from "node:fs";
import { createServer, type Server } from "node:http";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { Agent as UndiciAgent } from "undici";
import { createLogger, ModuleCache, ProviderCache, VerificationError } from "@drover/agent";
import { rawTarGz } from "../support/archives.js";
import { startProviderRegistry, type TestRegistry } from "../support/provider-registry.js";
import { runTerraform, terraformEnv } from "../support/terraform.js";

// git and http module sources in the module cache, and what the modules they bring call: a git
// repository on this machine (file://, with DROVER_AGENT_MODULE_CACHE_LOCAL_SOURCES; by commit
// and by tag, with a //subdir), an http archive
// server on 127.0.0.1 (with ?checksum=), and inside the git module a registry module and a
// provider — all prepared before `init`, which then downloads nothing.

let registry: TestRegistry;
let root: string;
let repo: string;
let commit: string;
let archiveServer: Server;
let archiveUrl: string;
let archiveRequests = 0;
const archive = rawTarGz([{ path: "main.tf", content: 'output "v" { value = "from-http" }\n' }]);
const archiveSum = createHash("sha256").update(archive).digest("hex");
const logger = createLogger("json", false);
logger.level = "silent";

const git = (args: string[], cwd: string) =>
  execFileSync("git", args, {
    cwd,
    env: {
      ...process.env,
      GIT_AUTHOR_NAME: "t",
      GIT_AUTHOR_EMAIL: "t@t",
      GIT_COMMITTER_NAME: "t",
      GIT_COMMITTER_EMAIL: "t@t",
    },
  })
    .toString()
    .trim();

before(async () => {
  registry = await startProviderRegistry(
    [{ type: "alpha", versions: ["1.0.0"] }],
    [{ name: "thing", versions: ["1.0.0"], files: { "main.tf": 'output "v" { value = "thing-VERSION" }\n' } }],
  );
  root = mkdtempSync(join(tmpdir(), "drover-module-sources-"));
  repo = join(root, "repo");
  mkdirSync(join(repo, "sub"), { recursive: true });
  writeFileSync(
    join(repo, "main.tf"),
    `terraform {\n  required_providers {\n    alpha = { source = "${registry.source("alpha")}", version = "1.0.0" }\n  }\n}\nmodule "inner" {\n  source  = "${registry.host}/drover/thing/null"\n  version = "1.0.0"\n}\nresource "alpha_thing" "x" { input = "git" }\noutput "v" { value = "git-\${module.inner.v}" }\n`,
  );
  writeFileSync(join(repo, "sub", "main.tf"), 'output "v" { value = "from-sub" }\n');
  git(["init", "-q", "-b", "main"], repo);
  git(["add", "."], repo);
  git(["commit", "-q", "-m", "one"], repo);
  git(["tag", "-a", "v1", "-m", "v1"], repo);
  commit = git(["rev-parse", "HEAD"], repo);
  archiveServer = createServer((req, res) => {
    archiveRequests++;
    if (req.url?.startsWith("/mod.tar.gz")) res.writeHead(200, { "content-type": "application/gzip" }).end(archive);
    else res.writeHead(404).end();
  });
  await new Promise<void>((r) => archiveServer.listen(0, "127.0.0.1", r));
  const address = archiveServer.address();
  archiveUrl = `http://127.0.0.1:${typeof address === "object" && address ? address.port : 0}/mod.tar.gz`;
});

after(async () => {
  await registry.close();
  archiveServer.closeAllConnections();
  await new Promise<void>((r) => archiveServer.close(() => r()));
  rmSync(root, { recursive: true, force: true });
});

const dispatcher = () => new UndiciAgent({ connect: { ca: readFileSync(registry.caFile, "utf8") } });

let n = 0;
function configDir(text: string): string {
  const dir = join(root, "configs", `c${n++}`);
  mkdirSync(dir, { recursive: true });
  writeFileSync(join(dir, "main.tf"), text);
  return dir;
}

const sourcesConfig = (checksum = archiveSum) =>
  [
    `module "g" {\n  source = "git::file://${repo}?ref=${commit}"\n}`,
    `module "t" {\n  source = "git::file://${repo}//sub?ref=v1"\n}`,
    `module "h" {\n  source = "${archiveUrl}?checksum=sha256:${checksum}"\n}`,
    'output "all" { value = "${module.g.v} ${module.t.v} ${module.h.v}" }',
  ].join("\n") + "\n";

test("git (commit, tag, subdir) and http (checksum) modules, and the registry module and provider the git module needs, are prepared; init downloads nothing", async () => {
  const modules = new ModuleCache({
    dir: join(root, "modules"),
    limitBytes: 1 << 30,
    dispatcher: dispatcher(),
    logger,
    allowLocalSources: true,
  });
  const providers = new ProviderCache({
    dir: join(root, "providers"),
    limitBytes: 1 << 30,
    dispatcher: dispatcher(),
    logger,
    platform: "linux_amd64",
  });
  const plan = async () => {
    const dir = configDir(sourcesConfig());
    const mods = await modules.prepare(dir, AbortSignal.timeout(60_000));
    const provs = await providers.prepare(dir, AbortSignal.timeout(60_000), mods.dirs);
    try {
      assert.deepEqual(mods.notes, []);
      assert.deepEqual(mods.installed.map((i) => i.split(" ")[0]).sort(), ["g", "g.inner", "h", "t"]);
      assert.deepEqual(provs.prepared, [`${registry.source("alpha")} 1.0.0`], provs.notes.join("\n"));
      const env = terraformEnv(dir, { SSL_CERT_FILE: registry.caFile });
      writeFileSync(env.TF_CLI_CONFIG_FILE as string, provs.installation);
      const init = await runTerraform(["init", "-input=false", "-no-color", "-backend=false"], dir, env);
      assert.equal(init.code, 0, init.output);
      assert.doesNotMatch(init.output, /Downloading/, `init fetched a module itself:\n${init.output}`);
      const p = await runTerraform(["plan", "-input=false", "-no-color"], dir, env);
      assert.equal(p.code, 0, p.output);
      assert.match(p.output, /all\s+=\s+"git-thing-1\.0\.0 from-sub from-http"/);
    } finally {
      mods.release();
      provs.release();
    }
  };
  const before = registry.requests.length;
  await plan();
  // One entry per git commit (the tag names the same commit), one registry module, one archive.
  assert.equal(modules.counters.misses, 3);
  assert.equal(archiveRequests, 1);
  const fetched = registry.requests.length;
  assert.ok(fetched > before);
  await plan();
  assert.equal(modules.counters.misses, 3, "warm: nothing fetched again");
  assert.equal(archiveRequests, 1, "warm: the archive server was not asked");
  assert.deepEqual(registry.requests.slice(fetched), [], "warm: the registry was not asked");
  const entry = join(root, "modules", "entries", "git");
  assert.equal(statSync(entry).isDirectory(), true);
});

test("an http module whose archive does not match its ?checksum fails the run with the reason, and nothing is cached", async () => {
  const modules = new ModuleCache({
    dir: join(root, "modules-bad"),
    limitBytes: 1 << 30,
    dispatcher: dispatcher(),
    logger,
  });
  const dir = configDir(`module "h" {\n  source = "${archiveUrl}?checksum=sha256:${"0".repeat(64)}"\n}\n`);
  await assert.rejects(
    modules.prepare(dir, AbortSignal.timeout(30_000)),
    (err: unknown) =>
      err instanceof VerificationError && err.reason === "module_checksum_mismatch" && /sha256/.test(err.message),
  );
  assert.equal(modules.counters.misses, 0);
});

test("a git ref the repository does not have is left to terraform with a note, not cached", async () => {
  const modules = new ModuleCache({
    dir: join(root, "modules-ref"),
    limitBytes: 1 << 30,
    dispatcher: dispatcher(),
    logger,
    allowLocalSources: true,
  });
  const dir = configDir(`module "g" {\n  source = "git::file://${repo}?ref=no-such-tag"\n}\n`);
  const lease = await modules.prepare(dir, AbortSignal.timeout(30_000));
  lease.release();
  assert.deepEqual(lease.installed, []);
  assert.match(lease.notes.join("\n"), /module g not cached .*no ref no-such-tag.*terraform installs it itself/);
});

test("git over http (git http-backend on 127.0.0.1): a commit ref needs no request once cached, a tag one ls-remote per run", async () => {
  const { startGitHttpServer } = await import("../support/git-http-server.js");
  const served = join(root, "served");
  mkdirSync(served, { recursive: true });
  git(["clone", "-q", "--bare", repo, join(served, "repo.git")], root);
  const server = await startGitHttpServer(served);
  try {
    const modules = new ModuleCache({
      dir: join(root, "modules-http-git"),
      limitBytes: 1 << 30,
      dispatcher: dispatcher(),
      logger,
    });
    const prepare = async (ref: string) => {
      const lease = await modules.prepare(
        configDir(`module "s" {\n  source = "git::${server.url}/repo.git//sub?ref=${ref}"\n}\n`),
        AbortSignal.timeout(60_000),
      );
      lease.release();
      assert.deepEqual(lease.notes, []);
      assert.deepEqual(
        lease.installed.map((i) => i.split(" ")[0]),
        ["s"],
      );
    };
    await prepare(commit);
    assert.equal(modules.counters.misses, 1);
    assert.ok(server.requests.length > 0, "the first run fetched over http");
    const seen = server.requests.length;
    await prepare(commit);
    assert.deepEqual(server.requests.slice(seen), [], "a cached commit asks nothing");
    await prepare("v1");
    assert.equal(modules.counters.misses, 1, "the tag names the cached commit: nothing fetched");
    assert.ok(
      server.requests.slice(seen).every((p) => p.endsWith("/info/refs") || p.endsWith("/git-upload-pack")),
      `only ls-remote: ${server.requests.slice(seen).join(" ")}`,
    );
  } finally {
    await server.close();
  }
});

// Security review N4: with local sources allowed the agent read a repository inside a directory
// only it (root) could read, on behalf of a run whose user could not.
test("a git::file:// source is left to terraform unless DROVER_AGENT_MODULE_CACHE_LOCAL_SOURCES allows it", async () => {
  const { chmodSync, cpSync, existsSync } = await import("node:fs");
  const locked = join(root, "rootonly");
  mkdirSync(locked);
  cpSync(repo, join(locked, "repo"), { recursive: true });
  writeFileSync(join(locked, "repo", "secret.tf"), 'output "secret" { value = "ROOT-ONLY-SECRET-42" }\n');
  git(["add", "."], join(locked, "repo"));
  git(["commit", "-q", "-m", "secret"], join(locked, "repo"));
  chmodSync(locked, 0o700);
  const text = `module "m" {\n  source = "git::file://${locked}/repo//sub"\n}\n`;
  const off = new ModuleCache({
    dir: join(root, "modules-local-off"),
    limitBytes: 1 << 30,
    dispatcher: dispatcher(),
    logger,
  });
  const lease = await off.prepare(configDir(text), AbortSignal.timeout(30_000));
  lease.release();
  assert.deepEqual(lease.installed, []);
  assert.match(
    lease.notes.join("\n"),
    /module m: the cache does not fetch local repositories \(git::file:\/\/.*\); left to terraform/,
  );
  assert.equal(off.counters.misses, 0);
  assert.equal(
    existsSync(join(root, "modules-local-off", "entries", "git")),
    false,
    "nothing was fetched from the repository",
  );
  const on = new ModuleCache({
    dir: join(root, "modules-local-on"),
    limitBytes: 1 << 30,
    dispatcher: dispatcher(),
    logger,
    allowLocalSources: true,
  });
  const allowed = await on.prepare(configDir(text), AbortSignal.timeout(30_000));
  allowed.release();
  assert.equal(allowed.installed.length, 1, allowed.notes.join("\n"));
});
