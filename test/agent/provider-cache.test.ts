import { after, before, test } from "node:test";
import assert from "node:assert/strict";
import {
  appendFileSync,
  chmodSync,
  existsSync,
  mkdirSync,
  mkdtempSync,
  readFileSync,
  readdirSync,
  rmSync,
  writeFileSync,
} from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { Agent as UndiciAgent } from "undici";
import { createLogger, ProviderCache, VerificationError } from "@drover/agent";
import { providerConfig, startProviderRegistry, type TestRegistry } from "../support/provider-registry.js";
import { runTerraform, terraformEnv } from "../support/terraform.js";

let registry: TestRegistry;
let root: string;
const logger = createLogger("json", false);
logger.level = "silent";
const three = [
  { type: "alpha", version: "1.0.0" },
  { type: "beta", version: "2.1.0" },
  { type: "gamma", version: "0.3.0" },
];

before(async () => {
  registry = await startProviderRegistry([
    { type: "alpha", versions: ["1.0.0", "1.1.0"] },
    { type: "beta", versions: ["2.1.0"] },
    { type: "gamma", versions: ["0.3.0"] },
    { type: "big", versions: ["1.0.0", "2.0.0", "3.0.0"], padBytes: 300_000 },
  ]);
  root = mkdtempSync(join(tmpdir(), "drover-provider-cache-"));
});
after(async () => {
  await registry.close();
  rmSync(root, { recursive: true, force: true });
});

function newCache(name: string, limitBytes = 1 << 30): ProviderCache {
  const dispatcher = new UndiciAgent({ connect: { ca: readFileSync(registry.caFile, "utf8") } });
  return new ProviderCache({ dir: join(root, name), limitBytes, dispatcher, logger, platform: "linux_amd64" });
}

function configDir(name: string, text: string, lock?: string): string {
  const dir = join(root, "configs", name);
  mkdirSync(dir, { recursive: true });
  writeFileSync(join(dir, "main.tf"), text);
  if (lock !== undefined) writeFileSync(join(dir, ".terraform.lock.hcl"), lock);
  return dir;
}

/** terraform init in `dir` with the lease's CLI configuration; the registry's certificate trusted. */
async function init(dir: string, installation: string): Promise<{ code: number; output: string }> {
  const env = terraformEnv(dir, { SSL_CERT_FILE: registry.caFile });
  writeFileSync(env.TF_CLI_CONFIG_FILE as string, installation);
  return runTerraform(["init", "-input=false", "-no-color", "-backend=false"], dir, env);
}

function lockedH1(dir: string, type: string): string[] {
  const text = readFileSync(join(dir, ".terraform.lock.hcl"), "utf8");
  const block =
    new RegExp(`provider "${registry.source(type).replace(/[.]/g, "\\.")}" \\{([\\s\\S]*?)\\n\\}`).exec(text)?.[1] ??
    "";
  return [...block.matchAll(/"(h1:[^"]+)"/g)].map((m) => m[1] as string);
}

test("12 concurrent inits needing the same 3 providers: every lock file correct, each provider downloaded once, then none", async () => {
  const cache = newCache("concurrent");
  const rounds = Number(process.env.DROVER_PROVIDER_CACHE_ROUNDS ?? "2");
  const before = new Map(registry.downloads);
  for (let round = 0; round < rounds; round++) {
    const dirs = Array.from({ length: 12 }, (_, i) => configDir(`c-${round}-${i}`, providerConfig(registry, three)));
    const results = await Promise.all(
      dirs.map(async (dir) => {
        const lease = await cache.prepare(dir, AbortSignal.timeout(60_000));
        try {
          assert.equal(lease.prepared.length, 3, lease.notes.join("\n"));
          return { dir, ...(await init(dir, lease.installation)) };
        } finally {
          lease.release();
        }
      }),
    );
    for (const r of results) {
      assert.equal(r.code, 0, r.output);
      for (const p of three)
        assert.deepEqual(lockedH1(r.dir, p.type), [registry.h1(p.type, p.version)], `${r.dir}: lock file of ${p.type}`);
    }
  }
  for (const p of three) {
    const name = registry.archiveName(p.type, p.version);
    assert.equal((registry.downloads.get(name) ?? 0) - (before.get(name) ?? 0), 1, `${name} downloaded once`);
  }
  assert.equal(cache.counters.misses, 3);
  assert.equal(cache.counters.hits, 12 * rounds * 3 - 3);

  // Warm: pinned versions in the cache, so neither the agent nor terraform asks the registry anything.
  const dir = configDir("warm", providerConfig(registry, three));
  const seen = registry.requests.length;
  const lease = await cache.prepare(dir, AbortSignal.timeout(60_000));
  const r = await init(dir, lease.installation);
  lease.release();
  assert.equal(r.code, 0, r.output);
  assert.deepEqual(registry.requests.slice(seen), [], "a warm init makes no request");
});

test("the cache is read-only: entries have no write permission anywhere", async () => {
  const cache = newCache("modes");
  const lease = await cache.prepare(
    configDir("modes", providerConfig(registry, three.slice(0, 1))),
    AbortSignal.timeout(60_000),
  );
  lease.release();
  const entry = join(root, "modes", "mirror", registry.host, "drover", "alpha", "1.0.0", "linux_amd64");
  const walk = (p: string): string[] => [
    p,
    ...readdirSync(p, { withFileTypes: true }).flatMap((d) =>
      d.isDirectory() ? walk(join(p, d.name)) : [join(p, d.name)],
    ),
  ];
  const { statSync } = await import("node:fs");
  for (const p of walk(entry)) assert.equal(statSync(p).mode & 0o222, 0, `${p} is writable`);
});

test("a changed byte in a cache entry is detected before use and the entry is fetched again", async () => {
  const cache = newCache("tamper-byte");
  const dir = configDir("tamper-byte", providerConfig(registry, three.slice(1, 2)));
  (await cache.prepare(dir, AbortSignal.timeout(60_000))).release();
  const name = registry.archiveName("beta", "2.1.0");
  const downloads = registry.downloads.get(name) ?? 0;
  const file = join(
    root,
    "tamper-byte",
    "mirror",
    registry.host,
    "drover",
    "beta",
    "2.1.0",
    "linux_amd64",
    "terraform-provider-beta_v2.1.0",
  );
  chmodSync(file, 0o755);
  appendFileSync(file, "# planted\n");
  chmodSync(file, 0o555);
  const lease = await cache.prepare(dir, AbortSignal.timeout(60_000));
  lease.release();
  assert.equal(registry.downloads.get(name), downloads + 1, "fetched again");
  assert.ok(!readFileSync(file, "utf8").includes("planted"), "the changed entry was replaced");
  const r = await init(dir, lease.installation);
  assert.equal(r.code, 0, r.output);
  assert.deepEqual(lockedH1(dir, "beta"), [registry.h1("beta", "2.1.0")]);
});

test("a lock file hash that matches nothing fails with the reason; a zh-only lock file gains the verified h1", async () => {
  const cache = newCache("lock");
  const addr = registry.source("alpha");
  const lock = (hash: string) =>
    `provider "${addr}" {\n  version     = "1.0.0"\n  constraints = "1.0.0"\n  hashes = [\n    "${hash}",\n  ]\n}\n`;
  const bad = configDir(
    "lock-bad",
    providerConfig(registry, three.slice(0, 1)),
    lock("h1:AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA="),
  );
  await assert.rejects(
    cache.prepare(bad, AbortSignal.timeout(60_000)),
    (err: unknown) =>
      err instanceof VerificationError &&
      err.reason === "provider_lock_mismatch" &&
      /lock file's hashes match neither/.test(err.message),
  );
  const zhOnly = configDir("lock-zh", providerConfig(registry, three.slice(0, 1)), lock(registry.zh("alpha", "1.0.0")));
  const lease = await cache.prepare(zhOnly, AbortSignal.timeout(60_000));
  lease.release();
  assert.ok(lease.lockFile?.includes(registry.h1("alpha", "1.0.0")), lease.lockFile);
  writeFileSync(join(zhOnly, ".terraform.lock.hcl"), lease.lockFile ?? "");
  const r = await init(zhOnly, lease.installation);
  assert.equal(r.code, 0, r.output);
});

test("a bad signature, a wrong shasum from the registry, or a changed archive: the fetch fails with the reason and nothing is cached", async () => {
  const cases: Array<[keyof TestRegistry["tamper"], string]> = [
    ["signature", "provider_signature_invalid"],
    ["shasum", "provider_checksum_mismatch"],
    ["archive", "provider_checksum_mismatch"],
  ];
  for (const [lie, reason] of cases) {
    const cache = newCache(`lie-${lie}`);
    registry.tamper[lie] = true;
    try {
      await assert.rejects(
        cache.prepare(
          configDir(`lie-${lie}`, providerConfig(registry, three.slice(2, 3))),
          AbortSignal.timeout(60_000),
        ),
        (err: unknown) => {
          assert.ok(err instanceof VerificationError, String(err));
          assert.equal(err.reason, reason, err.message);
          return true;
        },
      );
    } finally {
      registry.tamper[lie] = false;
    }
    assert.ok(
      !existsSync(join(root, `lie-${lie}`, "mirror", registry.host, "drover", "gamma", "0.3.0", "linux_amd64")),
      `${lie}: nothing cached`,
    );
    assert.deepEqual(readdirSync(join(root, `lie-${lie}`, "tmp")), [], `${lie}: no temporary files left`);
  }
});

test("eviction above the soft limit keeps the newest entries and never one a run holds", async () => {
  // Each "big" package is ~300 kB; the limit holds two.
  const cache = newCache("evict", 700_000);
  const big = (v: string) => configDir(`evict-${v}`, providerConfig(registry, [{ type: "big", version: v }]));
  const held = await cache.prepare(big("1.0.0"), AbortSignal.timeout(60_000)); // held by a "running job"
  (await cache.prepare(big("2.0.0"), AbortSignal.timeout(60_000))).release();
  (await cache.prepare(big("3.0.0"), AbortSignal.timeout(60_000))).release();
  const mirror = join(root, "evict", "mirror", registry.host, "drover", "big");
  assert.deepEqual(readdirSync(mirror).sort(), ["1.0.0", "3.0.0"], "the held one and the newest stay; 2.0.0 went");
  assert.equal(cache.counters.evictions, 1);
  held.release();
  (await cache.prepare(big("2.0.0"), AbortSignal.timeout(60_000))).release();
  assert.deepEqual(readdirSync(mirror).sort(), ["2.0.0", "3.0.0"], "released, 1.0.0 was the least recently used");
  assert.ok(cache.counters.bytes <= 700_000, String(cache.counters.bytes));
});

test("without a lock file a version constraint resolves to the newest matching version the registry offers", async () => {
  const cache = newCache("resolve");
  const dir = configDir(
    "resolve",
    `terraform {\n  required_providers {\n    alpha = {\n      source  = "${registry.source("alpha")}" # comment with { brace\n      version = "~> 1.0"\n    }\n  }\n}\n`,
  );
  const lease = await cache.prepare(dir, AbortSignal.timeout(60_000));
  lease.release();
  assert.deepEqual(lease.prepared, [`${registry.source("alpha")} 1.1.0`]);
});

test("a provider the agent cannot fetch (registry unreachable) is left to terraform with a note, not failed", async () => {
  const cache = newCache("unreachable");
  const dir = configDir(
    "unreachable",
    `terraform {\n  required_providers {\n    nowhere = { source = "127.0.0.1:1/drover/nowhere", version = "1.0.0" }\n  }\n}\n`,
  );
  const lease = await cache.prepare(dir, AbortSignal.timeout(60_000));
  lease.release();
  assert.deepEqual(lease.prepared, []);
  assert.equal(lease.installation, "");
  assert.match(
    lease.notes.join("\n"),
    /127\.0\.0\.1:1\/drover\/nowhere 1\.0\.0 not cached .*terraform installs it itself/,
  );
});
