import { DroverError } from "@drover/protocol";
import { closeSync, constants, openSync, realpathSync, rmSync, symlinkSync, writeFileSync } from "node:fs";
import { below, SafeDir, UnsafePathError } from "./safe-dir.js";
import type { RunFiles } from "../runners/runner.js";

/**
 * The local driver's files below `base` (the agent's data directory, or for the module cache
 * alone the directory it installs into). The agent is the only writer of `base` itself, but
 * a run directory holds what the configuration unpacked: every name below `base` is resolved
 * one component at a time without following a link (SafeDir), so a link the archive planted
 * (`.terraform`, a parent of a file the agent writes) gets the run refused instead of a write
 * landing outside. Paths may be given through `base` as named or as its real path (the
 * working directory is reached through the archive's own links, checked to stay inside).
 */
export function localRunFiles(base: string): RunFiles {
  const open = (path: string): { root: SafeDir; rel: string } => {
    // The operator's path may itself pass through links; below it, nothing may.
    const real = realpathSync(base);
    const rel = below(path === real || path.startsWith(`${real}/`) ? real : base, path);
    return { root: SafeDir.open(real), rel };
  };
  const inParent = <T>(path: string, create: boolean, fn: (parent: SafeDir, name: string) => T): T => {
    const { root, rel } = open(path);
    const cut = rel.lastIndexOf("/");
    let parent = root;
    try {
      if (cut >= 0) {
        parent = root.dir(rel.slice(0, cut), create ? { create: "missing" } : {});
        root.close();
      }
      return fn(parent, rel.slice(cut + 1));
    } finally {
      parent.close();
      root.close();
    }
  };
  return {
    prepare(runDir, configDir) {
      rmSync(runDir, { recursive: true, force: true });
      const { root, rel } = open(configDir);
      try {
        root.dir(rel, { create: "missing" }).close();
      } finally {
        root.close();
      }
    },
    withDir: (dir, fn) => fn(dir),
    read(path) {
      const { root, rel } = open(path);
      try {
        const data = root.read(rel);
        if (data === undefined) throw Object.assign(new Error(`${path} does not exist`), { code: "ENOENT" });
        return data;
      } finally {
        root.close();
      }
    },
    write: (path, data) => planted(() => inParent(path, true, (d, name) => writePrivateFile(d.at(name), name, data))),
    link: (path, target) => planted(() => inParent(path, true, (dir, name) => symlinkSync(target, dir.at(name)))),
    discard: (runDir) => rmSync(runDir, { recursive: true, force: true }),
  };
}

/**
 * Writes a file only the agent's user can read, never following a link: a configuration that
 * planted a link under this name gets the run refused instead of the write landing elsewhere.
 */
function writePrivateFile(at: string, name: string, data: string | Buffer): void {
  let fd: number;
  try {
    fd = openSync(at, constants.O_WRONLY | constants.O_CREAT | constants.O_TRUNC | constants.O_NOFOLLOW, 0o600);
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code === "ELOOP") {
      const message = `the configuration holds a link named ${name}, where the agent writes its own file; remove it`;
      throw new DroverError("invalid_archive", message);
    }
    throw err;
  }
  try {
    writeFileSync(fd, data);
  } finally {
    closeSync(fd);
  }
}

/** A link (or non-directory) planted where the agent writes: the configuration's doing, told as such. */
function planted<T>(fn: () => T): T {
  try {
    return fn();
  } catch (err) {
    if (!(err instanceof UnsafePathError)) throw err;
    throw new DroverError("invalid_archive", `the configuration cannot be used: ${err.message}`, { cause: err });
  }
}
