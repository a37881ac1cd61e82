import { accessSync, constants } from "node:fs";
import { delimiter, join } from "node:path";
import { spawnSync } from "node:child_process";
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

const versions = new Map<string, string>();

function executable(path: string): boolean {
  try {
    accessSync(path, constants.X_OK);
    return true;
  } catch {
    return false;
  }
}

/** The version a terraform/tofu binary reports (asked once per path). */
export function reportedVersion(path: string): string {
  let v = versions.get(path);
  if (!v) {
    const out = spawnSync(path, ["version", "-json"], {
      encoding: "utf8",
      env: { ...process.env, CHECKPOINT_DISABLE: "1" },
    });
    try {
      v = (JSON.parse(out.stdout) as { terraform_version?: string }).terraform_version ?? "unknown";
    } catch {
      v = /v?(\d+\.\d+\.\d+\S*)/.exec(out.stdout)?.[1] ?? "unknown";
    }
    versions.set(path, v);
  }
  return v;
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
export function resolveEngine(
  engine: Engine,
  version: string | null,
  cacheDir: string,
  pathEnv: string | undefined,
): EngineBinary {
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
    return { path, version: reportedVersion(path) };
  }
  if (isExactVersion(version)) {
    const cached = join(cacheDir, "bin", engine, version, engine);
    if (executable(cached)) return { path: cached, version: reportedVersion(cached) };
  }
  const path = onPath.find((p) => versionSatisfies(reportedVersion(p), version));
  if (!path) {
    const found = onPath.map((p) => reportedVersion(p)).join(", ") || "none";
    throw new DroverError(
      "not_found",
      `${engine} ${version} is not available on this agent (on PATH: ${found}); install it on PATH${isExactVersion(version) ? ` or in ${join(cacheDir, "bin", engine, version)}` : ""}, or change the workspace's engineVersion`,
    );
  }
  return { path, version: reportedVersion(path) };
}
