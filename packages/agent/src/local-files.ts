import { DroverError } from "@drover/protocol";
import { closeSync, constants, mkdirSync, openSync, readFileSync, rmSync, symlinkSync, writeFileSync } from "node:fs";
import { dirname } from "node:path";
import type { RunFiles } from "./runner.js";

/**
 * The local driver's files: the agent is the only writer of its data directory. Jobs and the
 * module cache (installing a run's modules) reach a run directory through these.
 */
export const localFiles: RunFiles = {
  prepare(runDir, configDir) {
    rmSync(runDir, { recursive: true, force: true });
    mkdirSync(configDir, { recursive: true });
  },
  withDir: (dir, fn) => fn(dir),
  read: (path) => readFileSync(path),
  write: (path, data) => writePrivateFile(path, data),
  link(path, target) {
    mkdirSync(dirname(path), { recursive: true });
    symlinkSync(target, path);
  },
  discard: (runDir) => rmSync(runDir, { recursive: true, force: true }),
};

/**
 * Writes a file only the agent's user can read, never following a link: a configuration that
 * planted a link under this name gets the run refused instead of the write landing elsewhere.
 */
export function writePrivateFile(path: string, data: string | Buffer): void {
  let fd: number;
  try {
    fd = openSync(path, constants.O_WRONLY | constants.O_CREAT | constants.O_TRUNC | constants.O_NOFOLLOW, 0o600);
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code === "ELOOP") {
      throw new DroverError("invalid_archive", `the configuration holds a link named ${path.split("/").pop() ?? path}, where the agent writes its own file; remove it`);
    }
    throw err;
  }
  try {
    writeFileSync(fd, data);
  } finally {
    closeSync(fd);
  }
}
