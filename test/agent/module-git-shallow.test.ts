import { after, before, test } from "node:test";
import assert from "node:assert/strict";
import { execFileSync } from "node:child_process";
import { randomBytes } from "node:crypto";
import { mkdirSync, mkdtempSync, readdirSync, rmSync, writeFileSync } from "node:fs";
import { connect, createServer, type AddressInfo, type Server, type Socket } from "node:net";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { Agent as UndiciAgent } from "undici";
import { createLogger, ModuleCache } from "@drover/agent";
import { startGitHttpServer } from "../support/git-http-server.js";
import { installedModuleFile } from "../support/installed-modules.js";

// A git module whose repository has a long history: the cache fetches the one commit it needs
// (depth 1), so the bytes on the wire are about one tree, not every version of every file.
// Through a byte-counting TCP relay in front of git http-backend on 127.0.0.1.

const logger = createLogger("json", false);
logger.level = "silent";
const commits = 24;
const blobBytes = 96 * 1024;
let root: string;
let repo: string;
const history: string[] = [];
let gitServer: Awaited<ReturnType<typeof startGitHttpServer>>;
let relay: Server;
const sockets: Socket[] = [];
let relayed = 0;
let url: string;

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
  root = mkdtempSync(join(tmpdir(), "drover-module-git-shallow-"));
  repo = join(root, "work");
  mkdirSync(repo);
  git(["init", "-q", "-b", "main"], repo);
  // Every commit replaces an incompressible file: the history is `commits` times one tree.
  for (let i = 0; i < commits; i++) {
    writeFileSync(join(repo, "main.tf"), `output "v" { value = "version-${i}" }\n`);
    writeFileSync(join(repo, "blob.bin"), randomBytes(blobBytes));
    git(["add", "."], repo);
    git(["commit", "-q", "-m", `c${i}`], repo);
    history.push(git(["rev-parse", "HEAD"], repo));
  }
  git(["tag", "-a", "v-last", "-m", "last"], repo);
  const served = join(root, "served");
  mkdirSync(served);
  git(["clone", "-q", "--bare", repo, join(served, "repo.git")], root);
  gitServer = await startGitHttpServer(served);
  const upstream = Number(new URL(gitServer.url).port);
  relay = createServer((client) => {
    const up = connect(upstream, "127.0.0.1");
    sockets.push(client, up);
    up.on("data", (d: Buffer) => (relayed += d.length));
    client.pipe(up);
    up.pipe(client);
    client.on("error", () => up.destroy());
    up.on("error", () => client.destroy());
  });
  await new Promise<void>((r) => relay.listen(0, "127.0.0.1", r));
  url = `http://127.0.0.1:${(relay.address() as AddressInfo).port}/repo.git`;
});
after(async () => {
  for (const s of sockets) s.destroy();
  relay.close();
  await gitServer.close();
  rmSync(root, { recursive: true, force: true });
});

function configDir(text: string): string {
  const dir = mkdtempSync(join(root, "config-"));
  writeFileSync(join(dir, "main.tf"), text);
  return dir;
}

/** Prepares `source` in a fresh cache; what the module's main.tf says and the bytes the server sent. */
async function fetchModule(name: string, source: string): Promise<{ text: string; bytes: number }> {
  const modules = new ModuleCache({
    dir: join(root, `cache-${name}`),
    limitBytes: 1 << 30,
    dispatcher: new UndiciAgent(),
    logger,
  });
  const before = relayed;
  const dir = configDir(`module "m" {\n  source = "${source}"\n}\n`);
  const lease = await modules.prepare(dir, AbortSignal.timeout(60_000));
  lease.release();
  assert.deepEqual(lease.notes, []);
  assert.deepEqual(
    lease.installed.map((i) => i.split(" ")[0]),
    ["m"],
  );
  return { text: installedModuleFile(dir, "m"), bytes: relayed - before };
}

const historyBytes = commits * blobBytes;

test("a tag, HEAD and an old commit of a long history each cost about one tree on the wire", async () => {
  const cases: Array<[string, string, number]> = [
    ["tag", `git::${url}?ref=v-last`, commits - 1],
    ["head", `git::${url}`, commits - 1],
    ["old-commit", `git::${url}?ref=${history[3]}`, 3],
  ];
  for (const [name, source, version] of cases) {
    const { text, bytes } = await fetchModule(name, source);
    assert.match(text, new RegExp(`"version-${version}"`), name);
    // One tree is ~blobBytes; the whole history `commits` times that.
    assert.ok(bytes < historyBytes / 4, `${name}: ${bytes} bytes on the wire for a ${historyBytes}-byte history`);
  }
});

test("a server that only serves advertised refs (protocol v0): an old commit still comes, through a whole clone", async () => {
  // The agent's git reads its configuration from the environment it inherits.
  const saved = {
    count: process.env.GIT_CONFIG_COUNT,
    key: process.env.GIT_CONFIG_KEY_0,
    value: process.env.GIT_CONFIG_VALUE_0,
  };
  Object.assign(process.env, { GIT_CONFIG_COUNT: "1", GIT_CONFIG_KEY_0: "protocol.version", GIT_CONFIG_VALUE_0: "0" });
  try {
    const { text, bytes } = await fetchModule("v0", `git::${url}?ref=${history[5]}`);
    assert.match(text, /"version-5"/);
    assert.ok(bytes > historyBytes / 2, `the fallback is a whole clone (${bytes} bytes)`);
  } finally {
    for (const [k, v] of [
      ["GIT_CONFIG_COUNT", saved.count],
      ["GIT_CONFIG_KEY_0", saved.key],
      ["GIT_CONFIG_VALUE_0", saved.value],
    ] as const) {
      if (v === undefined) delete process.env[k];
      else process.env[k] = v;
    }
  }
  assert.ok(readdirSync(join(root, "cache-v0")).length > 0);
});
