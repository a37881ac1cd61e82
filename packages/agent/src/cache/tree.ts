import { chmodSync, existsSync, lstatSync, mkdirSync, readdirSync, rmSync } from "node:fs";
import { dirname, join } from "node:path";

/** Removes a tree the cache made read-only. */
export function removeTree(path: string): void {
  const open = (p: string): void => {
    let st;
    try {
      st = lstatSync(p);
    } catch {
      return;
    }
    if (!st.isDirectory()) return;
    chmodSync(p, 0o700);
    for (const name of readdirSync(p)) open(join(p, name));
  };
  open(path);
  rmSync(path, { recursive: true, force: true });
}

/** Whether nothing in the tree has a write permission bit. */
export function readOnly(path: string): boolean {
  const st = lstatSync(path);
  // A link's own mode bits mean nothing (and cannot be changed); its target is in the tree or refused at extraction.
  if (st.isSymbolicLink()) return true;
  if ((st.mode & 0o222) !== 0) return false;
  return !st.isDirectory() || readdirSync(path).every((n) => readOnly(join(path, n)));
}

/** Takes every write permission bit off a tree (executables 0555, files 0444, directories 0555). */
export function makeReadOnly(path: string): void {
  const st = lstatSync(path);
  if (st.isSymbolicLink()) return;
  if (st.isDirectory()) {
    for (const n of readdirSync(path)) makeReadOnly(join(path, n));
    chmodSync(path, 0o555);
  } else chmodSync(path, st.mode & 0o111 ? 0o555 : 0o444);
}

/** mkdir -p whose new directories runs can read whatever the agent's umask (0077 for the local driver). */
export function mkdirReadable(path: string): void {
  if (existsSync(path)) return;
  mkdirReadable(dirname(path));
  try {
    mkdirSync(path);
  } catch (err) {
    // Another process sharing the cache made it meanwhile.
    if ((err as NodeJS.ErrnoException).code !== "EEXIST") throw err;
    return;
  }
  chmodSync(path, 0o755);
}
