import { existsSync, lstatSync, readdirSync, readFileSync, renameSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import type { Logger } from "pino";
import type { Dispatcher } from "undici";
import {
  DroverError,
  isExactVersion,
  isVersionConstraint,
  versionSatisfies,
  type Engine,
  messageOf,
} from "@drover/protocol";
import { CacheStore, untilAborted, type CacheCounters } from "../cache/store.js";
import { mkdirReadable } from "../cache/tree.js";
import {
  enginesOnPath,
  pathDirectories,
  reportedVersion,
  type EngineBinary,
  type EngineFallback,
} from "../job/engine.js";
import { terraformPlatform } from "../providers/cache.js";
import { VerificationError } from "../providers/errors.js";
import { RegistryClient } from "../providers/registry.js";
import { unzipProvider } from "../providers/zip.js";
import { EngineError } from "./errors.js";
import { releaseLayout, type ReleaseLayout } from "./releases.js";
import { ReleaseVerifier, type VerifiedRelease } from "./verify.js";

/*
 * The agent's terraform/tofu binaries. The version a workspace asks for (exact, or the newest
 * release satisfying a constraint) is downloaded once per agent from the vendor's release
 * layout, and run only once everything checks: the SHA256SUMS document carries a detached
 * signature by a key whose fingerprint is pinned, it lists the archive for this platform, and
 * the archive has that sha256. The unpacked release is stored read-only under that sha256
 * (content-addressed, in the caches' shared store: cache/store.ts), checked before each use. When the
 * releases are unreachable or lack the version, the engine on PATH may stand in if the agent
 * allows it; a verification failure never falls back (verify.ts checks the signature).
 * docs/decisions/0023-engine-binaries.md.
 */

/** A binary a job runs, held against eviction until `release`. */
export interface EngineLease extends EngineBinary {
  /** True: a verified release in the agent's cache (`path` is the agent's); false: the fallback's own engine. */
  readonly downloaded: boolean;
  /** Lines for the run's log: where the binary came from. */
  readonly notes: string[];
  /** The job is over. Idempotent. */
  release(): void;
}

/** Options of an `EngineCache`. */
export interface EngineCacheOptions {
  /** `<DROVER_AGENT_CACHE_DIR>/engines`. */
  dir: string;
  /** Soft limit of the stored releases (DROVER_AGENT_BINARY_CACHE_SIZE_LIMIT_MB). */
  limitBytes: number;
  dispatcher: Dispatcher;
  logger: Logger;
  /** Base URLs of each engine's releases, and tofu's version index. */
  releases: { terraform: string; tofu: string; tofuIndex: string };
  /** Armored public keys signatures may come from (only pinned ones count). */
  signingKeys: string[];
  /** Fingerprints (upper-case hex) of the keys whose signatures are trusted. */
  trustedFingerprints: string[];
  /** Whether an engine on PATH may run when the releases cannot provide the version. */
  pathFallback: boolean;
  pathEnv: string | undefined;
  /** `os_arch`; default this machine's. */
  platform?: string;
  maxArchiveBytes?: number;
  /** Longest one release download may take (it is shared by every job waiting for it). */
  downloadTimeoutMs?: number;
  now?: () => number;
}

interface VersionRecord {
  digest: string;
}

const indexLimit = 32 << 20;

/** The newest of `versions` satisfying `wanted`; pre-releases only when the constraint names one. */
export function newestSatisfying(versions: string[], wanted: string): string | undefined {
  const pre = wanted.includes("-");
  const ok = versions.filter((v) => isExactVersion(v) && versionSatisfies(v, wanted) && (pre || !v.includes("-")));
  const key = (v: string): number[] => v.replace(/-.*/, "").split(".").map(Number);
  ok.sort((a, b) => {
    const [x, y] = [key(a), key(b)];
    for (let i = 0; i < 3; i++) if ((x[i] ?? 0) !== (y[i] ?? 0)) return (x[i] ?? 0) - (y[i] ?? 0);
    return a.includes("-") === b.includes("-") ? (a < b ? -1 : 1) : a.includes("-") ? -1 : 1;
  });
  return ok.at(-1);
}

/** What the store records with a release. */
interface ReleaseMeta {
  engine: Engine;
  version: string;
  archive: string;
}

export class EngineCache {
  /** Hits, misses (downloads), evictions and bytes, for /metrics (zero until the store exists). */
  readonly counters: CacheCounters;
  private storeOnDisk: CacheStore<ReleaseMeta> | undefined;
  private readonly http: RegistryClient;
  private readonly versionsDir: string;
  private readonly platform: string;
  private readonly maxArchiveBytes: number;
  private readonly downloadTimeoutMs: number;
  /** Per `engine version`: the one SHA256SUMS verification in flight. */
  private readonly verifying = new Map<string, Promise<VerifiedRelease>>();
  private readonly verifier: ReleaseVerifier;

  constructor(private readonly options: EngineCacheOptions) {
    this.versionsDir = join(options.dir, "versions");
    // Release URLs are the operator's settings, not a configuration's.
    this.http = new RegistryClient(options.dispatcher, { allowMetadataAddresses: true });
    this.platform = options.platform ?? terraformPlatform();
    this.maxArchiveBytes = options.maxArchiveBytes ?? 1024 ** 3;
    this.downloadTimeoutMs = options.downloadTimeoutMs ?? 30 * 60_000;
    this.verifier = new ReleaseVerifier({
      http: this.http,
      platform: this.platform,
      signingKeys: options.signingKeys,
      trustedFingerprints: options.trustedFingerprints,
    });
    const live = (): CacheCounters => this.storeOnDisk?.counters ?? { hits: 0, misses: 0, evictions: 0, bytes: 0 };
    this.counters = {
      get hits() {
        return live().hits;
      },
      get misses() {
        return live().misses;
      },
      get evictions() {
        return live().evictions;
      },
      get bytes() {
        return live().bytes;
      },
    };
  }

  /** The store, made on first use: an agent whose workspaces pin no version never touches the disk. */
  private get store(): CacheStore<ReleaseMeta> {
    if (!this.storeOnDisk) {
      const o = this.options;
      this.storeOnDisk = new CacheStore<ReleaseMeta>({
        dir: o.dir,
        entries: "releases",
        limitBytes: o.limitBytes,
        logger: o.logger,
        kind: "engine",
        fillTimeoutMs: this.downloadTimeoutMs,
        ...(o.now ? { now: o.now } : {}),
      });
      mkdirReadable(this.versionsDir);
    }
    return this.storeOnDisk;
  }

  /** Stored releases (archive digests), for tests. */
  stored(): string[] {
    return this.storeOnDisk ? readdirSync(this.storeOnDisk.root) : [];
  }

  /** Whether an engine of the fallback (PATH, or a runner image's) may run when the releases cannot provide the version. */
  get fallbackAllowed(): boolean {
    return this.options.pathFallback;
  }

  /**
   * The binary for a workspace's `engine` and `engineVersion`. No version: the fallback's engine
   * (or, without one, the newest release). Throws `EngineError` with the reason otherwise.
   * `fallback` is where engines other than downloads are (default: this process's PATH); a
   * runner container passes its image's.
   */
  async acquire(
    engine: Engine,
    wanted: string | null,
    signal: AbortSignal,
    fallback: EngineFallback = this.pathEngines,
  ): Promise<EngineLease> {
    if (wanted !== null && !isExactVersion(wanted) && !isVersionConstraint(wanted)) {
      throw new DroverError(
        "bad_request",
        `the workspace's ${engine} version ${JSON.stringify(wanted)} is not a version or a version constraint; fix the workspace's engineVersion`,
      );
    }
    if (wanted === null) {
      const first = (await fallback.engines(engine, signal))[0];
      if (first) return { ...first, downloaded: false, notes: [], release: () => {} };
      if (fallback.noEngine) throw fallback.noEngine(engine);
    }
    const want = wanted ?? ">= 0.0.0";
    try {
      const lease = await this.provide(engine, want, signal);
      this.store.evict();
      return lease;
    } catch (err) {
      if (!(err instanceof EngineError) || err.untrusted) throw err;
      const why = err.message.slice(err.reason.length + 2);
      if (!this.options.pathFallback) {
        throw new EngineError(
          err.reason,
          `${why}; the agent does not fall back to a ${engine} ${fallback.where} (DROVER_AGENT_ENGINE_PATH_FALLBACK=false)`,
        );
      }
      const there = await fallback.engines(engine, signal);
      const found = there.find((b) => versionSatisfies(b.version, want));
      if (!found) {
        const versions = there.map((b) => b.version).join(", ") || "none";
        const searched = fallback.searched === undefined ? "" : `; searched ${fallback.searched || "no directory"}`;
        // Without a version any engine would have done: the message names no constraint then.
        const wants = wanted === null ? "" : ` satisfies ${want}`;
        throw new EngineError(
          "engine_unavailable",
          `${why}; no ${engine} ${fallback.where}${wants} either (${fallback.where}: ${versions}${searched}): install it, make the releases reachable, or ${wanted === null ? "set" : "change"} the workspace's engineVersion`,
        );
      }
      this.options.logger.warn(
        { engine, wanted: want, path: found.path, reason: err.reason },
        `engine not downloaded; using the one ${fallback.where}`,
      );
      return {
        ...found,
        downloaded: false,
        notes: [
          `${engine} ${want} not downloaded (${why}); using ${found.path} ${fallback.where === "on PATH" ? "from PATH" : `(${engine} ${found.version}) ${fallback.where}`} (DROVER_AGENT_ENGINE_PATH_FALLBACK)`,
        ],
        release: () => {},
      };
    }
  }

  /**
   * Says at start when neither engine is on PATH: a workspace without an engineVersion then
   * makes the first run download the newest release, which an offline machine cannot.
   */
  warnWithoutPathEngines(): void {
    const pathEnv = this.options.pathEnv;
    if (enginesOnPath("terraform", pathEnv).length > 0 || enginesOnPath("tofu", pathEnv).length > 0) return;
    const terraform = this.layout("terraform").indexUrl;
    this.options.logger.warn(
      {
        searched: pathDirectories(pathEnv).join(", "),
        releases: terraform,
        tofuReleases: this.layout("tofu").indexUrl,
      },
      `no terraform or tofu on PATH: runs of workspaces without an engineVersion will download the newest release (terraform: from ${terraform})`,
    );
  }

  /** The engines on this process's PATH. */
  private get pathEngines(): EngineFallback {
    return {
      where: "on PATH",
      searched: pathDirectories(this.options.pathEnv).join(", "),
      engines: async (engine) =>
        Promise.all(
          enginesOnPath(engine, this.options.pathEnv).map(async (path) => ({
            path,
            version: await reportedVersion(path),
          })),
        ),
    };
  }

  private layout(engine: Engine): ReleaseLayout {
    const r = this.options.releases;
    return engine === "terraform"
      ? releaseLayout("terraform", r.terraform)
      : releaseLayout("tofu", r.tofu, r.tofuIndex);
  }

  private async provide(engine: Engine, wanted: string, signal: AbortSignal): Promise<EngineLease> {
    let version: string | undefined = isExactVersion(wanted) ? wanted : undefined;
    if (version) {
      const cached = await this.cached(engine, version, signal);
      if (cached) return cached;
    }
    let offered: string[];
    try {
      offered = await this.offered(engine, signal);
    } catch (err) {
      // Unreachable releases: a stored version that satisfies the constraint still runs.
      const stored = newestSatisfying(this.storedVersions(engine), wanted);
      const cached = stored === undefined ? undefined : await this.cached(engine, stored, signal);
      if (cached) return cached;
      throw err;
    }
    version ??= newestSatisfying(offered, wanted);
    if (version === undefined || !offered.includes(version)) {
      throw new EngineError(
        "engine_version_missing",
        `${engine} ${wanted} is not among the releases at ${this.layout(engine).indexUrl} (newest offered: ${newestSatisfying(offered, ">= 0.0.0") ?? "none"})`,
      );
    }
    const cached = await this.cached(engine, version, signal);
    if (cached) return cached;
    return this.fetch(engine, version, signal);
  }

  private recordPath(engine: Engine, version: string): string {
    return join(this.versionsDir, engine, version, `${this.platform}.json`);
  }

  private storedVersions(engine: Engine): string[] {
    const dir = join(this.versionsDir, engine);
    return existsSync(dir) ? readdirSync(dir).filter((v) => existsSync(this.recordPath(engine, v))) : [];
  }

  /** The stored release of a version recorded before (the store checks it; refills it from the recorded digest). */
  private async cached(engine: Engine, version: string, signal: AbortSignal): Promise<EngineLease | undefined> {
    let record: VersionRecord;
    try {
      record = JSON.parse(readFileSync(this.recordPath(engine, version), "utf8")) as VersionRecord;
    } catch {
      return undefined;
    }
    if (!/^[0-9a-f]{64}$/.test(record.digest)) return undefined;
    return this.install(
      engine,
      version,
      record.digest,
      this.layout(engine).archive(version, this.platform),
      undefined,
      signal,
    );
  }

  /** Versions the releases offer. */
  private async offered(engine: Engine, signal: AbortSignal): Promise<string[]> {
    const url = this.layout(engine).indexUrl;
    let doc: unknown;
    try {
      doc = JSON.parse((await this.http.fetchBytes(url, indexLimit, signal)).toString("utf8"));
    } catch (err) {
      throw new EngineError(
        "engine_releases_unreachable",
        `the ${engine} releases cannot be listed: ${err instanceof SyntaxError ? `${url} did not answer JSON` : messageOf(err)}`,
      );
    }
    return this.layout(engine).versions(doc);
  }

  private async fetch(engine: Engine, version: string, signal: AbortSignal): Promise<EngineLease> {
    const key = `${engine} ${version}`;
    let p = this.verifying.get(key);
    if (!p) {
      // Shared by every job that wants the version: one job's cancel does not end it for the others.
      p = this.verifier
        .verifiedSums(engine, version, this.layout(engine), AbortSignal.timeout(this.downloadTimeoutMs))
        .finally(() => this.verifying.delete(key));
      this.verifying.set(key, p);
    }
    const { digest, archive, signer } = await untilAborted(p, signal);
    return this.install(engine, version, digest, archive, signer, signal);
  }

  /**
   * The release stored under `digest` (the archive's sha256 from a verified SHA256SUMS), held
   * for the job; downloaded and unpacked when the store lacks it or it changed.
   */
  private async install(
    engine: Engine,
    version: string,
    digest: string,
    archive: string,
    signer: string | undefined,
    signal: AbortSignal,
  ): Promise<EngineLease> {
    const url = this.layout(engine).url(version, archive);
    const sums = this.layout(engine).sums(version);
    const hold = this.store.hold(digest);
    let entry;
    try {
      // The store runs the fill under its own deadline, shared by every job waiting for it.
      entry = await this.store.acquire(
        digest,
        async (tree, scratch, shared) => {
          const zip = join(scratch, archive);
          let sha: string;
          try {
            sha = await this.http.fetchArchive(
              {
                filename: archive,
                downloadUrl: url,
                shasum: digest,
                shasumsUrl: undefined,
                signatureUrl: undefined,
                armoredKeys: [],
              },
              zip,
              this.maxArchiveBytes,
              shared,
            );
          } catch (err) {
            if (err instanceof VerificationError)
              throw new EngineError("engine_archive_invalid", `${url}: ${err.message}`);
            throw new EngineError(
              "engine_releases_unreachable",
              `${engine} ${version} cannot be downloaded: ${messageOf(err)}`,
            );
          }
          if (sha !== digest)
            throw new EngineError(
              "engine_checksum_mismatch",
              `${url} has sha256 ${sha}, but the signed ${sums} lists ${digest}; nothing was installed or run`,
            );
          try {
            unzipProvider(zip, tree, this.maxArchiveBytes);
          } catch (err) {
            throw new EngineError(
              "engine_archive_invalid",
              `${archive}: ${err instanceof Error ? err.message.replace(/provider archive/g, "archive") : String(err)}`,
            );
          }
          const exe = join(tree, engine);
          if (!existsSync(exe) || !lstatSync(exe).isFile())
            throw new EngineError("engine_archive_invalid", `${archive} holds no ${engine} executable`);
          return { engine, version, archive };
        },
        signal,
      );
    } catch (err) {
      hold.release();
      throw err;
    }
    // The version's record names the stored release; written whole or not at all.
    const record = this.recordPath(engine, version);
    if (!existsSync(record)) {
      mkdirReadable(join(this.versionsDir, engine, version));
      const tmp = `${record}.${process.pid}.tmp`;
      writeFileSync(tmp, JSON.stringify({ digest } satisfies VersionRecord));
      renameSync(tmp, record);
    }
    const note = entry.fetched
      ? `${engine} ${version} downloaded from ${url}, verified: sha256 ${digest}${signer ? `, SHA256SUMS signed by ${signer}` : ` (as listed by the signed ${sums})`}`
      : `${engine} ${version} from the agent's verified cache (sha256 ${digest})`;
    if (entry.fetched) this.options.logger.info({ engine, version, digest }, "engine downloaded and verified");
    return { path: join(entry.path, engine), version, downloaded: true, notes: [note], release: () => hold.release() };
  }
}
