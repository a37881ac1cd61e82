import { chmodSync, existsSync, mkdirSync, mkdtempSync, readdirSync, readFileSync, renameSync, rmSync, statSync, symlinkSync, utimesSync, writeFileSync } from "node:fs";
import { randomBytes } from "node:crypto";
import { dirname, join } from "node:path";
import type { Logger } from "pino";
import type { Dispatcher } from "undici";
import { versionSatisfies } from "@drover/protocol";
import { extractConfiguration } from "../extract.js";
import { makeReadOnly, mkdirReadable, readOnly, removeTree, type CacheCounters } from "../providers/cache.js";
import { packageHashV1, treeBytes, treeFingerprint } from "../providers/hashes.js";
import { RegistryClient, RegistryUnavailable } from "../providers/registry.js";
import { stripComments, braced } from "../providers/config-scan.js";

/*
 * The agent's module cache: registry modules by exact version, unpacked read-only under
 * `<dir>/entries/HOST/NS/NAME/SYSTEM/VERSION`, fetched once per version (one fetch in flight per
 * entry), unpacked in a temporary directory on the same filesystem and renamed into place. A run
 * gets them as terraform would have installed them: `.terraform/modules/<call>` links to the
 * entry and `.terraform/modules/modules.json` records it, so `init` finds them installed and asks
 * no registry. Registries give no checksum for modules: an entry is hashed when fetched and
 * checked against that hash before each use (fetched again when it changed). Module calls it does
 * not handle (git, http, local, nested calls) are left to terraform.
 */

interface ModuleCall {
  name: string;
  source: string;
  host: string;
  path: string;
  constraint: string | undefined;
}

interface Entry {
  key: string;
  path: string;
  metaPath: string;
  h1: string;
  size: number;
  lastUsed: number;
  verified: string | undefined;
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
  readonly counters: CacheCounters = { hits: 0, misses: 0, evictions: 0, bytes: 0 };
  private readonly entriesDir: string;
  private readonly metaDir: string;
  private readonly tmpDir: string;
  private readonly entries = new Map<string, Entry>();
  private readonly inflight = new Map<string, Promise<{ entry: Entry; fetched: boolean }>>();
  private readonly users = new Map<string, number>();
  private readonly registry: RegistryClient;
  private readonly now: () => number;

  constructor(private readonly options: ModuleCacheOptions) {
    this.entriesDir = join(options.dir, "entries");
    this.metaDir = join(options.dir, "meta");
    this.tmpDir = join(options.dir, "tmp");
    for (const d of [options.dir, this.entriesDir, this.metaDir, this.tmpDir]) {
      mkdirReadable(d);
      chmodSync(d, 0o755);
    }
    this.registry = new RegistryClient(options.dispatcher);
    this.now = options.now ?? Date.now;
    this.load();
  }

  private load(): void {
    const walk = (dir: string): void => {
      for (const name of readdirSync(dir)) {
        const p = join(dir, name);
        if (statSync(p).isDirectory()) walk(p);
        else if (name.endsWith(".json")) {
          try {
            const meta = JSON.parse(readFileSync(p, "utf8")) as { key: string; h1: string; size: number };
            const path = join(this.entriesDir, meta.key);
            if (!existsSync(path)) throw new Error("entry missing");
            this.entries.set(meta.key, { ...meta, path, metaPath: p, lastUsed: statSync(p).mtimeMs, verified: undefined });
          } catch {
            rmSync(p, { force: true });
          }
        }
      }
    };
    walk(this.metaDir);
    this.counters.bytes = [...this.entries.values()].reduce((n, e) => n + e.size, 0);
  }

  /** Installs the root module's registry module calls from the cache into `workDir/.terraform/modules`. */
  async prepare(workDir: string, signal: AbortSignal): Promise<ModuleLease> {
    const notes: string[] = [];
    const held: string[] = [];
    const records: Array<{ Key: string; Source: string; Version: string; Dir: string }> = [];
    const manifest = join(workDir, ".terraform", "modules", "modules.json");
    let released = false;
    const release = (): void => {
      if (released) return;
      released = true;
      for (const k of held) this.users.set(k, (this.users.get(k) ?? 1) - 1);
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
          this.users.set(key, (this.users.get(key) ?? 0) + 1);
          held.push(key);
          const entry = await this.acquire(key, call, version, signal);
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
      this.evict();
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

  private async acquire(key: string, call: ModuleCall, version: string, signal: AbortSignal): Promise<Entry> {
    let p = this.inflight.get(key);
    const mine = !p;
    if (!p) {
      p = this.ready(key, call, version, signal).finally(() => this.inflight.delete(key));
      this.inflight.set(key, p);
    }
    const { entry, fetched } = await p;
    if (mine && fetched) this.counters.misses++;
    else this.counters.hits++;
    entry.lastUsed = this.now();
    try {
      utimesSync(entry.metaPath, new Date(entry.lastUsed), new Date(entry.lastUsed));
    } catch {
      // Only the eviction order after a restart depends on it.
    }
    return entry;
  }

  private async ready(key: string, call: ModuleCall, version: string, signal: AbortSignal): Promise<{ entry: Entry; fetched: boolean }> {
    const existing = this.entries.get(key);
    if (existing) {
      let fp: string | undefined;
      try {
        fp = treeFingerprint(existing.path);
      } catch {
        fp = undefined;
      }
      if (fp !== undefined && (fp === existing.verified || (readOnly(existing.path) && (await packageHashV1(existing.path)) === existing.h1))) {
        existing.verified = fp;
        return { entry: existing, fetched: false };
      }
      this.options.logger.warn({ entry: key }, "module cache entry changed since it was fetched; fetching it again");
      this.remove(existing);
    }
    return { entry: await this.fetch(key, call, version, signal), fetched: true };
  }

  private async fetch(key: string, call: ModuleCall, version: string, signal: AbortSignal): Promise<Entry> {
    const location = await this.registry.moduleLocation(call.host, call.path, version, signal);
    const url = new URL(location);
    if (url.protocol !== "https:" || !/\.(tar\.gz|tgz)$/.test(url.pathname)) throw new Error(`unsupported module package ${location} (the cache takes https .tar.gz packages)`);
    const archive = await this.registry.fetchBytes(location, this.options.maxPackageBytes ?? 512 << 20, signal);
    const work = mkdtempSync(join(this.tmpDir, `${process.pid}-`));
    try {
      const unpacked = join(work, "entry");
      await extractConfiguration(archive, unpacked);
      makeReadOnly(unpacked);
      chmodSync(unpacked, 0o755);
      const size = treeBytes(unpacked);
      const h1 = await packageHashV1(unpacked);
      const path = join(this.entriesDir, key);
      const metaPath = join(this.metaDir, `${key}.json`);
      mkdirReadable(dirname(path));
      mkdirReadable(dirname(metaPath));
      if (existsSync(path)) {
        chmodSync(path, 0o700);
        renameSync(path, join(work, "replaced"));
      }
      writeFileSync(join(work, "meta.json"), JSON.stringify({ key, h1, size }));
      renameSync(join(work, "meta.json"), metaPath);
      renameSync(unpacked, path);
      chmodSync(path, 0o555);
      const entry: Entry = { key, path, metaPath, h1, size, lastUsed: this.now(), verified: treeFingerprint(path) };
      this.entries.set(key, entry);
      this.counters.bytes += size;
      this.options.logger.info({ module: key, bytes: size }, "module cached");
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
  }

  /** Above the soft limit: removes entries no run holds, least recently used first. */
  evict(): void {
    if (this.counters.bytes <= this.options.limitBytes) return;
    const idle = [...this.entries.values()].filter((e) => (this.users.get(e.key) ?? 0) === 0 && !this.inflight.has(e.key)).sort((a, b) => a.lastUsed - b.lastUsed);
    for (const e of idle) {
      if (this.counters.bytes <= this.options.limitBytes) break;
      this.remove(e);
      this.counters.evictions++;
    }
  }
}
