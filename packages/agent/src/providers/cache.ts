import { readFileSync } from "node:fs";
import { join } from "node:path";
import type { Logger } from "pino";
import type { Dispatcher } from "undici";
import { versionSatisfies } from "@drover/protocol";
import { CacheStore, type CacheCounters, type Hold, type StoreEntry } from "../cache/store.js";
import { addLockHash, lockFileName, readLockFile, scanRequirements, type LockedProvider } from "./config-scan.js";
import { VerificationError } from "./errors.js";
import { addressString, RegistryClient, RegistryUnavailable, type ProviderAddress } from "./registry.js";
import { unzipProvider } from "./zip.js";

export type { CacheCounters } from "../cache/store.js";
export { makeReadOnly, mkdirReadable, readOnly, removeTree } from "../cache/tree.js";

/*
 * The agent's provider cache: an unpacked filesystem mirror (`<dir>/mirror/HOST/NS/TYPE/V/OS_ARCH`)
 * that runs read through their own CLI configuration and never write. Each entry is fetched
 * once per agent (one fetch per entry in flight), verified (registry shasum, SHA256SUMS and its
 * signature, then the lock file's hashes), unpacked in a temporary directory on the same
 * filesystem, made read-only, and renamed into place, so a reader sees a whole entry or none.
 * Entries are kept, checked before use and evicted by the shared CacheStore (cache/store.ts).
 * docs/decisions/0019-provider-and-module-caches.md has the reasons.
 */

/** What the provider cache records beside each entry. */
interface ProviderMeta {
  address: string;
  version: string;
  platform: string;
  /** `zh:` + sha256 of the archive the registry signed. */
  zh: string;
}

type Entry = StoreEntry<ProviderMeta>;

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
  /**
   * Registries and downloads may be at link-local or metadata addresses
   * (DROVER_AGENT_CACHE_ALLOW_METADATA_ADDRESSES).
   */
  allowMetadataAddresses?: boolean;
  /** Largest archive (and unpacked size) accepted. */
  maxPackageBytes?: number;
  now?: () => number;
}

/** This machine's platform in terraform's naming. */
export function terraformPlatform(): string {
  const arch =
    ({ x64: "amd64", arm64: "arm64", ia32: "386", arm: "arm" } as Record<string, string>)[process.arch] ?? process.arch;
  return `${process.platform}_${arch}`;
}

function hclString(s: string): string {
  return JSON.stringify(s).replace(/\$\{/g, "$${").replace(/%\{/g, "%%{");
}

export class ProviderCache {
  /** Where the mirror's entries are (`HOST/NS/TYPE/V/OS_ARCH`), the `filesystem_mirror` path. */
  readonly mirror: string;
  private readonly store: CacheStore<ProviderMeta>;
  private readonly registry: RegistryClient;
  private readonly platform: string;
  private readonly maxPackageBytes: number;

  constructor(options: ProviderCacheOptions) {
    this.store = new CacheStore<ProviderMeta>({
      dir: options.dir,
      entries: "mirror",
      limitBytes: options.limitBytes,
      logger: options.logger,
      kind: "provider",
      ...(options.now ? { now: options.now } : {}),
    });
    this.mirror = this.store.root;
    const allowMetadataAddresses = options.allowMetadataAddresses === true;
    this.registry = new RegistryClient(options.dispatcher, { allowMetadataAddresses });
    this.platform = options.platform ?? terraformPlatform();
    this.maxPackageBytes = options.maxPackageBytes ?? 2 * 1024 ** 3;
  }

  /** Hits, misses, evictions and bytes, for /metrics. */
  get counters(): CacheCounters {
    return this.store.counters;
  }

  /**
   * Prepares every provider the configuration in `workDir` names (its lock file's, then its
   * root module's `required_providers`) and returns the run's lease. Providers the cache cannot
   * prepare (registry unreachable, a source it cannot parse) are left to terraform; a failed
   * verification fails the run. `moduleDirs` are the directories of the modules the configuration
   * calls: their `required_providers` count too (their constraints join the root module's).
   */
  async prepare(workDir: string, signal: AbortSignal, moduleDirs: readonly string[] = []): Promise<ProviderLease> {
    const locked = readLockFile(workDir);
    const wanted = new Map<string, { address: ProviderAddress; version: string | undefined; constraints: string[] }>();
    for (const [key, l] of locked) wanted.set(key, { address: l.address, version: l.version, constraints: [] });
    for (const dir of [workDir, ...moduleDirs]) {
      for (const [key, r] of scanRequirements(dir)) {
        const w = wanted.get(key);
        if (!w) wanted.set(key, { address: r.address, version: undefined, constraints: [...r.constraints] });
        else if (w.version === undefined) w.constraints.push(...r.constraints);
      }
    }

    const notes: string[] = [];
    const held: Hold[] = [];
    const prepared: Array<{ address: string; entry: Entry }> = [];
    const release = (): void => {
      for (const h of held.splice(0)) h.release();
    };
    try {
      await Promise.all(
        [...wanted].map(async ([address, w]) => {
          let version = w.version;
          try {
            version ??= await this.resolve(w.address, w.constraints, signal);
            if (!version) {
              notes.push(
                `${address}: no version for ${this.platform} satisfies ${w.constraints.join(", ") || "any"}; left to terraform`,
              );
              return;
            }
            const key = `${address}/${version}/${this.platform}`;
            held.push(this.store.hold(key));
            const entry = await this.store.acquire(
              key,
              (dir, scratch, s) => this.fetch(w.address, version as string, dir, scratch, s),
              signal,
            );
            prepared.push({ address, entry });
          } catch (err) {
            if (err instanceof RegistryUnavailable)
              notes.push(
                `${address}${version ? ` ${version}` : ""} not cached (${err.message}); terraform installs it itself`,
              );
            else throw err;
          }
        }),
      );
      let lockText: string | undefined;
      for (const { address, entry } of prepared) {
        const l = locked.get(address);
        if (!l) continue;
        const fixed = checkLock(l, entry);
        if (fixed)
          lockText = addLockHash(lockText ?? readFileSync(join(workDir, lockFileName), "utf8"), address, fixed);
      }
      this.store.evict();
      prepared.sort((a, b) => a.address.localeCompare(b.address));
      return {
        installation: this.installation(prepared.map((p) => p.address)),
        prepared: prepared.map((p) => `${p.address} ${p.entry.meta.version}`),
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
  private async resolve(
    address: ProviderAddress,
    constraints: string[],
    signal: AbortSignal,
  ): Promise<string | undefined> {
    // A pinned version needs no question to the registry (a warm run then makes no request at all).
    const pinned = constraints
      .map((c) => /^=?\s*v?(\d+\.\d+\.\d+(?:-[0-9A-Za-z.]+)?)$/.exec(c.trim())?.[1])
      .find((v) => v !== undefined);
    if (pinned && constraints.every((c) => versionSatisfies(pinned, c))) return pinned;
    const offered = await this.registry.versions(address, this.platform, signal);
    const ok = offered.filter(
      (v) =>
        constraints.every((c) => versionSatisfies(v, c)) &&
        (!v.includes("-") || constraints.some((c) => c.includes(v))),
    );
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

  /** Downloads, verifies and unpacks one provider package into `dir`. */
  private async fetch(
    address: ProviderAddress,
    version: string,
    dir: string,
    scratch: string,
    signal: AbortSignal,
  ): Promise<ProviderMeta> {
    const addr = addressString(address);
    const info = await this.registry.download(address, version, this.platform, signal);
    await this.registry.checksums(info, signal);
    const zip = join(scratch, "package.zip");
    const sha = await this.registry.fetchArchive(info, zip, this.maxPackageBytes, signal);
    if (sha !== info.shasum) {
      throw new VerificationError(
        "provider_checksum_mismatch",
        `${addr} ${version}: the downloaded ${info.filename} has sha256 ${sha}, but the registry vouches for ${info.shasum}; nothing was installed`,
      );
    }
    unzipProvider(zip, dir, this.maxPackageBytes);
    return { address: addr, version, platform: this.platform, zh: `zh:${sha}` };
  }

  /** Above the soft limit: removes entries no run holds, least recently used first. */
  evict(): void {
    this.store.evict();
  }

  /** Entries held now (for tests and the health details). */
  get size(): { entries: number; bytes: number } {
    return this.store.size;
  }

  /** Recomputes the bytes counter from disk (tests). */
  measured(): number {
    return this.store.measured();
  }
}

/**
 * Checks an entry against the run's lock file. Returns an `h1:` hash the lock file must gain
 * (it vouched for the archive by `zh:` only), or undefined when it already vouches for the entry.
 */
function checkLock(l: LockedProvider, e: Entry): string | undefined {
  if (l.hashes.length === 0 || l.hashes.includes(e.h1)) return undefined;
  if (l.hashes.includes(e.meta.zh)) return e.h1;
  throw new VerificationError(
    "provider_lock_mismatch",
    `${e.meta.address} ${e.meta.version}: the lock file's hashes match neither the package the registry signed (${e.meta.zh}) nor its contents (${e.h1}); the lock file or the provider's release changed: check it, and update the lock file with \`terraform providers lock\` if the new release is trusted`,
  );
}
