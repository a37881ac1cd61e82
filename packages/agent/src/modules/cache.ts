import { execFile } from "node:child_process";
import { createHash, randomBytes } from "node:crypto";
import { closeSync, existsSync, openSync, readdirSync, readFileSync, renameSync, rmSync, writeSync } from "node:fs";
import { join, resolve } from "node:path";
import { rootCertificates } from "node:tls";
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
import { stripComments, braced } from "../providers/config-scan.js";

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
 * CacheStore (cache/store.ts). Module calls it does not handle are left to terraform.
 */

/** Where a module call's code comes from, as far as the cache understands it. */
type ModuleSource =
  | { kind: "registry"; host: string; path: string; constraint: string | undefined }
  /** `git::<url>[//subdir][?ref=…]`: cached by the commit the ref names. */
  | { kind: "git"; url: string; ref: string | undefined; subdir: string }
  /** An `http(s)://….tar.gz` archive (`?checksum=sha256:<hex>` verified when given): cached by URL. */
  | { kind: "http"; url: string; checksum: string | undefined; subdir: string }
  /** A directory of the calling module (`./…`, `../…`): its own calls are followed. */
  | { kind: "local"; path: string };

interface ModuleCall {
  name: string;
  /** The source as written (what terraform records in modules.json). */
  source: string;
  spec: ModuleSource | undefined;
}

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

const defaultRegistry = "registry.terraform.io";

/** Splits go-getter's `//subdir` off a source (the query stays with the URL). */
function splitSubdir(src: string): { url: string; subdir: string } {
  const schemeEnd = src.indexOf("://");
  const at = src.indexOf("//", schemeEnd >= 0 ? schemeEnd + 3 : 0);
  if (at < 0) return { url: src, subdir: "" };
  let subdir = src.slice(at + 2);
  let url = src.slice(0, at);
  const q = subdir.indexOf("?");
  if (q >= 0) {
    url += subdir.slice(q);
    subdir = subdir.slice(0, q);
  }
  return { url, subdir: subdir.replace(/\/+$/, "") };
}

/** What the cache makes of a module source; undefined: left to terraform. */
export function parseModuleSource(source: string, constraint: string | undefined): ModuleSource | undefined {
  if (source.startsWith("./") || source.startsWith("../")) return { kind: "local", path: source };
  const part = /^[0-9A-Za-z][0-9A-Za-z_-]*$/;
  const parts = source.split("/");
  if (!source.includes(":") && !source.startsWith("/")) {
    if (parts.length === 3 && parts.every((p) => part.test(p)))
      return { kind: "registry", host: defaultRegistry, path: parts.join("/").toLowerCase(), constraint };
    if (
      parts.length === 4 &&
      /^[0-9a-z.-]*\.[0-9a-z.-]*$/i.test(parts[0] ?? "") &&
      parts.slice(1).every((p) => part.test(p))
    )
      return {
        kind: "registry",
        host: (parts[0] as string).toLowerCase(),
        path: parts.slice(1).join("/").toLowerCase(),
        constraint,
      };
  }
  if (
    parts.length === 4 &&
    /^[0-9a-z.-]*\.[0-9a-z.-]*:\d{1,5}$/i.test(parts[0] ?? "") &&
    parts.slice(1).every((p) => part.test(p))
  ) {
    return {
      kind: "registry",
      host: (parts[0] as string).toLowerCase(),
      path: parts.slice(1).join("/").toLowerCase(),
      constraint,
    };
  }
  const forced = /^([a-z0-9]+)::(.*)$/.exec(source);
  const { url: raw, subdir } = splitSubdir(forced ? (forced[2] as string) : source);
  let url: URL;
  try {
    url = new URL(raw);
  } catch {
    return undefined;
  }
  if (subdir.split("/").some((p) => p === ".." || p === ".")) return undefined;
  if (forced?.[1] === "git" && ["https:", "http:", "file:"].includes(url.protocol)) {
    const ref = url.searchParams.get("ref") ?? undefined;
    url.searchParams.delete("ref");
    // Other go-getter options (depth, sshkey) change how terraform fetches: leave those calls to it.
    if ([...url.searchParams.keys()].length > 0) return undefined;
    return { kind: "git", url: url.href, ref, subdir };
  }
  if (!forced && ["https:", "http:"].includes(url.protocol) && /\.(tar\.gz|tgz)$/.test(url.pathname)) {
    const sum = url.searchParams.get("checksum") ?? undefined;
    if (sum !== undefined && !/^sha256:[0-9a-f]{64}$/.test(sum)) return undefined;
    url.searchParams.delete("checksum");
    if ([...url.searchParams.keys()].length > 0) return undefined;
    return { kind: "http", url: url.href, checksum: sum?.slice("sha256:".length), subdir };
  }
  return undefined;
}

/** The module calls of the module in `dir` (`module "x" { source = "…" version = "…" }`). */
export function scanModuleCalls(dir: string): ModuleCall[] {
  const calls: ModuleCall[] = [];
  for (const file of readdirSync(dir)) {
    if (!file.endsWith(".tf")) continue;
    const text = stripComments(readFileSync(join(dir, file), "utf8"));
    for (const m of text.matchAll(/\bmodule\s+"([A-Za-z][\w-]*)"\s*\{/g)) {
      const body = braced(text, (m.index ?? 0) + m[0].length - 1);
      const source = /\bsource\s*=\s*"([^"]*)"/.exec(body)?.[1];
      const constraint = /\bversion\s*=\s*"([^"]*)"/.exec(body)?.[1];
      if (!source) continue;
      calls.push({ name: m[1] as string, source, spec: parseModuleSource(source, constraint) });
    }
  }
  return calls;
}

const digest = (s: string): string => createHash("sha256").update(s).digest("hex").slice(0, 32);

/** Modules nested deeper than this are left to terraform. */
const maxDepth = 8;

/** A module source the cache cannot fetch (unreachable, unknown ref, unsupported package): terraform gets it. */
class ModuleSourceUnavailable extends Error {}

/** What the module cache records beside an entry: where it came from, and the archive's sha256 when there was one. */
interface ModuleMeta {
  source: string;
  sha256?: string;
  commit?: string;
}

/** terraform's normalized form of a remote source in modules.json: the package with `//subdir` before its query. */
function packageSource(source: string): string {
  const forced = /^([a-z0-9]+::)(.*)$/.exec(source);
  const { url, subdir } = splitSubdir(forced ? (forced[2] as string) : source);
  const q = url.indexOf("?");
  const withSubdir = !subdir ? url : q < 0 ? `${url}//${subdir}` : `${url.slice(0, q)}//${subdir}${url.slice(q)}`;
  return `${forced?.[1] ?? ""}${withSubdir}`;
}

const gitEnv = (): NodeJS.ProcessEnv => ({ ...process.env, GIT_TERMINAL_PROMPT: "0", GIT_ASKPASS: "true" });

/** Longest one git command may take: a git server that stalls must not hold the run (and every run waiting for the entry). */
const gitTimeoutMs = 10 * 60_000;

/** What git's TLS libraries (gnutls and OpenSSL builds) say when the server's certificate chains to no trusted root. */
const untrustedCertificate =
  /server certificate verification failed|SSL certificate problem|certificate verify failed/i;

/** How the module cache runs git. */
interface GitOptions {
  /**
   * A PEM bundle replacing git's CA file for https, so it holds the default roots as well as
   * DROVER_CA_CERT. It is given as GIT_SSL_CAINFO, not `-c http.sslCAInfo`: git lets that
   * variable (often set by images and CI) override any configuration.
   */
  caFile: string | undefined;
  /**
   * Whether git may follow an http redirect. Off unless metadata addresses are allowed: git
   * resolves and follows redirects itself, so only the source's own host can be checked.
   */
  followRedirects: boolean;
}

function git(args: string[], signal: AbortSignal, options: GitOptions, cwd?: string): Promise<string> {
  const deadline = AbortSignal.timeout(gitTimeoutMs);
  const env = gitEnv();
  if (options.caFile) env.GIT_SSL_CAINFO = options.caFile;
  // Command-line configuration outranks every configuration file.
  const argv = options.followRedirects ? args : ["-c", "http.followRedirects=false", ...args];
  return new Promise((resolvePromise, reject) => {
    const run = { cwd, env, signal: AbortSignal.any([signal, deadline]), maxBuffer: 16 << 20 };
    execFile("git", argv, run, (err, stdout, stderr) => {
      const said = (stderr || err?.message || "").trim().split("\n").slice(-1)[0];
      if (err && deadline.aborted && !signal.aborted)
        reject(new ModuleSourceUnavailable(`git ${args[0]} took longer than ${gitTimeoutMs / 1000} s`));
      else if (err && untrustedCertificate.test(stderr)) {
        reject(
          new ModuleSourceUnavailable(
            `git_tls_untrusted: git ${args[0]}: ${said}: the git server's TLS certificate is not signed by a trusted CA; set DROVER_CA_CERT to the PEM of the CA that signed it`,
          ),
        );
      } else if (err) reject(new ModuleSourceUnavailable(`git ${args[0]}: ${said}`));
      else resolvePromise(stdout);
    });
  });
}

/** The roots git was told to use by the environment (GIT_SSL_CAINFO), which the bundle replaces; none when unset or unreadable. */
function inheritedGitRoots(): string[] {
  // GIT_SSL_CAINFO replaces every CA source git would otherwise use, so the bundle carries them:
  // a file the environment names for git, OpenSSL or Node, and the system's store (where
  // update-ca-certificates puts an organisation's roots).
  const files = [
    process.env.GIT_SSL_CAINFO,
    process.env.SSL_CERT_FILE,
    process.env.NODE_EXTRA_CA_CERTS,
    systemBundles.find((f) => existsSync(f)),
  ];
  const roots: string[] = [];
  for (const file of new Set(files.filter((f): f is string => !!f))) {
    try {
      roots.push(readFileSync(file, "utf8").trim());
    } catch {
      // An unreadable file adds nothing; the private CA and Node's roots are still there.
    }
  }
  return roots;
}

/** Where Linux distributions keep the system's CA bundle (Debian/Ubuntu/Alpine, RHEL/Fedora, SUSE). */
const systemBundles = [
  "/etc/ssl/certs/ca-certificates.crt",
  "/etc/pki/tls/certs/ca-bundle.crt",
  "/etc/ssl/ca-bundle.pem",
];

/**
 * Writes the default roots (Node's, the system's and the files the environment names) and `pem` into one
 * private file below `dir` for git: named by owner and content (processes of other users sharing
 * the cache keep their own), made 0600 with O_EXCL under a random name (never through a planted
 * link) and renamed into place.
 */
function writeCaBundle(dir: string, pem: string): string {
  const bundle = [...rootCertificates, ...inheritedGitRoots(), pem.trim()].join("\n") + "\n";
  const uid = process.getuid?.() ?? 0;
  const path = join(dir, `git-ca-${uid}-${createHash("sha256").update(bundle).digest("hex").slice(0, 16)}.pem`);
  const tmp = join(dir, "tmp", `git-ca-${randomBytes(8).toString("hex")}`);
  const fd = openSync(tmp, "wx", 0o600);
  try {
    writeSync(fd, bundle);
  } finally {
    closeSync(fd);
  }
  try {
    renameSync(tmp, path);
  } catch (err) {
    rmSync(tmp, { force: true });
    throw err;
  }
  return path;
}

/** The commit `ref` (a branch or tag; HEAD when unset) names in the repository at `url`. */
async function lsRemote(
  url: string,
  ref: string | undefined,
  signal: AbortSignal,
  options: GitOptions,
): Promise<string> {
  const out = await git(["ls-remote", "--", url, ...(ref ? [ref, `${ref}^{}`] : ["HEAD"])], signal, options);
  const lines = out
    .trim()
    .split("\n")
    .map((l) => l.split("\t"))
    .filter((p) => p.length === 2) as Array<[string, string]>;
  // An annotated tag's commit is its peeled line (`refs/tags/v1^{}`).
  const pick = lines.find(([, name]) => name.endsWith("^{}")) ?? lines[0];
  if (!pick || !/^[0-9a-f]{40}$/.test(pick[0])) throw new ModuleSourceUnavailable(`${url} has no ref ${ref ?? "HEAD"}`);
  return pick[0];
}

/**
 * Fetches `commit` of the repository at `url` and writes its tree into `dir`. Only that commit
 * is fetched (depth 1: its tree, not the repository's history), by its id or else by the ref
 * that named it; a server that refuses both gets a whole clone. git checks every object it
 * receives against its hash, and the commit must be the one asked for, so the tree is the one
 * the commit id vouches for.
 */
async function gitCheckout(
  url: string,
  ref: string | undefined,
  commit: string,
  dir: string,
  scratch: string,
  signal: AbortSignal,
  options: GitOptions,
): Promise<ModuleMeta> {
  const has = async (repo: string): Promise<boolean> =>
    (await git(["--git-dir", repo, "cat-file", "-t", commit], signal, options).catch(() => "")).trim() === "commit";
  const shallow = join(scratch, "shallow.git");
  await git(["init", "--quiet", "--bare", shallow], signal, options);
  // By id: protocol v2 servers serve any commit; an older one only what a ref points at, so the
  // ref is asked for too (ls-remote said it names this commit; if it has moved since, the
  // commit is missing and the whole clone below decides).
  for (const want of [commit, ...(ref === commit ? [] : [ref ?? "HEAD"])]) {
    if (
      await git(
        ["--git-dir", shallow, "fetch", "--quiet", "--depth", "1", "--no-tags", "--", url, want],
        signal,
        options,
      ).then(
        () => has(shallow),
        () => false,
      )
    ) {
      await git(
        ["--git-dir", shallow, "--work-tree", dir, "checkout", "--quiet", "-f", commit, "--", "."],
        signal,
        options,
      );
      return { source: url, commit };
    }
  }
  const repo = join(scratch, "repo.git");
  await git(["clone", "--quiet", "--bare", "--", url, repo], signal, options);
  if (!(await has(repo))) throw new ModuleSourceUnavailable(`${url} has no commit ${commit}`);
  await git(["--git-dir", repo, "--work-tree", dir, "checkout", "--quiet", "-f", commit, "--", "."], signal, options);
  return { source: url, commit };
}

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
