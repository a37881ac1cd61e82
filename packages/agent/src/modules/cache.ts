import { createHash } from "node:crypto";
import { existsSync } from "node:fs";
import { join, resolve } from "node:path";
import type { RunFiles } from "../runners/runner.js";
import { localRunFiles } from "../job/local-files.js";
import { checkFetchTarget, FetchRefused } from "../net/fetch-guard.js";
import { VerificationError } from "../providers/errors.js";
import type { Logger } from "pino";
import type { Dispatcher } from "undici";
import { versionSatisfies, messageOf } from "@drover/protocol";
import { extractConfiguration } from "../job/extract.js";
import { CacheStore, type CacheCounters, type Fill, type Hold } from "../cache/store.js";
import { RegistryClient, RegistryUnavailable } from "../providers/registry.js";
import { gitCheckout, lsRemote, writeCaBundle, type GitOptions } from "./git.js";
import {
  packageSource,
  scanModuleCalls,
  ModuleSourceUnavailable,
  type ModuleCall,
  type ModuleMeta,
  type ModuleSource,
} from "./sources.js";

/*
 * The agent's module cache: registry modules by exact version
 * (`<dir>/entries/HOST/NS/NAME/SYSTEM/VERSION`), git sources by commit (`entries/git/<url>/<commit>`)
 * and http archives by URL (`entries/http/<url>`), unpacked read-only, fetched once each (one
 * fetch in flight per entry), in a temporary directory on the same filesystem and renamed into
 * place. Calls inside cached (and local) modules are followed. A run
 * gets them as terraform would have installed them: `.terraform/modules/<call>` links to the
 * entry and `.terraform/modules/modules.json` records it, so `init` finds them installed and asks
 * no registry. Registries give no checksum for modules: an entry is hashed when fetched and
 * checked against that hash before each use (fetched again when it changed), by the shared
 * CacheStore (cache/store.ts). Module calls it does not handle are left to terraform. Sources are
 * read in sources.ts, git ones fetched by git.ts.
 */

/** What a run gets: the calls installed from the cache, and lines for its log. */
export interface ModuleLease {
  readonly installed: string[];
  readonly notes: string[];
  /** The directories of the modules the configuration calls (cached and local), whose providers the provider cache prepares too. */
  readonly dirs: string[];
  release(): void;
}

export interface ModuleCacheOptions {
  /** `<DROVER_AGENT_CACHE_DIR>/modules`. */
  dir: string;
  limitBytes: number;
  dispatcher: Dispatcher;
  logger: Logger;
  /** PEM git trusts beside the default roots for https sources (DROVER_CA_CERT), as the dispatcher does. */
  caCertPem?: string | undefined;
  maxPackageBytes?: number;
  now?: () => number;
  /**
   * Registries, sources and redirects may be at link-local or metadata addresses
   * (DROVER_AGENT_CACHE_ALLOW_METADATA_ADDRESSES).
   */
  allowMetadataAddresses?: boolean;
  /** `git::file://` sources are fetched by the agent too (DROVER_AGENT_MODULE_CACHE_LOCAL_SOURCES). */
  allowLocalSources?: boolean;
}

const digest = (s: string): string => createHash("sha256").update(s).digest("hex").slice(0, 32);

/** Modules nested deeper than this are left to terraform. */
const maxDepth = 8;

export class ModuleCache {
  private readonly store: CacheStore<ModuleMeta>;
  private readonly registry: RegistryClient;
  /** git's CA file when DROVER_CA_CERT is set (git's own default roots otherwise), and its redirects. */
  private readonly gitOptions: GitOptions;

  constructor(private readonly options: ModuleCacheOptions) {
    this.store = new CacheStore<ModuleMeta>({
      dir: options.dir,
      entries: "entries",
      limitBytes: options.limitBytes,
      logger: options.logger,
      kind: "module",
      ...(options.now ? { now: options.now } : {}),
    });
    const allowMetadataAddresses = options.allowMetadataAddresses ?? false;
    this.registry = new RegistryClient(options.dispatcher, { allowMetadataAddresses });
    const caFile = options.caCertPem ? writeCaBundle(options.dir, options.caCertPem) : undefined;
    this.gitOptions = { caFile, followRedirects: allowMetadataAddresses };
  }

  /** Hits, misses, evictions and bytes, for /metrics. */
  get counters(): CacheCounters {
    return this.store.counters;
  }

  /**
   * Installs the module calls of the root module and, through them, of every module it calls
   * (registry, git and http sources; local directories are followed) from the cache into
   * `workDir/.terraform/modules`, writing through `files` (the run directory may be shared with a
   * runner container). Calls it cannot serve are left to terraform with a note.
   */
  async prepare(
    workDir: string,
    signal: AbortSignal,
    files: Pick<RunFiles, "link" | "write"> = localRunFiles(workDir),
  ): Promise<ModuleLease> {
    const notes: string[] = [];
    const held: Hold[] = [];
    const records: Array<{ Key: string; Source: string; Version?: string; Dir: string }> = [];
    const dirs: string[] = [];
    const manifest = join(workDir, ".terraform", "modules", "modules.json");
    const release = (): void => {
      for (const h of held.splice(0)) h.release();
    };
    // A directory terraform already initialized (a kept plan directory) keeps its own installation.
    if (existsSync(manifest)) return { installed: [], notes, dirs, release };
    const visit = async (dir: string, prefix: string, depth: number): Promise<void> => {
      for (const call of scanModuleCalls(dir)) {
        const key = prefix ? `${prefix}.${call.name}` : call.name;
        const spec = call.spec;
        if (depth >= maxDepth) {
          notes.push(`module ${key}: nested too deep for the cache; left to terraform`);
          continue;
        }
        if (!spec) {
          notes.push(`module ${key}: the cache does not take source ${call.source}; left to terraform`);
          continue;
        }
        if (spec.kind === "git" && spec.url.startsWith("file:") && !this.options.allowLocalSources) {
          // The agent may read what the run may not (another user in run-as-user mode):
          // terraform fetches it as the run.
          notes.push(`module ${key}: the cache does not fetch local repositories (${call.source}); left to terraform`);
          continue;
        }
        if (spec.kind === "local") {
          const child = resolve(dir, spec.path);
          if (existsSync(child)) {
            dirs.push(child);
            await visit(child, key, depth + 1);
          }
          continue;
        }
        try {
          const got = await this.install(spec, call, signal);
          if (!got) {
            notes.push(
              `module ${key}: no version of ${call.source} satisfies ${spec.kind === "registry" ? (spec.constraint ?? "any") : "any"}; left to terraform`,
            );
            continue;
          }
          held.push(got.hold);
          files.link(join(workDir, ".terraform", "modules", key), got.path);
          const subdir = spec.kind === "registry" ? "" : spec.subdir;
          records.push({
            Key: key,
            Source: got.source,
            ...(got.version ? { Version: got.version } : {}),
            Dir: `.terraform/modules/${key}${subdir ? `/${subdir}` : ""}`,
          });
          const moduleDir = subdir ? join(got.path, subdir) : got.path;
          dirs.push(moduleDir);
          await visit(moduleDir, key, depth + 1);
        } catch (err) {
          if (err instanceof RegistryUnavailable || err instanceof ModuleSourceUnavailable)
            notes.push(`module ${key} not cached (${err.message}); terraform installs it itself`);
          else throw err;
        }
      }
    };
    try {
      await visit(workDir, "", 0);
      if (records.length > 0)
        files.write(manifest, JSON.stringify({ Modules: [{ Key: "", Source: "", Dir: "." }, ...records] }));
      this.store.evict();
      return {
        installed: records.map((r) => `${r.Key} (${r.Source}${r.Version ? ` ${r.Version}` : ""})`),
        notes,
        dirs,
        release,
      };
    } catch (err) {
      release();
      throw err;
    }
  }

  /** The cache entry of one remote module source, held for the run; undefined when no version fits. */
  private async install(
    spec: Exclude<ModuleSource, { kind: "local" }>,
    call: ModuleCall,
    signal: AbortSignal,
  ): Promise<{ path: string; source: string; version?: string; hold: Hold } | undefined> {
    const max = this.options.maxPackageBytes ?? 512 << 20;
    let key: string;
    let fill: Fill<ModuleMeta>;
    let source: string;
    let version: string | undefined;
    if (spec.kind === "registry") {
      version = await this.resolve(spec, signal);
      if (!version) return undefined;
      key = `${spec.host}/${spec.path}/${version}`;
      source = `${spec.host}/${spec.path}`;
      const v = version;
      fill = (dir, _scratch, s) => this.fetchRegistry(spec, v, dir, s);
    } else if (spec.kind === "git") {
      // A commit names its content exactly; any other ref is asked of the repository once per run.
      if (!this.options.allowMetadataAddresses) await checkFetchTarget(spec.url);
      const pinned = spec.ref && /^[0-9a-f]{40}$/.test(spec.ref) ? spec.ref : undefined;
      const commit = pinned ?? (await lsRemote(spec.url, spec.ref, signal, this.gitOptions));
      key = `git/${digest(spec.url)}/${commit}`;
      source = packageSource(call.source);
      fill = (dir, scratch, s) => gitCheckout(spec.url, spec.ref, commit, dir, scratch, s, this.gitOptions);
    } else {
      key = `http/${digest(`${spec.url}#${spec.checksum ?? ""}`)}`;
      source = packageSource(call.source);
      fill = async (dir, _scratch, s) => {
        const archive = await this.registry.fetchBytes(spec.url, max, s).catch((err: unknown) => {
          if (err instanceof FetchRefused) throw err;
          throw new ModuleSourceUnavailable(`${spec.url}: ${messageOf(err)}`);
        });
        const sum = createHash("sha256").update(archive).digest("hex");
        if (spec.checksum && sum !== spec.checksum) {
          throw new VerificationError(
            "module_checksum_mismatch",
            `module ${call.name}: ${spec.url} has sha256 ${sum}, but its source asks for ${spec.checksum}; nothing was installed (fix the checksum if the new archive is trusted)`,
          );
        }
        await extractConfiguration(archive, dir);
        return { source: spec.url, sha256: sum };
      };
    }
    const hold = this.store.hold(key);
    try {
      const entry = await this.store.acquire(key, fill, signal);
      return { path: entry.path, source, ...(version ? { version } : {}), hold };
    } catch (err) {
      hold.release();
      throw err;
    }
  }

  private async resolve(
    spec: Extract<ModuleSource, { kind: "registry" }>,
    signal: AbortSignal,
  ): Promise<string | undefined> {
    const pinned = /^=?\s*v?(\d+\.\d+\.\d+(?:-[0-9A-Za-z.]+)?)$/.exec(spec.constraint?.trim() ?? "")?.[1];
    if (pinned) return pinned;
    const offered = await this.registry.moduleVersions(spec.host, spec.path, signal);
    const ok = offered.filter((v) => !v.includes("-") && (!spec.constraint || versionSatisfies(v, spec.constraint)));
    const num = (v: string): number[] => v.split(".").map(Number);
    ok.sort((a, b) => {
      const [x, y] = [num(a), num(b)];
      for (let i = 0; i < 3; i++) if ((x[i] ?? 0) !== (y[i] ?? 0)) return (x[i] ?? 0) - (y[i] ?? 0);
      return 0;
    });
    return ok.at(-1);
  }

  /** Downloads a registry module's package and unpacks it into `dir`. */
  private async fetchRegistry(
    spec: Extract<ModuleSource, { kind: "registry" }>,
    version: string,
    dir: string,
    signal: AbortSignal,
  ): Promise<ModuleMeta> {
    const location = await this.registry.moduleLocation(spec.host, spec.path, version, signal);
    const url = new URL(location);
    if (url.protocol !== "https:" || !/\.(tar\.gz|tgz)$/.test(url.pathname))
      throw new ModuleSourceUnavailable(
        `unsupported module package ${location} (the cache takes https .tar.gz packages)`,
      );
    const archive = await this.registry.fetchBytes(location, this.options.maxPackageBytes ?? 512 << 20, signal);
    await extractConfiguration(archive, dir);
    return { source: location };
  }

  /** Above the soft limit: removes entries no run holds, least recently used first. */
  evict(): void {
    this.store.evict();
  }
}
