import { after, before, test } from "node:test";
import assert from "node:assert/strict";
import { execFileSync } from "node:child_process";
import {
  existsSync,
  lstatSync,
  mkdirSync,
  mkdtempSync,
  readdirSync,
  readFileSync,
  rmSync,
  writeFileSync,
} from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { Agent as UndiciAgent } from "undici";
import { createLogger, ModuleCache } from "@drover/agent";
import { startGitHttpServer } from "../support/git-http-server.js";
import { privateCa } from "../support/private-ca.js";
import { installedModuleFile } from "../support/installed-modules.js";

// A git module served over https with a certificate from a private CA: the module cache's git
// trusts DROVER_CA_CERT (given to the cache as caCertPem) as the agent's HTTP client does.

const logger = createLogger("json", false);
logger.level = "silent";
let root: string;
let ca: { cert: string; key: string };
let gitServer: Awaited<ReturnType<typeof startGitHttpServer>>;

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
  });

before(async () => {
  root = mkdtempSync(join(tmpdir(), "drover-module-git-ca-"));
  const work = join(root, "work");
  mkdirSync(work);
  git(["init", "-q", "-b", "main"], work);
  writeFileSync(join(work, "main.tf"), `output "v" { value = "private-ca" }\n`);
  git(["add", "."], work);
  git(["commit", "-q", "-m", "one"], work);
  const served = join(root, "served");
  mkdirSync(served);
  git(["clone", "-q", "--bare", work, join(served, "repo.git")], root);
  ca = privateCa();
  gitServer = await startGitHttpServer(served, ca);
});
after(async () => {
  await gitServer.close();
  rmSync(root, { recursive: true, force: true });
});

function prepare(name: string, caCertPem: string | undefined) {
  const dir = mkdtempSync(join(root, "config-"));
  writeFileSync(join(dir, "main.tf"), `module "m" {\n  source = "git::${gitServer.url}/repo.git"\n}\n`);
  const cacheDir = join(root, `cache-${name}`);
  const modules = new ModuleCache({
    dir: cacheDir,
    limitBytes: 1 << 30,
    dispatcher: new UndiciAgent(),
    logger,
    caCertPem,
  });
  return { dir, cacheDir, lease: modules.prepare(dir, AbortSignal.timeout(60_000)) };
}

test("with the private CA given to the module cache, a git source over https is fetched and installed", async () => {
  const { dir, cacheDir, lease: pending } = prepare("trusted", ca.cert);
  const lease = await pending;
  lease.release();
  assert.deepEqual(lease.notes, []);
  assert.deepEqual(
    lease.installed.map((i) => i.split(" ")[0]),
    ["m"],
  );
  assert.match(installedModuleFile(dir, "m"), /"private-ca"/);
  // git's CA file: private to the agent's user, the default roots and the private CA.
  const bundles = readdirSync(cacheDir).filter((n) => n.startsWith("git-ca-"));
  assert.equal(bundles.length, 1);
  const bundle = join(cacheDir, bundles[0] as string);
  const st = lstatSync(bundle);
  assert.ok(st.isFile());
  assert.equal(st.mode & 0o777, 0o600);
  const text = readFileSync(bundle, "utf8");
  assert.ok(text.includes(ca.cert.trim()));
  assert.ok((text.match(/BEGIN CERTIFICATE/g) ?? []).length > 50, "the default roots are in the bundle too");
  assert.deepEqual(readdirSync(join(cacheDir, "tmp")), []);
});

test("without the CA, the git source is not cached and the note names the untrusted certificate", async () => {
  const { dir, lease: pending } = prepare("untrusted", undefined);
  const lease = await pending;
  lease.release();
  assert.deepEqual(lease.installed, []);
  assert.match(
    lease.notes.join("\n"),
    /module m not cached \(git_tls_untrusted: git ls-remote: .*certificate.*set DROVER_CA_CERT.*\); terraform installs it itself/,
  );
  assert.equal(readdirSync(join(dir)).includes(".terraform"), false);
});

test("a second cache on the same directory rewrites the same bundle in place, not through a link planted at its name", async () => {
  const cacheDir = join(root, "cache-trusted");
  const name = readdirSync(cacheDir).find((n) => n.startsWith("git-ca-")) as string;
  const bait = join(root, "bait");
  writeFileSync(bait, "not a certificate\n");
  rmSync(join(cacheDir, name));
  execFileSync("ln", ["-s", bait, join(cacheDir, name)]);
  new ModuleCache({ dir: cacheDir, limitBytes: 1 << 30, dispatcher: new UndiciAgent(), logger, caCertPem: ca.cert });
  assert.equal(readFileSync(bait, "utf8"), "not a certificate\n");
  assert.ok(lstatSync(join(cacheDir, name)).isFile());
  assert.ok(readFileSync(join(cacheDir, name), "utf8").includes(ca.cert.trim()));
});

test("the roots git would have used stay trusted beside the private CA: GIT_SSL_CAINFO, NODE_EXTRA_CA_CERTS and the system store", () => {
  const forGit = privateCa();
  const forNode = privateCa();
  const gitFile = join(root, "inherited.pem");
  const nodeFile = join(root, "node-extra.pem");
  writeFileSync(gitFile, forGit.cert);
  writeFileSync(nodeFile, forNode.cert);
  const saved = { git: process.env.GIT_SSL_CAINFO, node: process.env.NODE_EXTRA_CA_CERTS };
  process.env.GIT_SSL_CAINFO = gitFile;
  process.env.NODE_EXTRA_CA_CERTS = nodeFile;
  const restore = (key: "GIT_SSL_CAINFO" | "NODE_EXTRA_CA_CERTS", value: string | undefined) =>
    value === undefined ? delete process.env[key] : (process.env[key] = value);
  try {
    const cacheDir = join(root, "cache-inherited");
    new ModuleCache({ dir: cacheDir, limitBytes: 1 << 30, dispatcher: new UndiciAgent(), logger, caCertPem: ca.cert });
    const name = readdirSync(cacheDir).find((n) => n.startsWith("git-ca-")) as string;
    const text = readFileSync(join(cacheDir, name), "utf8");
    assert.ok(text.includes(forGit.cert.trim()), "GIT_SSL_CAINFO's roots");
    assert.ok(text.includes(forNode.cert.trim()), "NODE_EXTRA_CA_CERTS's roots");
    assert.ok(text.includes(ca.cert.trim()), "the private CA");
    const system = "/etc/ssl/certs/ca-certificates.crt";
    if (existsSync(system))
      assert.ok(text.includes(readFileSync(system, "utf8").trim()), "the system store (update-ca-certificates)");
  } finally {
    restore("GIT_SSL_CAINFO", saved.git);
    restore("NODE_EXTRA_CA_CERTS", saved.node);
  }
});
