import { after, before, test } from "node:test";
import assert from "node:assert/strict";
import {
  appendFileSync,
  chmodSync,
  mkdirSync,
  mkdtempSync,
  readdirSync,
  readFileSync,
  rmSync,
  statSync,
  symlinkSync,
  writeFileSync,
} from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { Agent as UndiciAgent } from "undici";
import { createLogger, ModuleCache } from "@drover/agent";
import { startProviderRegistry, type TestRegistry } from "../support/provider-registry.js";
import { runTerraform, terraformEnv } from "../support/terraform.js";

let registry: TestRegistry;
let root: string;
const logger = createLogger("json", false);
logger.level = "silent";

before(async () => {
  registry = await startProviderRegistry(
    [],
    [{ name: "thing", versions: ["1.0.0", "1.2.0"], files: { "main.tf": 'output "v" { value = "thing-VERSION" }\n' } }],
  );
  root = mkdtempSync(join(tmpdir(), "drover-module-cache-"));
});
after(async () => {
  await registry.close();
  rmSync(root, { recursive: true, force: true });
});

function newCache(name: string): ModuleCache {
  const dispatcher = new UndiciAgent({ connect: { ca: readFileSync(registry.caFile, "utf8") } });
  return new ModuleCache({ dir: join(root, name), limitBytes: 1 << 30, dispatcher, logger });
}

let n = 0;
function configDir(version: string): string {
  const dir = join(root, "configs", `c${n++}`);
  mkdirSync(dir, { recursive: true });
  writeFileSync(
    join(dir, "main.tf"),
    `module "m" {\n  source  = "${registry.host}/drover/thing/null"\n  version = "${version}"\n}\noutput "v" { value = module.m.v }\n`,
  );
  return dir;
}

async function plan(dir: string): Promise<{ code: number; output: string }> {
  const env = terraformEnv(dir, { SSL_CERT_FILE: registry.caFile });
  const init = await runTerraform(["init", "-input=false", "-no-color"], dir, env);
  if (init.code !== 0) return init;
  const p = await runTerraform(["plan", "-input=false", "-no-color"], dir, env);
  return { code: p.code, output: init.output + p.output };
}

test("registry modules: concurrent runs get one download, terraform finds them installed and asks nothing", async () => {
  const cache = newCache("concurrent");
  const archive = "/files/module-thing-1.0.0.tar.gz";
  const results = await Promise.all(
    Array.from({ length: 6 }, async () => {
      const dir = configDir("1.0.0");
      const lease = await cache.prepare(dir, AbortSignal.timeout(60_000));
      try {
        assert.deepEqual(lease.installed, [`m (${registry.host}/drover/thing/null 1.0.0)`], lease.notes.join("\n"));
        return await plan(dir);
      } finally {
        lease.release();
      }
    }),
  );
  for (const r of results) {
    assert.equal(r.code, 0, r.output);
    assert.match(r.output, /v\s+=\s+"thing-1\.0\.0"/);
  }
  assert.equal(registry.requests.filter((p) => p === archive).length, 1, "downloaded once");
  assert.equal(cache.counters.misses, 1);
  assert.equal(cache.counters.hits, 5);
  const seen = registry.requests.length;
  const dir = configDir("1.0.0");
  const lease = await cache.prepare(dir, AbortSignal.timeout(60_000));
  const r = await plan(dir);
  lease.release();
  assert.equal(r.code, 0, r.output);
  assert.deepEqual(registry.requests.slice(seen), [], "a warm run asks no registry");
});

test("module cache entries are read-only, a changed one is fetched again, and a constraint takes the newest matching version", async () => {
  const cache = newCache("tamper");
  (await cache.prepare(configDir("1.0.0"), AbortSignal.timeout(60_000))).release();
  const file = join(root, "tamper", "entries", registry.host, "drover", "thing", "null", "1.0.0", "main.tf");
  assert.equal(statSync(file).mode & 0o222, 0);
  chmodSync(file, 0o644);
  appendFileSync(file, 'output "planted" { value = 1 }\n');
  const dir = configDir("1.0.0");
  (await cache.prepare(dir, AbortSignal.timeout(60_000))).release();
  assert.ok(!readFileSync(file, "utf8").includes("planted"), "the changed entry was replaced");
  assert.equal(cache.counters.misses, 2);
  const lease = await cache.prepare(configDir("~> 1.0"), AbortSignal.timeout(60_000));
  lease.release();
  assert.deepEqual(lease.installed, [`m (${registry.host}/drover/thing/null 1.2.0)`]);
});

test("module eviction above the soft limit never removes an entry a run holds", async () => {
  const dispatcher = new UndiciAgent({ connect: { ca: readFileSync(registry.caFile, "utf8") } });
  // A limit of one byte: every entry no run holds is over it.
  const cache = new ModuleCache({ dir: join(root, "evict"), limitBytes: 1, dispatcher, logger });
  const held = await cache.prepare(configDir("1.0.0"), AbortSignal.timeout(60_000));
  (await cache.prepare(configDir("1.2.0"), AbortSignal.timeout(60_000))).release();
  const other = await cache.prepare(configDir("1.0.0"), AbortSignal.timeout(60_000));
  assert.deepEqual(readdirSync(join(root, "evict", "entries", registry.host, "drover", "thing", "null")), ["1.0.0"]);
  assert.equal(cache.counters.evictions, 1);
  held.release();
  other.release();
});

// Security review N3: a run directory whose .terraform (or a directory in it) is a link the
// configuration planted must not let the agent create modules/, links or modules.json elsewhere.
for (const [what, plant] of [
  [".terraform", (dir: string, victim: string) => symlinkSync(victim, join(dir, ".terraform"))],
  [
    ".terraform/modules",
    (dir: string, victim: string) => (
      mkdirSync(join(dir, ".terraform")),
      symlinkSync(victim, join(dir, ".terraform", "modules"))
    ),
  ],
] as const) {
  test(`a planted ${what} link outside the run directory: the module cache refuses the run and writes nothing through it`, async () => {
    const cache = newCache(`planted-${what.replace(/\W/g, "-")}`);
    const victim = mkdtempSync(join(root, "victim-"));
    const dir = configDir("1.0.0");
    plant(dir, victim);
    await assert.rejects(cache.prepare(dir, AbortSignal.timeout(60_000)), (err: Error & { code?: string }) => {
      assert.equal(err.code, "invalid_archive", err.message);
      assert.match(err.message, /refused .*\.terraform.*: it is not a directory/);
      return true;
    });
    assert.deepEqual(readdirSync(victim), [], "nothing was written outside the run directory");
  });
}
