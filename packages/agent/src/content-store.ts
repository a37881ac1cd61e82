import { chmodSync, existsSync, mkdtempSync, readdirSync, readFileSync, renameSync, rmSync, statSync, utimesSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import type { Logger } from "pino";
import { makeReadOnly, mkdirReadable, removeTree, type CacheCounters } from "./providers/cache.js";
import { treeBytes, treeFingerprint } from "./providers/hashes.js";

/*
 * A content-addressed store of read-only trees on the agent's disk: `objects/<digest>/` holds
 * what was verified under that digest, `meta/<digest>.json` its size (its mtime is the last
 * use, kept apart so that touching it never changes the tree's own fingerprint). A tree is
 * built in `tmp/` on the same filesystem, made read-only and renamed into place, so a reader
 * sees a whole object or none. One build per digest at a time. Above the soft size limit,
 * objects nobody holds are removed least recently used first; a held one never is.
 */

interface ObjectMeta {
  size: number;
  /** What the caller recorded about the object (e.g. the sha256 of its executable). */
  detail: Record<string, string>;
}

interface StoredObject extends ObjectMeta {
  digest: string;
  lastUsed: number;
  /** The tree's fingerprint when it was last found intact; unset: check before use. */
  checked: string | undefined;
}

/** Options of a `ContentStore`. */
export interface ContentStoreOptions {
  /** The store's directory (created 0755: runs may read, never write). */
  dir: string;
  /** Soft limit in bytes. */
  limitBytes: number;
  logger: Logger;
  /** Names the store in its log lines ("engine"). */
  name: string;
  /** Counters to keep (the caller's, when it exposes them before the store exists). */
  counters?: CacheCounters;
  now?: () => number;
}

const digestPattern = /^[0-9a-f]{64}$/;

/** Read-only trees by digest with holds, atomic placement and LRU eviction (see the file comment). */
export class ContentStore {
  readonly counters: CacheCounters;
  private readonly objects = new Map<string, StoredObject>();
  private readonly holders = new Map<string, number>();
  private readonly building = new Map<string, Promise<StoredObject>>();
  private readonly objectsDir: string;
  private readonly metaDir: string;
  readonly tmpDir: string;
  private readonly now: () => number;

  constructor(private readonly options: ContentStoreOptions) {
    this.objectsDir = join(options.dir, "objects");
    this.metaDir = join(options.dir, "meta");
    this.tmpDir = join(options.dir, "tmp");
    this.now = options.now ?? Date.now;
    this.counters = options.counters ?? { hits: 0, misses: 0, evictions: 0, bytes: 0 };
    for (const d of [options.dir, this.objectsDir, this.metaDir, this.tmpDir]) {
      mkdirReadable(d);
      chmodSync(d, 0o755);
    }
    // A previous process's half-built trees are never trusted.
    for (const name of readdirSync(this.tmpDir)) removeTree(join(this.tmpDir, name));
    for (const name of readdirSync(this.metaDir)) {
      const digest = name.replace(/\.json$/, "");
      const metaPath = join(this.metaDir, name);
      try {
        if (!digestPattern.test(digest) || !existsSync(join(this.objectsDir, digest))) throw new Error("orphan");
        const meta = JSON.parse(readFileSync(metaPath, "utf8")) as ObjectMeta;
        this.objects.set(digest, { ...meta, digest, lastUsed: statSync(metaPath).mtimeMs, checked: undefined });
      } catch {
        rmSync(metaPath, { force: true });
      }
    }
    for (const digest of readdirSync(this.objectsDir)) if (!this.objects.has(digest)) this.discard(digest);
    this.counters.bytes = [...this.objects.values()].reduce((n, o) => n + o.size, 0);
  }

  /** Where the object's tree is (whether or not it exists). */
  path(digest: string): string {
    if (!digestPattern.test(digest)) throw new Error(`not a sha256 digest: ${digest}`);
    return join(this.objectsDir, digest);
  }

  /** What was recorded with the object, when the store has it. */
  detail(digest: string): Record<string, string> | undefined {
    return this.objects.get(digest)?.detail;
  }

  /**
   * Holds the object against eviction until the returned function is called (idempotent).
   * Hold before waiting for a build, so eviction never races a waiting user.
   */
  hold(digest: string): () => void {
    this.holders.set(digest, (this.holders.get(digest) ?? 0) + 1);
    let done = false;
    return () => {
      if (done) return;
      done = true;
      const n = (this.holders.get(digest) ?? 1) - 1;
      if (n <= 0) this.holders.delete(digest);
      else this.holders.set(digest, n);
    };
  }

  /**
   * The object's tree when the store has it and `intact` accepts it (asked again only when the
   * tree's fingerprint changed since it was last accepted); a rejected object is removed.
   */
  async lookup(digest: string, intact: (path: string, detail: Record<string, string>) => Promise<string | undefined>): Promise<string | undefined> {
    const o = this.objects.get(digest);
    if (!o) return undefined;
    const path = this.path(digest);
    let fp: string;
    try {
      fp = treeFingerprint(path);
    } catch {
      this.forget(o);
      return undefined;
    }
    if (fp !== o.checked) {
      const problem = await intact(path, o.detail);
      if (problem) {
        this.options.logger.warn({ digest, problem }, `${this.options.name} cache entry changed since it was verified; fetching it again`);
        this.forget(o);
        this.discard(digest);
        return undefined;
      }
      o.checked = fp;
    }
    this.counters.hits++;
    this.touch(o);
    return path;
  }

  /**
   * The object, held for the caller until `release`; built once when missing: `fill` writes the
   * tree into the directory it is given (and returns what to record with it), which is then made
   * read-only and renamed into place. Concurrent callers for one digest share one build.
   */
  async put(digest: string, fill: (dir: string) => Promise<Record<string, string>>): Promise<{ path: string; release: () => void }> {
    // Held from the call on: no eviction can slip in between the build and the caller's use.
    const release = this.hold(digest);
    try {
      let p = this.building.get(digest);
      if (!p) {
        p = this.build(digest, fill).finally(() => this.building.delete(digest));
        this.building.set(digest, p);
      }
      const o = await p;
      this.touch(o);
      return { path: this.path(digest), release };
    } catch (err) {
      release();
      throw err;
    }
  }

  private async build(digest: string, fill: (dir: string) => Promise<Record<string, string>>): Promise<StoredObject> {
    const existing = this.objects.get(digest);
    if (existing) return existing;
    const work = mkdtempSync(join(this.tmpDir, `${process.pid}-`));
    try {
      const tree = join(work, "tree");
      const detail = await fill(tree);
      makeReadOnly(tree);
      const meta: ObjectMeta = { size: treeBytes(tree), detail };
      const target = this.path(digest);
      if (existsSync(target)) this.discard(digest);
      writeFileSync(join(work, "meta.json"), JSON.stringify(meta));
      renameSync(tree, target);
      renameSync(join(work, "meta.json"), join(this.metaDir, `${digest}.json`));
      const o: StoredObject = { ...meta, digest, lastUsed: this.now(), checked: treeFingerprint(target) };
      this.objects.set(digest, o);
      this.counters.misses++;
      this.counters.bytes += o.size;
      return o;
    } finally {
      removeTree(work);
    }
  }

  private touch(o: StoredObject): void {
    o.lastUsed = this.now();
    try {
      const t = new Date(o.lastUsed);
      utimesSync(join(this.metaDir, `${o.digest}.json`), t, t);
    } catch {
      // Only the eviction order after a restart depends on it.
    }
  }

  private forget(o: StoredObject): void {
    if (this.objects.delete(o.digest)) this.counters.bytes -= o.size;
    rmSync(join(this.metaDir, `${o.digest}.json`), { force: true });
  }

  /** Moves a tree out of `objects/` first, so no reader ever finds it half-removed. */
  private discard(digest: string): void {
    const trash = mkdtempSync(join(this.tmpDir, "evicted-"));
    try {
      chmodSync(join(this.objectsDir, digest), 0o700);
      renameSync(join(this.objectsDir, digest), join(trash, "tree"));
    } catch {
      // Already gone.
    }
    removeTree(trash);
  }

  /** Above the soft limit: removes objects nobody holds or builds, least recently used first. */
  evict(): void {
    if (this.counters.bytes <= this.options.limitBytes) return;
    const idle = [...this.objects.values()].filter((o) => !this.holders.has(o.digest) && !this.building.has(o.digest)).sort((a, b) => a.lastUsed - b.lastUsed);
    for (const o of idle) {
      if (this.counters.bytes <= this.options.limitBytes) break;
      this.options.logger.info({ digest: o.digest, bytes: o.size }, `${this.options.name} cache entry evicted`);
      this.forget(o);
      this.discard(o.digest);
      this.counters.evictions++;
    }
  }

  /** Digests the store holds now. */
  digests(): string[] {
    return [...this.objects.keys()];
  }
}
