import { existsSync, mkdirSync, readdirSync, readFileSync, symlinkSync, writeFileSync } from "node:fs";
import { dirname, join } from "node:path";
import type { Logger } from "pino";
import type { Dispatcher } from "undici";
import { versionSatisfies } from "@drover/protocol";
import { extractConfiguration } from "../extract.js";
import { CacheStore, type CacheCounters, type Hold } from "../cache/store.js";
import { RegistryClient, RegistryUnavailable } from "../providers/registry.js";
import { stripComments, braced } from "../providers/config-scan.js";

/*
 * The agent's module cache: registry modules by exact version, unpacked read-only under
 * `<dir>/entries/HOST/NS/NAME/SYSTEM/VERSION`, fetched once per version (one fetch in flight per
 * entry), unpacked in a temporary directory on the same filesystem and renamed into place. A run
 * gets them as terraform would have installed them: `.terraform/modules/<call>` links to the
 * entry and `.terraform/modules/modules.json` records it, so `init` finds them installed and asks
 * no registry. Registries give no checksum for modules: an entry is hashed when fetched and
 * checked against that hash before each use (fetched again when it changed), by the shared
 * CacheStore (cache/store.ts). Module calls it does not handle are left to terraform.
 */

interface ModuleCall {
  name: string;
  source: string;
  host: string;
  path: string;
  constraint: string | undefined;
}

/** What a run gets: the calls installed from the cache, and lines for its log. */
export interface ModuleLease {
  readonly installed: string[];
  readonly notes: string[];
  release(): void;
}

export interface ModuleCacheOptions {
  /** `<DROVER_AGENT_CACHE_DIR>/modules`. */
  dir: string;
  limitBytes: number;
  dispatcher: Dispatcher;
  logger: Logger;
  maxPackageBytes?: number;
  now?: () => number;
}

const defaultRegistry = "registry.terraform.io";

/** The root module's registry module calls (`module "x" { source = "ns/name/system" version = "…" }`). */
export function scanModuleCalls(workDir: string): ModuleCall[] {
  const calls: ModuleCall[] = [];
  for (const file of readdirSync(workDir)) {
    if (!file.endsWith(".tf")) continue;
    const text = stripComments(readFileSync(join(workDir, file), "utf8"));
    for (const m of text.matchAll(/\bmodule\s+"([A-Za-z][\w-]*)"\s*\{/g)) {
      const body = braced(text, (m.index ?? 0) + m[0].length - 1);
      const source = /\bsource\s*=\s*"([^"]*)"/.exec(body)?.[1];
      const constraint = /\bversion\s*=\s*"([^"]*)"/.exec(body)?.[1];
      if (!source) continue;
      const parts = source.split("/");
      const name = m[1] as string;
      const part = /^[0-9A-Za-z][0-9A-Za-z_-]*$/;
      if (source.includes("::") || source.startsWith(".") || source.startsWith("/") || source.includes("//")) continue;
      if (parts.length === 3 && parts.every((p) => part.test(p))) calls.push({ name, source, host: defaultRegistry, path: parts.join("/").toLowerCase(), constraint });
      else if (parts.length === 4 && /^[0-9a-z.-]*\.[0-9a-z.-]*(:\d{1,5})?$/i.test(parts[0] ?? "") && parts.slice(1).every((p) => part.test(p))) {
        calls.push({ name, source, host: (parts[0] as string).toLowerCase(), path: parts.slice(1).join("/").toLowerCase(), constraint });
      }
    }
  }
  return calls;
}

export class ModuleCache {
  private readonly store: CacheStore<Record<string, never>>;
  private readonly registry: RegistryClient;

  constructor(private readonly options: ModuleCacheOptions) {
    this.store = new CacheStore({ dir: options.dir, entries: "entries", limitBytes: options.limitBytes, logger: options.logger, kind: "module", ...(options.now ? { now: options.now } : {}) });
    this.registry = new RegistryClient(options.dispatcher);
  }

  /** Hits, misses, evictions and bytes, for /metrics. */
  get counters(): CacheCounters {
    return this.store.counters;
  }

  /** Installs the root module's registry module calls from the cache into `workDir/.terraform/modules`. */
  async prepare(workDir: string, signal: AbortSignal): Promise<ModuleLease> {
    const notes: string[] = [];
    const held: Hold[] = [];
    const records: Array<{ Key: string; Source: string; Version: string; Dir: string }> = [];
    const manifest = join(workDir, ".terraform", "modules", "modules.json");
    const release = (): void => {
      for (const h of held.splice(0)) h.release();
    };
    // A directory terraform already initialized (a kept plan directory) keeps its own installation.
    if (existsSync(manifest)) return { installed: [], notes, release };
    try {
      for (const call of scanModuleCalls(workDir)) {
        try {
          const version = await this.resolve(call, signal);
          if (!version) {
            notes.push(`module ${call.name}: no version of ${call.source} satisfies ${call.constraint ?? "any"}; left to terraform`);
            continue;
          }
          const key = `${call.host}/${call.path}/${version}`;
          held.push(this.store.hold(key));
          const entry = await this.store.acquire(key, (dir, _scratch, s) => this.fetch(call, version, dir, s), signal);
          const dir = join(workDir, ".terraform", "modules", call.name);
          mkdirSync(dirname(dir), { recursive: true });
          symlinkSync(entry.path, dir);
          records.push({ Key: call.name, Source: call.host === defaultRegistry ? `${defaultRegistry}/${call.path}` : `${call.host}/${call.path}`, Version: version, Dir: `.terraform/modules/${call.name}` });
        } catch (err) {
          if (err instanceof RegistryUnavailable || (err instanceof Error && /unsupported module package/.test(err.message))) notes.push(`module ${call.name} not cached (${err.message}); terraform installs it itself`);
          else throw err;
        }
      }
      if (records.length > 0) writeFileSync(manifest, JSON.stringify({ Modules: [{ Key: "", Source: "", Dir: "." }, ...records] }));
      this.store.evict();
      return { installed: records.map((r) => `${r.Key} (${r.Source} ${r.Version})`), notes, release };
    } catch (err) {
      release();
      throw err;
    }
  }

  private async resolve(call: ModuleCall, signal: AbortSignal): Promise<string | undefined> {
    const pinned = /^=?\s*v?(\d+\.\d+\.\d+(?:-[0-9A-Za-z.]+)?)$/.exec(call.constraint?.trim() ?? "")?.[1];
    if (pinned) return pinned;
    const offered = await this.registry.moduleVersions(call.host, call.path, signal);
    const ok = offered.filter((v) => !v.includes("-") && (!call.constraint || versionSatisfies(v, call.constraint)));
    const num = (v: string): number[] => v.split(".").map(Number);
    ok.sort((a, b) => {
      const [x, y] = [num(a), num(b)];
      for (let i = 0; i < 3; i++) if ((x[i] ?? 0) !== (y[i] ?? 0)) return (x[i] ?? 0) - (y[i] ?? 0);
      return 0;
    });
    return ok.at(-1);
  }

  /** Downloads a registry module's package and unpacks it into `dir`. */
  private async fetch(call: ModuleCall, version: string, dir: string, signal: AbortSignal): Promise<Record<string, never>> {
    const location = await this.registry.moduleLocation(call.host, call.path, version, signal);
    const url = new URL(location);
    if (url.protocol !== "https:" || !/\.(tar\.gz|tgz)$/.test(url.pathname)) throw new Error(`unsupported module package ${location} (the cache takes https .tar.gz packages)`);
    const archive = await this.registry.fetchBytes(location, this.options.maxPackageBytes ?? 512 << 20, signal);
    await extractConfiguration(archive, dir);
    return {};
  }

  /** Above the soft limit: removes entries no run holds, least recently used first. */
  evict(): void {
    this.store.evict();
  }
}
