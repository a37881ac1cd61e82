import { accessSync, constants, statSync } from "node:fs";
import { delimiter, join } from "node:path";
import { execFile } from "node:child_process";
import { DroverError, isExactVersion, isVersionConstraint, versionSatisfies, type Engine } from "@drover/protocol";

/** A terraform or tofu executable and the version it reports. */
export interface EngineBinary {
  path: string;
  version: string;
}

/** Engines other than the agent's downloads: this process's PATH, or a runner image's. */
export interface EngineFallback {
  /** Where they are, for messages: "on PATH", "in the runner image". */
  where: string;
  /** What was looked through, for messages ("/usr/local/bin, /usr/bin"); absent where it is not a list of directories. */
  searched?: string;
  /** The engines there with their versions, preferred first (empty: none); `signal` is the job's. */
  engines(engine: Engine, signal: AbortSignal): Promise<EngineBinary[]>;
  /**
   * Set where a downloaded release cannot stand in for a missing one (a run container already
   * started without the release's mount): the error of a workspace without a version when
   * `engines` found none, thrown before anything is downloaded.
   */
  noEngine?(engine: Engine): Error;
}

/** What each binary reported, with the file identity it was asked for (an upgrade in place asks again). */
const versions = new Map<string, { file: string; version: Promise<string> }>();

/** A hung binary must not hold a job: it is asked again by the next one. */
const versionTimeoutMs = 30_000;

function executable(path: string): boolean {
  try {
    accessSync(path, constants.X_OK);
    return true;
  } catch {
    return false;
  }
}

/**
 * The version a terraform/tofu binary reports: asked once per file (its inode, size and mtime),
 * without blocking the agent's event loop; "unknown" when it does not answer.
 */
export function reportedVersion(path: string, timeoutMs = versionTimeoutMs): Promise<string> {
  let file: string;
  try {
    const s = statSync(path);
    file = `${s.ino}:${s.size}:${s.mtimeMs}`;
  } catch {
    file = "missing";
  }
  const known = versions.get(path);
  if (known?.file === file) return known.version;
  const version = askVersion(path, timeoutMs).catch(() => {
    versions.delete(path);
    return "unknown";
  });
  versions.set(path, { file, version });
  return version;
}

function askVersion(path: string, timeoutMs: number): Promise<string> {
  return new Promise((resolve, reject) => {
    execFile(
      path,
      ["version", "-json"],
      // SIGKILL: a binary that ignored a SIGTERM would hold the answer past the deadline.
      { encoding: "utf8", env: { ...process.env, CHECKPOINT_DISABLE: "1" }, timeout: timeoutMs, killSignal: "SIGKILL" },
      (err, stdout) => {
        if (err && !stdout) return reject(err);
        try {
          resolve((JSON.parse(stdout) as { terraform_version?: string }).terraform_version ?? "unknown");
        } catch {
          resolve(/v?(\d+\.\d+\.\d+\S*)/.exec(stdout)?.[1] ?? "unknown");
        }
      },
    );
  });
}

/**
 * Asks the engines on PATH for their versions in the background, so the agent's first job does
 * not wait for it (each answer is kept by `reportedVersion`).
 */
export function probeEnginesOnPath(pathEnv: string | undefined): void {
  for (const engine of ["terraform", "tofu"] as const)
    for (const path of enginesOnPath(engine, pathEnv)) void reportedVersion(path);
}

/** The absolute directories of PATH, in order: the only ones an engine is looked for in. */
export function pathDirectories(pathEnv: string | undefined): string[] {
  return (pathEnv ?? "").split(delimiter).filter((d) => d.startsWith("/"));
}

/** The executables named `engine` in the absolute directories of PATH, in order. */
export function enginesOnPath(engine: Engine, pathEnv: string | undefined): string[] {
  return pathDirectories(pathEnv)
    .map((d) => join(d, engine))
    .filter(executable);
}

/**
 * Finds the workspace's binary. With no version: the first `<engine>` on PATH. With an exact
 * version: the binary cache (`<cache>/bin/<engine>/<version>/<engine>`), else a binary on PATH
 * that reports exactly that version. With a constraint: the first binary on PATH that
 * satisfies it. Never another version: a pinned version that is not here fails the run.
 */
export async function resolveEngine(
  engine: Engine,
  version: string | null,
  cacheDir: string,
  pathEnv: string | undefined,
): Promise<EngineBinary> {
  // The server validates versions too; the agent trusts nothing it builds a path from.
  if (version !== null && !isExactVersion(version) && !isVersionConstraint(version)) {
    throw new DroverError(
      "bad_request",
      `the workspace's ${engine} version ${JSON.stringify(version)} is not a version or a version constraint; fix the workspace's engineVersion`,
    );
  }
  const onPath = enginesOnPath(engine, pathEnv);
  if (version === null) {
    const path = onPath[0];
    if (!path)
      throw new DroverError(
        "not_found",
        `${engine} is not installed on this agent (PATH searched: ${pathDirectories(pathEnv).join(", ") || "no directory"}): put it on PATH or pin a version in ${join(cacheDir, "bin", engine, "<version>")}`,
      );
    return { path, version: await reportedVersion(path) };
  }
  if (isExactVersion(version)) {
    const cached = join(cacheDir, "bin", engine, version, engine);
    if (executable(cached)) return { path: cached, version: await reportedVersion(cached) };
  }
  const reported = await Promise.all(onPath.map((p) => reportedVersion(p)));
  const path = onPath.find((_, i) => versionSatisfies(reported[i]!, version));
  if (!path) {
    const found = reported.join(", ") || "none";
    throw new DroverError(
      "not_found",
      `${engine} ${version} is not available on this agent (on PATH: ${found}); install it on PATH${isExactVersion(version) ? ` or in ${join(cacheDir, "bin", engine, version)}` : ""}, or change the workspace's engineVersion`,
    );
  }
  return { path, version: await reportedVersion(path) };
}
