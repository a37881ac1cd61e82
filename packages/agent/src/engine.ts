import { spawnSync } from "node:child_process";
import { accessSync, constants } from "node:fs";
import { delimiter, join } from "node:path";
import { DroverError, type Engine } from "@drover/protocol";

/** A terraform or tofu executable and the version it reports. */
export interface EngineBinary {
  path: string;
  version: string;
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

/**
 * Finds the workspace's binary: the binary cache (`<cache>/bin/<engine>/<version>/<engine>`)
 * when a version is pinned and present, else the first `<engine>` on PATH.
 */
export function resolveEngine(engine: Engine, version: string | null, cacheDir: string, pathEnv: string | undefined): EngineBinary {
  const candidates: string[] = [];
  if (version) candidates.push(join(cacheDir, "bin", engine, version, engine));
  for (const dir of (pathEnv ?? "").split(delimiter)) if (dir) candidates.push(join(dir, engine));
  const path = candidates.find(executable);
  if (!path) {
    throw new DroverError("not_found", `${engine}${version ? ` ${version}` : ""} is not installed on this agent: put it on PATH or in ${join(cacheDir, "bin", engine, version ?? "<version>")}`);
  }
  let v = versions.get(path);
  if (!v) {
    const out = spawnSync(path, ["version", "-json"], { encoding: "utf8", env: { ...process.env, CHECKPOINT_DISABLE: "1" } });
    try {
      v = (JSON.parse(out.stdout) as { terraform_version?: string }).terraform_version ?? "unknown";
    } catch {
      v = out.stdout.split("\n")[0]?.trim() || "unknown";
    }
    versions.set(path, v);
  }
  return { path, version: v };
}
