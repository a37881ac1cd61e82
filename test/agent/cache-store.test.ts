import { after, test } from "node:test";
import assert from "node:assert/strict";
import { existsSync, mkdtempSync, readdirSync, rmSync, statSync, utimesSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { CacheStore, createLogger } from "@drover/agent";

// Two CacheStore instances on one directory share nothing in memory: they stand for two
// processes (task pods on one volume) sharing a cache.

const root = mkdtempSync(join(tmpdir(), "drover-cache-store-"));
after(() => rmSync(root, { recursive: true, force: true }));
const logger = createLogger("json", false);
logger.level = "silent";

function store(
  dir: string,
  options: { limitBytes?: number; staleMs?: number; now?: () => number } = {},
): CacheStore<{ n: number }> {
  return new CacheStore<{ n: number }>({
    dir: join(root, dir),
    entries: "entries",
    limitBytes: options.limitBytes ?? 1 << 30,
    logger,
    kind: "test",
    pollMs: 5,
    ...options,
  });
}

/** A fill that writes `bytes` bytes and counts its calls; it waits for `gate` before finishing. */
function filler(bytes = 10, gate: Promise<void> = Promise.resolve()) {
  const f = {
    calls: 0,
    fill: async (dir: string) => {
      f.calls++;
      await gate;
      writeFileSync(join(dir, "file"), "x".repeat(bytes));
      return { n: f.calls };
    },
  };
  return f;
}

test("two processes acquiring one entry at once fill it once; the other waits for the lock and uses it", async () => {
  const a = store("shared");
  const b = store("shared");
  let open!: () => void;
  const f = filler(10, new Promise<void>((r) => (open = r)));
  const first = a.acquire("x/1", f.fill, AbortSignal.timeout(10_000));
  const second = b.acquire("x/1", f.fill, AbortSignal.timeout(10_000));
  // b finds no entry and waits on a's lock; a fills once the gate opens.
  open();
  const [ea, eb] = await Promise.all([first, second]);
  assert.equal(f.calls, 1);
  assert.equal(ea.fetched, true);
  assert.equal(eb.fetched, false);
  assert.equal(ea.h1, eb.h1);
  assert.equal(statSync(ea.path).mode & 0o222, 0, "read-only");
  assert.deepEqual(readdirSync(join(root, "shared", "locks")), [], "lock released");
  a.close();
  b.close();
});

test("a lock left by a process that is gone is broken after staleMs; a fresh one is waited for", async () => {
  let now = Date.now();
  const a = store("stale-lock", { staleMs: 60_000, now: () => now });
  const f = filler();
  const { createHash } = await import("node:crypto");
  const lock = join(root, "stale-lock", "locks", createHash("sha256").update("y/1").digest("hex").slice(0, 40));
  writeFileSync(lock, "gone\n");
  const waiting = a.acquire("y/1", f.fill, AbortSignal.timeout(10_000));
  let done = false;
  void waiting.then(() => (done = true));
  // Fresh: still waiting after many polls.
  for (let i = 0; i < 20; i++) await new Promise((r) => setTimeout(r, 5));
  assert.equal(done, false);
  now += 61_000;
  const e = await waiting;
  assert.equal(e.fetched, true);
  assert.equal(f.calls, 1);
  a.close();
});

test("eviction keeps what another process holds, drops its stale holds, and removes least recently used first", async () => {
  let now = 1_000_000_000_000;
  const a = store("evict", { limitBytes: 25, staleMs: 60_000, now: () => now });
  const b = store("evict", { limitBytes: 25, staleMs: 60_000, now: () => now });
  const f = filler(10);
  for (const k of ["e/1", "e/2", "e/3"]) {
    now += 1000;
    await b.acquire(k, f.fill, AbortSignal.timeout(5000));
  }
  // b holds the oldest: a must not evict it, but the next oldest.
  const hold = b.hold("e/1");
  a.evict();
  assert.ok(existsSync(join(root, "evict", "entries", "e", "1")), "held by the other process: kept");
  assert.ok(!existsSync(join(root, "evict", "entries", "e", "2")), "oldest idle entry evicted");
  assert.ok(existsSync(join(root, "evict", "entries", "e", "3")), "newest kept");
  assert.equal(a.counters.evictions, 1);
  // The holder is gone (its hold file went stale): the entry may go now.
  for (const h of readdirSync(join(root, "evict", "holds")))
    utimesSync(join(root, "evict", "holds", h), new Date(now - 120_000), new Date(now - 120_000));
  now += 1000;
  await a.acquire("e/4", f.fill, AbortSignal.timeout(5000));
  a.evict();
  assert.ok(!existsSync(join(root, "evict", "entries", "e", "1")), "stale hold no longer protects");
  hold.release();
  a.close();
  b.close();
});

test("an entry changed on disk is filled again by whichever process uses it next", async () => {
  const a = store("changed");
  const b = store("changed");
  const f = filler(10);
  const e = await a.acquire("c/1", f.fill, AbortSignal.timeout(5000));
  const { chmodSync, appendFileSync } = await import("node:fs");
  chmodSync(join(e.path, "file"), 0o644);
  appendFileSync(join(e.path, "file"), "planted");
  const again = await b.acquire("c/1", f.fill, AbortSignal.timeout(5000));
  assert.equal(again.fetched, true);
  assert.equal(f.calls, 2);
  assert.equal(again.h1, e.h1);
  a.close();
  b.close();
});

test("in one process, the job that started a fill being canceled stops only its own wait: the others get the entry", async () => {
  const s = store("cancel-first");
  let open!: () => void;
  const f = filler(10, new Promise<void>((r) => (open = r)));
  const canceled = new AbortController();
  const first = s.acquire("x/1", f.fill, canceled.signal);
  const second = s.acquire("x/1", f.fill, AbortSignal.timeout(10_000));
  canceled.abort(new Error("the first job was canceled"));
  await assert.rejects(first, /the first job was canceled/);
  open();
  const entry = await second;
  assert.equal(f.calls, 1, "one fill, which went on for the job still waiting");
  assert.ok(existsSync(join(entry.path, "file")));
});

// Security review N15 / decision 0043: a writer with the agent's own UID that replaces an entry
// and its meta file together is not caught (a tree changed alone is: the module and provider
// cache tests). The meta file is re-read whenever the tree no longer matches, since another
// process sharing the directory may have filled it again; separate run users, read-only mounts
// and containers are the boundary. This test pins the documented behaviour.
test("an entry replaced together with its meta file is served, by a running and by a restarted process", async () => {
  const { chmodSync, readFileSync } = await import("node:fs");
  const evil = await store("n15-evil").acquire(
    "m/1",
    async (dir) => (writeFileSync(join(dir, "file"), "evil"), { n: 0 }),
    AbortSignal.timeout(10_000),
  );
  const running = store("n15");
  const entry = await running.acquire("m/1", filler().fill, AbortSignal.timeout(10_000));
  chmodSync(entry.path, 0o755);
  chmodSync(join(entry.path, "file"), 0o644);
  writeFileSync(join(entry.path, "file"), "evil");
  chmodSync(join(entry.path, "file"), 0o444);
  chmodSync(entry.path, 0o555);
  const metaPath = join(root, "n15", "meta", "m", "1.json");
  writeFileSync(metaPath, JSON.stringify({ ...JSON.parse(readFileSync(metaPath, "utf8")), h1: evil.h1 }));
  for (const s of [store("n15"), running]) {
    const got = await s.acquire("m/1", filler().fill, AbortSignal.timeout(10_000));
    assert.equal(got.fetched, false);
    assert.equal(readFileSync(join(got.path, "file"), "utf8"), "evil");
    s.close();
  }
});
