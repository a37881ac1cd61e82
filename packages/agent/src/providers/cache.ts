import { chmodSync, existsSync, lstatSync, mkdirSync, mkdtempSync, readdirSync, readFileSync, renameSync, rmdirSync, rmSync, statSync, utimesSync, writeFileSync } from "node:fs";
import { randomBytes } from "node:crypto";
import { dirname, join } from "node:path";
import type { Logger } from "pino";
import type { Dispatcher } from "undici";
import { versionSatisfies } from "@drover/protocol";
import { addLockHash, lockFileName, readLockFile, scanRequirements, type LockedProvider } from "./config-scan.js";
import { VerificationError } from "./errors.js";
import { packageHashV1, treeBytes, treeFingerprint } from "./hashes.js";
import { addressString, RegistryClient, RegistryUnavailable, type ProviderAddress } from "./registry.js";
import { unzipProvider } from "./zip.js";

/*
 * The agent's provider cache: an unpacked filesystem mirror (`<dir>/mirror/HOST/NS/TYPE/V/OS_ARCH`)
 * that runs read through their own CLI configuration and never write. Each entry is fetched
 * once per agent (one fetch per entry in flight), verified (registry shasum, SHA256SUMS and its
 * signature, then the lock file's hashes), unpacked in a temporary directory on the same
 * filesystem, made read-only, and renamed into place, so a reader sees a whole entry or none.
 * Before each use an entry is checked against the hash recorded when it was fetched; a changed
 * entry is fetched again. Entries no job is using are evicted oldest-use-first above a soft
 * size limit. docs/decisions/0019-provider-and-module-caches.md has the reasons.
 */

/** Counters the agent's /metrics exposes for one cache. */
export interface CacheCounters {
  hits: number;
  misses: number;
  evictions: number;
  /** Bytes the cache holds now. */
  bytes: number;
}

/** Recorded beside each entry when it was fetched and verified. */
interface EntryMeta {
  address: string;
  version: string;
  platform: string;
  /** terraform's hash of the unpacked entry. */
  h1: string;
  /** `zh:` + sha256 of the archive the registry signed. */
  zh: string;
  size: number;
}

interface Entry extends EntryMeta {
  key: string;
  path: string;
  metaPath: string;
  lastUsed: number;
  /** The tree's fingerprint when its h1 was last checked; unset: check before use. */
  verified: string | undefined;
}

/** What a run gets from the cache: its CLI configuration block and what to tell the user. */
export interface ProviderLease {
  /** A `provider_installation` block for the run's CLI configuration ("" when nothing was prepared). */
  readonly installation: string;
  /** `address version` of each provider the run takes from the cache. */
  readonly prepared: string[];
  /** Lines for the run's log (providers left to terraform, and why). */
  readonly notes: string[];
  /** The lock file's new text when the agent added verified `h1:` hashes to it. */
  readonly lockFile: string | undefined;
  /** The run is over: its entries may be evicted again. Idempotent. */
  release(): void;
}

export interface ProviderCacheOptions {
  /** The cache's own directory (`<DROVER_AGENT_CACHE_DIR>/providers`). */
  dir: string;
  /** Soft limit: above it, entries no job uses are evicted, least recently used first. */
  limitBytes: number;
  /** The agent's HTTP client (proxy and CA settings). */
  dispatcher: Dispatcher;
  logger: Logger;
  /** `os_arch` as terraform names it; default: this machine's. */
  platform?: string;
  /** Largest archive (and unpacked size) accepted. */
  maxPackageBytes?: number;
  now?: () => number;
}

/** This machine's platform in terraform's naming. */
export function terraformPlatform(): string {
  const arch = ({ x64: "amd64", arm64: "arm64", ia32: "386", arm: "arm" } as Record<string, string>)[process.arch] ?? process.arch;
  return `${process.platform}_${arch}`;
}

/** Removes a tree the cache made read-only. */
export function removeTree(path: string): void {
  const open = (p: string): void => {
    let st;
    try {
      st = lstatSync(p);
    } catch {
      return;
    }
    if (!st.isDirectory()) return;
    chmodSync(p, 0o700);
    for (const name of readdirSync(p)) open(join(p, name));
  };
  open(path);
  rmSync(path, { recursive: true, force: true });
}

/** Whether nothing in the tree has a write permission bit. */
export function readOnly(path: string): boolean {
  const st = lstatSync(path);
  if ((st.mode & 0o222) !== 0) return false;
  return !st.isDirectory() || readdirSync(path).every((n) => readOnly(join(path, n)));
}

/** Takes every write permission bit off a tree (executables 0555, files 0444, directories 0555). */
export function makeReadOnly(path: string): void {
  const st = lstatSync(path);
  if (st.isDirectory()) {
    for (const n of readdirSync(path)) makeReadOnly(join(path, n));
    chmodSync(path, 0o555);
  } else chmodSync(path, st.mode & 0o111 ? 0o555 : 0o444);
}

/** mkdir -p whose new directories runs can read whatever the agent's umask (0077 for the local driver). */
export function mkdirReadable(path: string): void {
  if (existsSync(path)) return;
  mkdirReadable(dirname(path));
  mkdirSync(path);
  chmodSync(path, 0o755);
}

function hclString(s: string): string {
  return JSON.stringify(s).replace(/\$\{/g, "$${").replace(/%\{/g, "%%{");
}

export class ProviderCache {
  readonly counters: CacheCounters = { hits: 0, misses: 0, evictions: 0, bytes: 0 };
  readonly mirror: string;
  private readonly metaDir: string;
  private readonly tmpDir: string;
  private readonly entries = new Map<string, Entry>();
  /** Per entry: the one verification or fetch in flight. */
  private readonly inflight = new Map<string, Promise<{ entry: Entry; fetched: boolean }>>();
  /** Per entry: how many runs hold it (counted before they wait, so eviction never races them). */
  private readonly users = new Map<string, number>();
  private readonly registry: RegistryClient;
  private readonly platform: string;
  private readonly maxPackageBytes: number;
  private readonly now: () => number;
  private readonly log: Logger;

  constructor(private readonly options: ProviderCacheOptions) {
    this.mirror = join(options.dir, "mirror");
    this.metaDir = join(options.dir, "meta");
    this.tmpDir = join(options.dir, "tmp");
    this.registry = new RegistryClient(options.dispatcher);
    this.platform = options.platform ?? terraformPlatform();
    this.maxPackageBytes = options.maxPackageBytes ?? 2 * 1024 ** 3;
    this.now = options.now ?? Date.now;
    this.log = options.logger;
    for (const d of [options.dir, this.mirror, this.metaDir, this.tmpDir]) {
      mkdirReadable(d);
      chmodSync(d, 0o755);
    }
    this.load();
  }

  /** Reads the entries a previous agent left; drops half-made ones and old temporary files. */
  private load(): void {
    const day = 24 * 3600 * 1000;
    for (const name of readdirSync(this.tmpDir)) {
      const p = join(this.tmpDir, name);
      if (this.now() - statSync(p).mtimeMs > day) removeTree(p);
    }
    const walk = (dir: string): void => {
      for (const name of readdirSync(dir)) {
        const p = join(dir, name);
        if (statSync(p).isDirectory()) walk(p);
        else if (name.endsWith(".json")) {
          try {
            const meta = JSON.parse(readFileSync(p, "utf8")) as EntryMeta;
            const key = `${meta.address}/${meta.version}/${meta.platform}`;
            const path = join(this.mirror, meta.address, meta.version, meta.platform);
            if (!existsSync(path)) {
              rmSync(p, { force: true });
              continue;
            }
            this.entries.set(key, { ...meta, key, path, metaPath: p, lastUsed: statSync(p).mtimeMs, verified: undefined });
          } catch {
            rmSync(p, { force: true });
          }
        }
      }
    };
    walk(this.metaDir);
    this.counters.bytes = [...this.entries.values()].reduce((n, e) => n + e.size, 0);
  }

  /**
   * Prepares every provider the configuration in `workDir` names (its lock file's, then its
   * root module's `required_providers`) and returns the run's lease. Providers the cache cannot
   * prepare (registry unreachable, a source it cannot parse) are left to terraform; a failed
   * verification fails the run.
   */
  async prepare(workDir: string, signal: AbortSignal): Promise<ProviderLease> {
    const locked = readLockFile(workDir);
    const wanted = new Map<string, { address: ProviderAddress; version: string | undefined; constraints: string[] }>();
    for (const [key, l] of locked) wanted.set(key, { address: l.address, version: l.version, constraints: [] });
    for (const [key, r] of scanRequirements(workDir)) if (!wanted.has(key)) wanted.set(key, { address: r.address, version: undefined, constraints: r.constraints });

    const notes: string[] = [];
    const held: string[] = [];
    const prepared: Array<{ address: string; entry: Entry }> = [];
    let released = false;
    const release = (): void => {
      if (released) return;
      released = true;
      for (const key of held) this.users.set(key, (this.users.get(key) ?? 1) - 1);
    };
    try {
      await Promise.all(
        [...wanted].map(async ([address, w]) => {
          let version = w.version;
          try {
            version ??= await this.resolve(w.address, w.constraints, signal);
            if (!version) {
              notes.push(`${address}: no version for ${this.platform} satisfies ${w.constraints.join(", ") || "any"}; left to ${"terraform"}`);
              return;
            }
            const key = `${address}/${version}/${this.platform}`;
            this.users.set(key, (this.users.get(key) ?? 0) + 1);
            held.push(key);
            const entry = await this.acquire(key, w.address, version, signal);
            prepared.push({ address, entry });
          } catch (err) {
            if (err instanceof RegistryUnavailable) notes.push(`${address}${version ? ` ${version}` : ""} not cached (${err.message}); terraform installs it itself`);
            else throw err;
          }
        }),
      );
      let lockText: string | undefined;
      for (const { address, entry } of prepared) {
        const l = locked.get(address);
        if (!l) continue;
        const fixed = checkLock(l, entry);
        if (fixed) lockText = addLockHash(lockText ?? readFileSync(join(workDir, lockFileName), "utf8"), address, fixed);
      }
      this.evict();
      prepared.sort((a, b) => a.address.localeCompare(b.address));
      return {
        installation: this.installation(prepared.map((p) => p.address)),
        prepared: prepared.map((p) => `${p.address} ${p.entry.version}`),
        notes,
        lockFile: lockText,
        release,
      };
    } catch (err) {
      release();
      throw err;
    }
  }

  /** The newest version the registry offers that satisfies every constraint (no pre-releases unless pinned). */
  private async resolve(address: ProviderAddress, constraints: string[], signal: AbortSignal): Promise<string | undefined> {
    // A pinned version needs no question to the registry (a warm run then makes no request at all).
    const pinned = constraints.map((c) => /^=?\s*v?(\d+\.\d+\.\d+(?:-[0-9A-Za-z.]+)?)$/.exec(c.trim())?.[1]).find((v) => v !== undefined);
    if (pinned && constraints.every((c) => versionSatisfies(pinned, c))) return pinned;
    const offered = await this.registry.versions(address, this.platform, signal);
    const ok = offered.filter((v) => constraints.every((c) => versionSatisfies(v, c)) && (!v.includes("-") || constraints.some((c) => c.includes(v))));
    const num = (v: string): number[] => v.replace(/-.*/, "").split(".").map(Number);
    ok.sort((a, b) => {
      const [x, y] = [num(a), num(b)];
      for (let i = 0; i < 3; i++) if ((x[i] ?? 0) !== (y[i] ?? 0)) return (x[i] ?? 0) - (y[i] ?? 0);
      return a.includes("-") ? -1 : b.includes("-") ? 1 : 0;
    });
    return ok.at(-1);
  }

  private installation(addresses: string[]): string {
    if (addresses.length === 0) return "";
    const list = addresses.map(hclString).join(", ");
    return `provider_installation {\n  filesystem_mirror {\n    path    = ${hclString(this.mirror)}\n    include = [${list}]\n  }\n  direct {\n    exclude = [${list}]\n  }\n}\n`;
  }

  /** The entry, verified (fetched when missing or changed); one verification or fetch per entry at a time. */
  private async acquire(key: string, address: ProviderAddress, version: string, signal: AbortSignal): Promise<Entry> {
    let p = this.inflight.get(key);
    const mine = !p;
    if (!p) {
      p = this.ready(key, address, version, signal).finally(() => this.inflight.delete(key));
      this.inflight.set(key, p);
    }
    const { entry, fetched } = await p;
    if (mine && fetched) this.counters.misses++;
    else this.counters.hits++;
    entry.lastUsed = this.now();
    try {
      const t = new Date(entry.lastUsed);
      utimesSync(entry.metaPath, t, t);
    } catch {
      // Only the eviction order after a restart depends on it.
    }
    return entry;
  }

  private async ready(key: string, address: ProviderAddress, version: string, signal: AbortSignal): Promise<{ entry: Entry; fetched: boolean }> {
    const existing = this.entries.get(key);
    if (existing) {
      const problem = await this.check(existing);
      if (!problem) return { entry: existing, fetched: false };
      this.log.warn({ entry: key, problem }, "provider cache entry changed since it was verified; fetching it again");
      this.remove(existing);
    }
    return { entry: await this.fetch(key, address, version, signal), fetched: true };
  }

  /** Why the entry cannot be used as is (undefined: it is what was verified). */
  private async check(e: Entry): Promise<string | undefined> {
    let fp: string;
    try {
      fp = treeFingerprint(e.path);
    } catch {
      return "it is missing";
    }
    if (fp === e.verified) return undefined;
    if (!readOnly(e.path)) return "it is writable";
    const h1 = await packageHashV1(e.path);
    if (h1 !== e.h1) return `its hash is ${h1}, not ${e.h1}`;
    e.verified = fp;
    return undefined;
  }

  private async fetch(key: string, address: ProviderAddress, version: string, signal: AbortSignal): Promise<Entry> {
    const addr = addressString(address);
    const work = mkdtempSync(join(this.tmpDir, `${process.pid}-`));
    try {
      const info = await this.registry.download(address, version, this.platform, signal);
      await this.registry.checksums(info, signal);
      const zip = join(work, "package.zip");
      const sha = await this.registry.fetchArchive(info, zip, this.maxPackageBytes, signal);
      if (sha !== info.shasum) {
        throw new VerificationError("provider_checksum_mismatch", `${addr} ${version}: the downloaded ${info.filename} has sha256 ${sha}, but the registry vouches for ${info.shasum}; nothing was installed`);
      }
      const unpacked = join(work, "entry");
      mkdirSync(unpacked);
      const size = unzipProvider(zip, unpacked, this.maxPackageBytes);
      for (const n of readdirSync(unpacked)) makeReadOnly(join(unpacked, n));
      const meta: EntryMeta = { address: addr, version, platform: this.platform, h1: await packageHashV1(unpacked), zh: `zh:${sha}`, size };
      const path = join(this.mirror, addr, version, this.platform);
      const metaPath = join(this.metaDir, addr, version, `${this.platform}.json`);
      mkdirReadable(dirname(path));
      mkdirReadable(dirname(metaPath));
      // Another agent sharing the directory may have placed the same entry: the newest wins whole.
      if (existsSync(path)) {
        const old = join(work, "replaced");
        chmodSync(path, 0o700);
        renameSync(path, old);
      }
      const metaTmp = join(work, "meta.json");
      writeFileSync(metaTmp, JSON.stringify(meta));
      renameSync(metaTmp, metaPath);
      renameSync(unpacked, path);
      chmodSync(path, 0o555);
      const entry: Entry = { ...meta, key, path, metaPath, lastUsed: this.now(), verified: treeFingerprint(path) };
      this.entries.set(key, entry);
      this.counters.bytes += size;
      this.log.info({ provider: addr, version, bytes: size }, "provider cached");
      return entry;
    } finally {
      removeTree(work);
    }
  }

  private remove(e: Entry): void {
    this.entries.delete(e.key);
    this.counters.bytes -= e.size;
    rmSync(e.metaPath, { force: true });
    const trash = join(this.tmpDir, `evicted-${randomBytes(6).toString("hex")}`);
    try {
      chmodSync(e.path, 0o700);
      renameSync(e.path, trash);
    } catch {
      return;
    }
    removeTree(trash);
    try {
      // The version directory, when this was its last platform.
      rmdirSync(dirname(e.path));
    } catch {
      // Not empty, or gone.
    }
  }

  /** Above the soft limit: removes entries no run holds, least recently used first. */
  evict(): void {
    if (this.counters.bytes <= this.options.limitBytes) return;
    const idle = [...this.entries.values()].filter((e) => (this.users.get(e.key) ?? 0) === 0 && !this.inflight.has(e.key)).sort((a, b) => a.lastUsed - b.lastUsed);
    for (const e of idle) {
      if (this.counters.bytes <= this.options.limitBytes) break;
      this.log.info({ entry: e.key, bytes: e.size }, "provider cache entry evicted");
      this.remove(e);
      this.counters.evictions++;
    }
  }

  /** Entries held now (for tests and the health details). */
  get size(): { entries: number; bytes: number } {
    return { entries: this.entries.size, bytes: this.counters.bytes };
  }

  /** Recomputes the bytes counter from disk (tests). */
  measured(): number {
    return [...this.entries.values()].reduce((n, e) => n + (existsSync(e.path) ? treeBytes(e.path) : 0), 0);
  }
}

/**
 * Checks an entry against the run's lock file. Returns an `h1:` hash the lock file must gain
 * (it vouched for the archive by `zh:` only), or undefined when it already vouches for the entry.
 */
function checkLock(l: LockedProvider, e: Entry): string | undefined {
  if (l.hashes.length === 0 || l.hashes.includes(e.h1)) return undefined;
  if (l.hashes.includes(e.zh)) return e.h1;
  throw new VerificationError(
    "provider_lock_mismatch",
    `${e.address} ${e.version}: the lock file's hashes match neither the package the registry signed (${e.zh}) nor its contents (${e.h1}); the lock file or the provider's release changed: check it, and update the lock file with \`terraform providers lock\` if the new release is trusted`,
  );
}
