import {
  chmodSync,
  existsSync,
  mkdtempSync,
  readdirSync,
  readFileSync,
  renameSync,
  rmdirSync,
  rmSync,
  statSync,
  utimesSync,
  writeFileSync,
} from "node:fs";
import { randomBytes } from "node:crypto";
import { dirname, join, relative } from "node:path";
import type { Logger } from "pino";
import { packageHashV1, treeBytes, treeFingerprint } from "../providers/hashes.js";
import { makeReadOnly, mkdirReadable, readOnly, removeTree } from "./tree.js";
import { digest, HoldFiles, holderName, withFillLock, type Hold, type SharingOptions } from "./store-sharing.js";

export type { Hold } from "./store-sharing.js";

/*
 * One verified, read-only cache store, shared by the provider, module (and engine) caches.
 *
 * An entry is a directory tree named by a key (`a/b/c`, also its path below `<dir>/<entries>`)
 * and identified by its content: terraform's `h1:` hash of the tree, taken when the entry was
 * filled and recorded beside it (`<dir>/meta/<key>.json`). Before each use the tree is checked
 * against that hash (cheaply, through a fingerprint of inodes and change times, when nothing
 * changed since the last check); a changed entry is never used: it is filled again.
 *
 * Filling is atomic: the caller fills a directory in `<dir>/tmp` (same filesystem), the store
 * takes every write bit off, hashes it, and renames it into place, so a reader sees a whole entry
 * or none. One fill per entry at a time — per process through a promise, across processes
 * sharing the directory (Kubernetes task pods on one volume) through a lock file per entry whose
 * owner keeps touching it; a lock untouched for `staleMs` belonged to a process that is gone.
 *
 * Entries a run uses are held: in memory for this process, and as a hold file per entry and
 * process (touched while held) for the others. Above the soft size limit, entries nobody holds
 * are evicted least recently used first (use time = the metadata file's mtime, shared by all
 * processes). docs/decisions/0019 and 0024 have the reasons; store-sharing.ts has the lock and
 * hold files.
 */

/** Counters the agent's /metrics exposes for one cache. */
export interface CacheCounters {
  hits: number;
  misses: number;
  evictions: number;
  /** Bytes the cache holds now. */
  bytes: number;
}

/** One entry in the store, with what its user recorded about it. */
export interface StoreEntry<M> {
  readonly key: string;
  /** Where the read-only tree is. */
  readonly path: string;
  /** terraform's hash of the tree, taken when it was filled. */
  readonly h1: string;
  readonly size: number;
  /** What the cache using the store recorded when filling it (versions, archive hashes). */
  readonly meta: M;
}

interface Entry<M> extends StoreEntry<M> {
  metaPath: string;
  lastUsed: number;
  /** The tree's fingerprint when its h1 was last checked; unset: check before use. */
  verified: string | undefined;
}

interface MetaFile<M> {
  key: string;
  h1: string;
  size: number;
  meta: M;
}

/**
 * How an entry is made: fill the empty directory `dir` and return the metadata to keep.
 * `scratch` is a directory beside it (same filesystem) for downloads; both are removed after.
 */
export type Fill<M> = (dir: string, scratch: string, signal: AbortSignal) => Promise<M>;

const defaultFillTimeoutMs = 30 * 60_000;

export interface CacheStoreOptions {
  /** The cache's own directory. */
  dir: string;
  /** Name of the directory below `dir` holding the entries (a provider mirror's layout is fixed by terraform). */
  entries: string;
  /** Soft limit: above it, entries no job holds are evicted, least recently used first. */
  limitBytes: number;
  logger: Logger;
  /** What the store holds, for log lines ("provider", "module"). */
  kind: string;
  now?: () => number;
  /** A fill lock or hold file untouched this long belongs to a process that is gone. */
  staleMs?: number;
  /** How often a process waiting for another one's fill looks again. */
  pollMs?: number;
  /** Deadline of one check-or-fill, which every job waiting for the entry shares (default 30 minutes). */
  fillTimeoutMs?: number;
}

/** `p`, or the reason of `signal` as soon as it aborts (`p` goes on for its other waiters). */
export function untilAborted<T>(p: Promise<T>, signal: AbortSignal): Promise<T> {
  if (signal.aborted) return Promise.reject(signal.reason as Error);
  return new Promise<T>((resolve, reject) => {
    const onAbort = (): void => reject(signal.reason as Error);
    signal.addEventListener("abort", onAbort, { once: true });
    p.then(resolve, reject).finally(() => signal.removeEventListener("abort", onAbort));
  });
}

const defaultStaleMs = 10 * 60_000;

/** Whether `key` is a relative path of plain components. */
function checkKey(key: string): void {
  if (key.split("/").some((p) => !p || p === "." || p === ".." || p.includes("\0")))
    throw new Error(`bad cache key ${key}`);
}

export class CacheStore<M> {
  readonly counters: CacheCounters = { hits: 0, misses: 0, evictions: 0, bytes: 0 };
  /** Where entries are: `<dir>/<entries>/<key>`. */
  readonly root: string;
  private readonly metaDir: string;
  private readonly tmpDir: string;
  private readonly locksDir: string;
  private readonly holdsDir: string;
  private readonly entries = new Map<string, Entry<M>>();
  /** Per entry: the one check or fill in flight in this process. */
  private readonly inflight = new Map<string, Promise<{ entry: Entry<M>; filled: boolean }>>();
  private readonly now: () => number;
  private readonly log: Logger;
  private readonly sharing: SharingOptions;
  private readonly holds: HoldFiles;

  constructor(private readonly options: CacheStoreOptions) {
    this.root = join(options.dir, options.entries);
    this.metaDir = join(options.dir, "meta");
    this.tmpDir = join(options.dir, "tmp");
    this.locksDir = join(options.dir, "locks");
    this.holdsDir = join(options.dir, "holds");
    this.now = options.now ?? Date.now;
    this.log = options.logger;
    let holder: string | undefined;
    this.sharing = {
      logger: options.logger,
      kind: options.kind,
      now: this.now,
      staleMs: options.staleMs ?? defaultStaleMs,
      pollMs: options.pollMs ?? 200,
      holder: () => (holder ??= holderName()),
    };
    this.holds = new HoldFiles(this.holdsDir, this.sharing);
    for (const d of [options.dir, this.root, this.metaDir, this.tmpDir, this.locksDir, this.holdsDir]) {
      mkdirReadable(d);
      // The agent's own directories (runs read entries through them, but only entries).
      if (d === options.dir || d === this.root) chmodSync(d, 0o755);
    }
    const day = 24 * 3600 * 1000;
    for (const name of readdirSync(this.tmpDir)) {
      const p = join(this.tmpDir, name);
      try {
        if (this.now() - statSync(p).mtimeMs > day) removeTree(p);
      } catch {
        // Another process removed it.
      }
    }
    this.scan();
  }

  /** Re-reads the entries on disk (other processes sharing the directory add and evict them). */
  private scan(): void {
    const seen = new Set<string>();
    const walk = (dir: string): void => {
      for (const name of readdirSync(dir)) {
        const p = join(dir, name);
        let st;
        try {
          st = statSync(p);
        } catch {
          continue;
        }
        if (st.isDirectory()) walk(p);
        else if (name.endsWith(".json")) {
          const key = relative(this.metaDir, p).slice(0, -".json".length);
          seen.add(key);
          const known = this.entries.get(key);
          if (known) known.lastUsed = Math.max(known.lastUsed, st.mtimeMs);
          else this.read(key);
        }
      }
    };
    walk(this.metaDir);
    for (const key of this.entries.keys()) if (!seen.has(key) && !this.inflight.has(key)) this.entries.delete(key);
    this.counters.bytes = [...this.entries.values()].reduce((n, e) => n + e.size, 0);
  }

  /** Loads one entry's metadata from disk; undefined when there is none (or no tree beside it). */
  private read(key: string): Entry<M> | undefined {
    const metaPath = join(this.metaDir, `${key}.json`);
    try {
      const m = JSON.parse(readFileSync(metaPath, "utf8")) as MetaFile<M>;
      const path = join(this.root, key);
      if (m.key !== key || typeof m.h1 !== "string" || !existsSync(path)) return undefined;
      const entry: Entry<M> = {
        key,
        path,
        metaPath,
        h1: m.h1,
        size: m.size,
        meta: m.meta,
        lastUsed: statSync(metaPath).mtimeMs,
        verified: undefined,
      };
      this.entries.set(key, entry);
      return entry;
    } catch {
      return undefined;
    }
  }

  /**
   * Holds `key` for a run before it waits for the entry, so no eviction (of this process or
   * another sharing the directory) removes it until `release()`.
   */
  hold(key: string): Hold {
    checkKey(key);
    return this.holds.hold(key);
  }

  /**
   * The entry `key`, verified; filled by `fill` when missing or changed. One check or fill per
   * entry at a time in this process, and one fill at a time among processes sharing the store.
   * `fetched` says whether this call filled it. The check or fill is shared by every job that
   * asks for the entry meanwhile, so it runs under the store's own deadline, not `signal`: a job
   * whose `signal` aborts only stops waiting, and the others still get the entry.
   */
  async acquire(key: string, fill: Fill<M>, signal: AbortSignal): Promise<StoreEntry<M> & { fetched: boolean }> {
    checkKey(key);
    let p = this.inflight.get(key);
    const mine = !p;
    if (!p) {
      p = this.ready(key, fill, AbortSignal.timeout(this.options.fillTimeoutMs ?? defaultFillTimeoutMs)).finally(() =>
        this.inflight.delete(key),
      );
      // A fill nobody waits for any more must not surface as an unhandled rejection.
      p.catch(() => undefined);
      this.inflight.set(key, p);
    }
    const { entry, filled } = await untilAborted(p, signal);
    const fetched = mine && filled;
    if (fetched) this.counters.misses++;
    else this.counters.hits++;
    entry.lastUsed = this.now();
    try {
      const t = new Date(entry.lastUsed);
      utimesSync(entry.metaPath, t, t);
    } catch {
      // Only the eviction order depends on it.
    }
    return { ...entry, fetched };
  }

  private async ready(key: string, fill: Fill<M>, signal: AbortSignal): Promise<{ entry: Entry<M>; filled: boolean }> {
    const existing = this.entries.get(key) ?? this.read(key);
    if (existing && (await this.usable(existing))) return { entry: existing, filled: false };
    return this.locked(key, signal, async () => {
      // Another process may have filled (or replaced) it while this one waited for the lock.
      const current = this.read(key);
      if (current && (await this.usable(current))) return { entry: current, filled: false };
      if (current ?? existing)
        this.log.warn(
          { entry: key },
          `${this.options.kind} cache entry changed since it was verified; fetching it again`,
        );
      this.discard(key);
      return { entry: await this.fill(key, fill, signal), filled: true };
    });
  }

  /** Whether the entry is the tree that was verified (and nothing in it is writable). */
  private async usable(e: Entry<M>): Promise<boolean> {
    let fp: string;
    try {
      fp = treeFingerprint(e.path);
    } catch {
      return false;
    }
    if (fp === e.verified) return true;
    if (!readOnly(e.path)) {
      // Volume managers add group write bits to every file of a claim a pod mounts (kubelet's
      // fsGroup): take them off again, and let the hash decide whether anything was written.
      try {
        makeReadOnly(e.path);
      } catch {
        return false;
      }
      fp = treeFingerprint(e.path);
    }
    if ((await packageHashV1(e.path)) !== e.h1) return false;
    e.verified = fp;
    return true;
  }

  /** Runs `fn` holding the entry's fill lock among every process sharing the directory. */
  private locked<T>(key: string, signal: AbortSignal, fn: () => Promise<T>): Promise<T> {
    return withFillLock(join(this.locksDir, digest(key)), key, { ...this.sharing, signal }, fn);
  }

  private async fill(key: string, fill: Fill<M>, signal: AbortSignal): Promise<Entry<M>> {
    const work = mkdtempSync(join(this.tmpDir, `${process.pid}-`));
    try {
      const tree = join(work, "entry");
      const scratch = join(work, "scratch");
      mkdirReadable(tree);
      mkdirReadable(scratch);
      const meta = await fill(tree, scratch, signal);
      // The directory itself stays writable until it is in place: moving a directory needs it.
      for (const n of readdirSync(tree)) makeReadOnly(join(tree, n));
      const h1 = await packageHashV1(tree);
      const size = treeBytes(tree);
      const path = join(this.root, key);
      const metaPath = join(this.metaDir, `${key}.json`);
      mkdirReadable(dirname(path));
      mkdirReadable(dirname(metaPath));
      try {
        renameSync(tree, path);
      } catch (err) {
        const code = (err as NodeJS.ErrnoException).code;
        if (code !== "ENOTEMPTY" && code !== "EEXIST") throw err;
        // Another process placed it after breaking a stale lock: keep that one if it is good.
        const other = this.read(key);
        if (other && (await this.usable(other))) return other;
        this.discard(key);
        renameSync(tree, path);
      }
      chmodSync(path, 0o555);
      writeFileSync(join(work, "meta.json"), JSON.stringify({ key, h1, size, meta } satisfies MetaFile<M>));
      renameSync(join(work, "meta.json"), metaPath);
      const entry: Entry<M> = {
        key,
        path,
        metaPath,
        h1,
        size,
        meta,
        lastUsed: this.now(),
        verified: treeFingerprint(path),
      };
      this.entries.set(key, entry);
      this.counters.bytes = [...this.entries.values()].reduce((n, e) => n + e.size, 0);
      this.log.info({ entry: key, bytes: size }, `${this.options.kind} cached`);
      return entry;
    } finally {
      removeTree(work);
    }
  }

  /** Removes the entry's tree and metadata, whoever holds it (a changed entry is of no use to anyone). */
  private discard(key: string): void {
    const e = this.entries.get(key);
    this.entries.delete(key);
    rmSync(join(this.metaDir, `${key}.json`), { force: true });
    const path = e?.path ?? join(this.root, key);
    const trash = this.moveAway(path);
    if (trash) removeTree(trash);
    this.pruneParents(path);
    this.counters.bytes = [...this.entries.values()].reduce((n, x) => n + x.size, 0);
  }

  /** Renames a tree into the temporary directory (atomic for readers); its path there, or undefined when it was not there. */
  private moveAway(path: string): string | undefined {
    const trash = join(this.tmpDir, `evicted-${randomBytes(6).toString("hex")}`);
    try {
      chmodSync(path, 0o700);
      renameSync(path, trash);
      return trash;
    } catch {
      return undefined;
    }
  }

  /** Removes the directories above an entry that it leaves empty (a version with no platform left). */
  private pruneParents(path: string): void {
    for (let d = dirname(path); d.startsWith(this.root + "/"); d = dirname(d)) {
      try {
        rmdirSync(d);
      } catch {
        return;
      }
    }
  }

  /** Above the soft limit: removes entries no run (of any process sharing the store) holds, least recently used first. */
  evict(): void {
    this.scan();
    if (this.counters.bytes <= this.options.limitBytes) return;
    const foreign = this.holds.foreign();
    const idle = [...this.entries.values()]
      .filter((e) => !this.holds.has(e.key) && !this.inflight.has(e.key) && !foreign.has(e.key))
      .sort((a, b) => a.lastUsed - b.lastUsed);
    for (const e of idle) {
      if (this.counters.bytes <= this.options.limitBytes) break;
      const trash = this.moveAway(e.path);
      if (!trash) continue;
      // A process may have started holding it between the look above and the move: give it back.
      if (this.holds.foreign().has(e.key)) {
        try {
          renameSync(trash, e.path);
          chmodSync(e.path, 0o555);
          continue;
        } catch {
          // Filled again meanwhile: this copy is no longer needed.
        }
      }
      this.entries.delete(e.key);
      rmSync(e.metaPath, { force: true });
      removeTree(trash);
      this.pruneParents(e.path);
      this.counters.bytes -= e.size;
      this.counters.evictions++;
      this.log.info({ entry: e.key, bytes: e.size }, `${this.options.kind} cache entry evicted`);
    }
  }

  /** Entries known now and their bytes. */
  get size(): { entries: number; bytes: number } {
    return { entries: this.entries.size, bytes: this.counters.bytes };
  }

  /** Bytes of the entries on disk, measured (tests). */
  measured(): number {
    return [...this.entries.values()].reduce((n, e) => n + (existsSync(e.path) ? treeBytes(e.path) : 0), 0);
  }

  /** Stops touching hold files (the process is ending; its holds go stale). */
  close(): void {
    this.holds.close();
  }
}
