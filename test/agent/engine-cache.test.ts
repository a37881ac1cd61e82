import { after, before, test } from "node:test";
import assert from "node:assert/strict";
import { execFileSync } from "node:child_process";
import { chmodSync, mkdirSync, mkdtempSync, readFileSync, rmSync, statSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { dirname, join } from "node:path";
import { Agent as UndiciAgent } from "undici";
import {
  createLogger,
  EngineCache,
  EngineError,
  hashicorpReleaseKey,
  loadAgentConfig,
  newestSatisfying,
  type EngineCacheOptions,
} from "@drover/agent";
import { InvalidSettingError, newPoolToken } from "@drover/protocol";
import { startReleaseServer, type TestReleaseServer } from "../support/engine-releases.js";

let releases: TestReleaseServer;
let root: string;
/** A directory for PATH holding a `terraform` that reports 9.9.9. */
let pathDir: string;
const logger = createLogger("json", false);
logger.level = "silent";
const dispatcher = new UndiciAgent();
const signal = new AbortController().signal;

before(async () => {
  releases = await startReleaseServer([
    { engine: "terraform", version: "1.0.0" },
    { engine: "terraform", version: "1.2.0" },
    { engine: "terraform", version: "2.0.0" },
    { engine: "terraform", version: "2.1.0-beta1" },
    { engine: "terraform", version: "3.0.0", filesMissing: true },
    { engine: "tofu", version: "1.8.0" },
    { engine: "tofu", version: "1.9.1" },
  ]);
  root = mkdtempSync(join(tmpdir(), "drover-engine-cache-"));
  pathDir = join(root, "path-bin");
  mkdirSync(pathDir);
  writeFileSync(join(pathDir, "terraform"), `#!/bin/sh\necho '{"terraform_version":"9.9.9"}'\n`, { mode: 0o755 });
});
after(async () => {
  await releases.close();
  rmSync(root, { recursive: true, force: true });
});

let n = 0;
function newCache(options: Partial<EngineCacheOptions> = {}): EngineCache {
  return new EngineCache({
    dir: join(root, `cache-${n++}`),
    limitBytes: 1 << 30,
    dispatcher,
    logger,
    releases: { terraform: releases.base("terraform"), tofu: releases.base("tofu"), tofuIndex: releases.tofuIndex },
    signingKeys: [hashicorpReleaseKey, readFileSync(releases.keyFile, "utf8")],
    trustedFingerprints: [releases.fingerprint],
    pathFallback: false,
    pathEnv: "",
    platform: "linux_amd64",
    ...options,
  });
}

function reported(path: string): string {
  return (JSON.parse(execFileSync(path, ["version", "-json"], { encoding: "utf8" })) as { terraform_version: string })
    .terraform_version;
}

/** Resolves once `ok()` holds, looking again on every turn of the event loop. */
async function waitFor(ok: () => boolean): Promise<void> {
  while (!ok()) await new Promise((r) => setImmediate(r));
}

async function failure(p: Promise<unknown>): Promise<EngineError> {
  try {
    await p;
  } catch (err) {
    assert.ok(err instanceof EngineError, `an EngineError, got ${String(err)}`);
    return err;
  }
  assert.fail("acquire succeeded");
}

test("newestSatisfying: newest match, pre-releases only when asked for", () => {
  const offered = ["1.0.0", "1.2.0", "1.10.1", "2.0.0", "2.1.0-beta1"];
  assert.equal(newestSatisfying(offered, "~> 1.0"), "1.10.1");
  assert.equal(newestSatisfying(offered, ">= 1.0, < 1.5"), "1.2.0");
  assert.equal(newestSatisfying(offered, ">= 2.0"), "2.0.0");
  assert.equal(newestSatisfying(offered, ">= 2.1.0-beta1"), "2.1.0-beta1");
  assert.equal(newestSatisfying(offered, "> 5"), undefined);
});

test("an exact version is downloaded, verified, stored by its archive's sha256 and is the binary returned", async () => {
  const cache = newCache();
  for (const version of ["1.0.0", "2.0.0"]) {
    const lease = await cache.acquire("terraform", version, signal);
    assert.equal(lease.version, version);
    assert.equal(reported(lease.path), version, "the binary run is the one asked for");
    assert.ok(lease.path.includes(releases.archiveSha("terraform", version)), `content-addressed: ${lease.path}`);
    assert.match(
      lease.notes.join("\n"),
      new RegExp(
        `downloaded from .*terraform_${version.replace(/\./g, "\\.")}_linux_amd64\\.zip, verified: sha256 [0-9a-f]{64}, SHA256SUMS signed by ${releases.fingerprint}`,
      ),
    );
    // Read-only to runs (which never run as the agent's root; see the run-user tests for the refusal itself).
    assert.equal(statSync(lease.path).mode & 0o777, 0o555);
    assert.equal(statSync(dirname(lease.path)).mode & 0o777, 0o555);
    lease.release();
  }
  // Warm: no request at all.
  const before = releases.requests.length;
  const again = await cache.acquire("terraform", "1.0.0", signal);
  assert.equal(reported(again.path), "1.0.0");
  assert.match(again.notes.join("\n"), /from the agent's verified cache/);
  assert.equal(releases.requests.length, before, "a cached exact version needs no request");
  assert.deepEqual(cache.counters, { hits: 1, misses: 2, evictions: 0, bytes: cache.counters.bytes });
});

test("a constraint selects the newest matching release (terraform index.json, tofu api.json)", async () => {
  const cache = newCache();
  assert.equal((await cache.acquire("terraform", "~> 1.0", signal)).version, "1.2.0");
  assert.equal((await cache.acquire("terraform", ">= 1.0, < 1.1", signal)).version, "1.0.0");
  assert.equal(
    (await cache.acquire("terraform", ">= 1.5, < 3.0", signal)).version,
    "2.0.0",
    "not the pre-release 2.1.0-beta1",
  );
  const tofu = await cache.acquire("tofu", "~> 1.8", signal);
  assert.equal(tofu.version, "1.9.1");
  assert.equal(reported(tofu.path), "1.9.1");
  assert.ok(tofu.path.endsWith("/tofu"));
});

test("concurrent runs asking for one version download it once", async () => {
  const cache = newCache();
  releases.downloads.clear();
  const leases = await Promise.all(Array.from({ length: 8 }, () => cache.acquire("tofu", "1.8.0", signal)));
  assert.equal(releases.downloads.get("tofu_1.8.0_linux_amd64.zip"), 1);
  assert.equal(new Set(leases.map((l) => l.path)).size, 1);
  assert.equal(cache.counters.misses, 1);
  for (const l of leases) l.release();
});

test("a job that stops waiting (canceled) does not end the download other jobs wait for", async () => {
  const cache = newCache();
  releases.downloads.clear();
  const open = releases.stall("tofu", "1.9.1");
  const canceled = new AbortController();
  const first = cache.acquire("tofu", "1.9.1", canceled.signal);
  const second = cache.acquire("tofu", "1.9.1", signal);
  await waitFor(() => releases.downloads.get("tofu_1.9.1_linux_amd64.zip") === 1);
  canceled.abort(new Error("canceled by request"));
  await assert.rejects(first, /canceled by request/);
  open();
  const lease = await second;
  assert.equal(reported(lease.path), "1.9.1");
  assert.equal(releases.downloads.get("tofu_1.9.1_linux_amd64.zip"), 1);
  lease.release();
});

for (const [lie, reason, message] of [
  [
    "archive",
    "engine_checksum_mismatch",
    /has sha256 [0-9a-f]{64}, but the signed terraform_1\.2\.0_SHA256SUMS lists [0-9a-f]{64}/,
  ],
  ["signature", "engine_signature_invalid", /SHA256SUMS of terraform 1\.2\.0 is not signed/],
  ["unknown-key", "engine_key_unknown", /signed by key [0-9A-F]{16}, which is not a pinned key/],
] as const) {
  test(`a release that lies (${lie}) fails with ${reason}, runs nothing, stores nothing, and never falls back to PATH`, async () => {
    releases.lie("terraform", "1.2.0", lie);
    try {
      const cache = newCache({ pathFallback: true, pathEnv: pathDir });
      const err = await failure(cache.acquire("terraform", "1.2.0", signal));
      assert.equal(err.reason, reason);
      assert.equal(err.code, "verification_failed");
      assert.match(err.message, new RegExp(`^${reason}: `));
      assert.match(err.message, message);
      assert.deepEqual(cache.stored(), []);
      assert.ok(!releases.executed("terraform", "1.2.0"), "the unverified binary never ran");
      // A constraint a PATH engine (9.9.9) satisfies still fails: verification never falls back.
      const constrained = await failure(cache.acquire("terraform", ">= 1.2, < 1.3", signal));
      assert.equal(constrained.reason, reason);
    } finally {
      releases.lie("terraform", "1.2.0", undefined);
    }
  });
}

test("a key that is provided but not pinned is unknown", async () => {
  const cache = newCache({ trustedFingerprints: ["C874011F0AB405110D02105534365D9472D7468F"] });
  const err = await failure(cache.acquire("tofu", "1.9.1", signal));
  assert.equal(err.reason, "engine_key_unknown");
  assert.deepEqual(cache.stored(), []);
});

test("a missing version fails with engine_version_missing; with the fallback a PATH engine that satisfies it runs", async () => {
  for (const wanted of ["9.9.9", "3.0.0"]) {
    const refused = await failure(newCache({ pathEnv: pathDir }).acquire("terraform", wanted, signal));
    assert.equal(refused.reason, "engine_version_missing");
    assert.equal(refused.code, "not_found");
    assert.match(refused.message, /DROVER_AGENT_ENGINE_PATH_FALLBACK=false/);
  }
  const allowed = await newCache({ pathFallback: true, pathEnv: pathDir }).acquire("terraform", "9.9.9", signal);
  assert.equal(allowed.path, join(pathDir, "terraform"));
  assert.equal(allowed.version, "9.9.9");
  assert.match(
    allowed.notes.join("\n"),
    /not downloaded \(terraform 9\.9\.9 is not among the releases.*\); using .*path-bin\/terraform from PATH/,
  );
  // The fallback still never runs another version.
  const none = await failure(newCache({ pathFallback: true, pathEnv: pathDir }).acquire("terraform", "3.0.0", signal));
  assert.equal(none.reason, "engine_unavailable");
  assert.match(
    none.message,
    /no terraform on PATH satisfies 3\.0\.0 either \(on PATH: 9\.9\.9; searched \/\S*path-bin\)/,
  );
});

test("unreachable releases: the fallback decides; a stored version satisfying a constraint still runs", async () => {
  const dead = {
    terraform: "http://127.0.0.1:1/terraform",
    tofu: "http://127.0.0.1:1/tofu",
    tofuIndex: "http://127.0.0.1:1/tofu/api.json",
  };
  const refused = await failure(newCache({ releases: dead, pathEnv: pathDir }).acquire("terraform", "~> 9.0", signal));
  assert.equal(refused.reason, "engine_releases_unreachable");
  const allowed = await newCache({ releases: dead, pathFallback: true, pathEnv: pathDir }).acquire(
    "terraform",
    "~> 9.0",
    signal,
  );
  assert.equal(allowed.version, "9.9.9");

  const dir = join(root, "warm-then-offline");
  await newCache({ dir }).acquire("terraform", "1.2.0", signal);
  const offline = await newCache({ dir, releases: dead }).acquire("terraform", "~> 1.0", signal);
  assert.equal(offline.version, "1.2.0");
  assert.equal(reported(offline.path), "1.2.0");
});

test("no version, no engine on PATH, unreachable releases: the error names the directories and the releases, no constraint", async () => {
  const dead = {
    terraform: "http://127.0.0.1:1/terraform",
    tofu: "http://127.0.0.1:1/tofu",
    tofuIndex: "http://127.0.0.1:1/tofu/api.json",
  };
  const empty = join(root, "empty-bin");
  mkdirSync(empty, { recursive: true });
  const none = await failure(
    newCache({ releases: dead, pathFallback: true, pathEnv: `${empty}:relative` }).acquire("terraform", null, signal),
  );
  assert.equal(none.reason, "engine_unavailable");
  assert.match(none.message, /http:\/\/127\.0\.0\.1:1\/terraform\/index\.json/);
  assert.match(none.message, new RegExp(`no terraform on PATH either \\(on PATH: none; searched ${empty}\\)`));
  assert.match(none.message, /set the workspace's engineVersion/);
  assert.doesNotMatch(none.message, /0\.0\.0/);
});

test("a stored binary changed on disk is fetched again, never run", async () => {
  const dir = join(root, "tampered");
  const first = await newCache({ dir }).acquire("tofu", "1.9.1", signal);
  first.release();
  chmodSync(first.path, 0o755);
  writeFileSync(first.path, "#!/bin/sh\necho tampered\n");
  releases.downloads.clear();
  const again = await newCache({ dir }).acquire("tofu", "1.9.1", signal);
  assert.equal(releases.downloads.get("tofu_1.9.1_linux_amd64.zip"), 1, "downloaded again");
  assert.equal(reported(again.path), "1.9.1");
});

test("above the size limit, releases no job holds are evicted oldest first; a held one never is", async () => {
  let clock = 1_000;
  const cache = newCache({ limitBytes: 1, now: () => clock++ });
  const held = await cache.acquire("terraform", "1.0.0", signal);
  const other = await cache.acquire("terraform", "2.0.0", signal);
  assert.equal(cache.stored().length, 2, "both held: nothing evicted");
  other.release();
  const third = await cache.acquire("tofu", "1.8.0", signal);
  assert.deepEqual(
    cache.stored().sort(),
    [releases.archiveSha("terraform", "1.0.0"), releases.archiveSha("tofu", "1.8.0")].sort(),
    "the idle one went",
  );
  assert.equal(cache.counters.evictions, 1);
  assert.equal(reported(held.path), "1.0.0");
  held.release();
  third.release();
});

test("engine settings: defaults are the vendors' releases and keys; values compile; bad ones stop the agent with one line", () => {
  const token = newPoolToken({ url: "http://127.0.0.1:9", pool: "pool_x" });
  const d = loadAgentConfig({ DROVER_TOKEN: token }).engines;
  assert.deepEqual(d, {
    terraformReleasesUrl: "https://releases.hashicorp.com/terraform",
    tofuReleasesUrl: "https://github.com/opentofu/opentofu/releases/download",
    tofuVersionsUrl: "https://get.opentofu.org/tofu/api.json",
    signingKeys: undefined,
    trustedFingerprints: ["C874011F0AB405110D02105534365D9472D7468F", "E3E6E43D84CB852EADB0051D0C0AF313E5FD9F80"],
    pathFallback: true,
  });
  const armored = readFileSync(releases.keyFile, "utf8");
  const set = loadAgentConfig({
    DROVER_TOKEN: token,
    DROVER_AGENT_TERRAFORM_RELEASES_URL: "https://mirror.example/terraform/",
    DROVER_AGENT_ENGINE_SIGNING_KEYS: Buffer.from(armored).toString("base64"),
    DROVER_AGENT_ENGINE_TRUSTED_FINGERPRINTS:
      "c874 011f 0ab4 0511 0d02  1055 3436 5d94 72d7 468f, " + releases.fingerprint,
    DROVER_AGENT_ENGINE_PATH_FALLBACK: "false",
  }).engines;
  assert.equal(set.terraformReleasesUrl, "https://mirror.example/terraform");
  assert.equal(set.signingKeys, armored, "base64 of the armored text");
  assert.equal(
    loadAgentConfig({ DROVER_TOKEN: token, DROVER_AGENT_ENGINE_SIGNING_KEYS: releases.keyFile }).engines.signingKeys,
    armored,
    "a file",
  );
  assert.deepEqual(set.trustedFingerprints, ["C874011F0AB405110D02105534365D9472D7468F", releases.fingerprint]);
  assert.equal(set.pathFallback, false);
  for (const [env, message] of [
    [
      { DROVER_AGENT_ENGINE_TRUSTED_FINGERPRINTS: "72D7468F" },
      /DROVER_AGENT_ENGINE_TRUSTED_FINGERPRINTS must list full 40-digit key fingerprints/,
    ],
    [
      { DROVER_AGENT_ENGINE_SIGNING_KEYS: "/nonexistent/keys.asc" },
      /DROVER_AGENT_ENGINE_SIGNING_KEYS: cannot read \/nonexistent\/keys\.asc \(no such file\)/,
    ],
    [{ DROVER_AGENT_ENGINE_SIGNING_KEYS: join(pathDir, "terraform") }, /holds no armored OpenPGP public key/],
    [
      { DROVER_AGENT_TOFU_RELEASES_URL: "ftp://mirror/tofu" },
      /DROVER_AGENT_TOFU_RELEASES_URL must be http:\/\/ or https:\/\//,
    ],
    [{ DROVER_AGENT_ENGINE_PATH_FALLBACK: "maybe" }, /DROVER_AGENT_ENGINE_PATH_FALLBACK must be true or false/],
  ] as const) {
    assert.throws(
      () => loadAgentConfig({ DROVER_TOKEN: token, ...env }),
      (err: unknown) => err instanceof InvalidSettingError && message.test(err.message),
    );
  }
});

test("the built-in HashiCorp key is the one its pinned fingerprint names", async () => {
  const openpgp = await import("openpgp");
  const keys = await openpgp.readKeys({ armoredKeys: hashicorpReleaseKey });
  assert.deepEqual(
    keys.map((k) => k.getFingerprint().toUpperCase()),
    ["C874011F0AB405110D02105534365D9472D7468F"],
  );
});

test("a workspace without a version whose fallback has no engine and takes no download is refused before anything is fetched", async () => {
  const cache = newCache();
  const asked = releases.requests.length;
  const fallback = {
    where: "in the runner image",
    engines: () => Promise.resolve([]),
    noEngine: (engine: string) => new Error(`no ${engine} in the image`),
  };
  await assert.rejects(cache.acquire("terraform", null, signal, fallback), /^Error: no terraform in the image$/);
  assert.deepEqual(releases.requests.slice(asked), [], "nothing was asked of the releases");
  // Without `noEngine` the newest release stands in, as for the local driver.
  const lease = await cache.acquire("tofu", null, signal, { where: "on PATH", engines: () => Promise.resolve([]) });
  assert.equal(lease.version, "1.9.1");
  lease.release();
});
