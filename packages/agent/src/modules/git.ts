import { createHash, randomBytes } from "node:crypto";
import { closeSync, existsSync, openSync, readFileSync, renameSync, rmSync, writeSync } from "node:fs";
import { join } from "node:path";
import { rootCertificates } from "node:tls";
import { execFile } from "node:child_process";
import { ModuleSourceUnavailable, type ModuleMeta } from "./sources.js";

/*
 * How the module cache fetches git sources: the commit a ref names, then that commit's tree
 * alone, under a deadline, with the CA bundle and redirect policy the agent was given.
 */

const gitEnv = (): NodeJS.ProcessEnv => ({ ...process.env, GIT_TERMINAL_PROMPT: "0", GIT_ASKPASS: "true" });

/** Longest one git command may take: a git server that stalls must not hold the run (and every run waiting for the entry). */
const gitTimeoutMs = 10 * 60_000;

/** What git's TLS libraries (gnutls and OpenSSL builds) say when the server's certificate chains to no trusted root. */
const untrustedCertificate =
  /server certificate verification failed|SSL certificate problem|certificate verify failed/i;

/** How the module cache runs git. */
export interface GitOptions {
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
export function writeCaBundle(dir: string, pem: string): string {
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
export async function lsRemote(
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
export async function gitCheckout(
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
