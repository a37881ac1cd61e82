import { DroverError } from "@drover/protocol";
import { closeSync, openSync, readFileSync, unlinkSync, writeSync } from "node:fs";
import { hostname } from "node:os";

/*
 * One server per SQLite file. SQLite itself would let a second process in (WAL allows several
 * writers taking turns), but two servers would each run a sweeper and hand out jobs from the
 * same queue while their in-process wake-ups never reach each other. `<db>.lock` is created
 * exclusively and names its owner: pid, the process's start time (so a recycled pid is not
 * mistaken for the owner) and host. A lock whose owner is gone — a server killed with -9, a
 * container restarted as pid 1 — is stale and taken over.
 */

interface Owner {
  pid: number;
  started: string;
  host: string;
}

/** The kernel's start time of a process (Linux /proc), or "" where that is not available. */
function processStartTime(pid: number): string {
  try {
    const stat = readFileSync(`/proc/${pid}/stat`, "utf8");
    // Field 22 (starttime), counted after the parenthesised command name, which may hold spaces.
    const fields = stat.slice(stat.lastIndexOf(")") + 2).split(" ");
    return fields[19] ?? "";
  } catch {
    return "";
  }
}

function alive(owner: Owner): boolean {
  if (owner.host !== hostname()) return true; // Another machine's process: cannot tell, assume alive.
  if (owner.pid === process.pid) return false; // An earlier life of this very process id.
  try {
    process.kill(owner.pid, 0);
  } catch (err) {
    return (err as NodeJS.ErrnoException).code === "EPERM";
  }
  const started = processStartTime(owner.pid);
  return started === "" || owner.started === "" || started === owner.started;
}

function readOwner(path: string): Owner | undefined {
  try {
    const parsed = JSON.parse(readFileSync(path, "utf8")) as Partial<Owner>;
    if (typeof parsed.pid !== "number") return undefined;
    return { pid: parsed.pid, started: String(parsed.started ?? ""), host: String(parsed.host ?? "") };
  } catch {
    return undefined;
  }
}

/** A held lock; `release` removes the file if it is still ours. */
export interface SqliteLock {
  path: string;
  release(): void;
}

/**
 * Takes `<dbPath>.lock` or throws a DroverError naming the server that holds it. Errors of the
 * file system (read-only, full) are thrown as they are, for the caller to describe.
 */
export function lockDatabaseFile(dbPath: string): SqliteLock {
  const path = `${dbPath}.lock`;
  const me: Owner = { pid: process.pid, started: processStartTime(process.pid), host: hostname() };
  for (let attempt = 0; ; attempt++) {
    let fd: number;
    try {
      fd = openSync(path, "wx", 0o644);
    } catch (err) {
      if ((err as NodeJS.ErrnoException).code !== "EEXIST") throw err;
      const owner = readOwner(path);
      // An unreadable lock file is a crash between create and write: stale, unless it keeps
      // coming back (someone else is creating it right now).
      if (owner && alive(owner)) {
        throw new DroverError(
          "conflict",
          `another Drover server (pid ${owner.pid} on ${owner.host}) is using the SQLite database ${dbPath}; stop it, or give this server its own --data-dir (several servers need PostgreSQL)`,
        );
      }
      if (attempt >= 2)
        throw new DroverError("conflict", `cannot take the lock ${path}: another process keeps recreating it`);
      try {
        unlinkSync(path);
      } catch (e) {
        if ((e as NodeJS.ErrnoException).code !== "ENOENT") throw e;
      }
      continue;
    }
    try {
      writeSync(fd, JSON.stringify(me));
    } catch (err) {
      // A full disk: leave no empty lock behind.
      closeSync(fd);
      try {
        unlinkSync(path);
      } catch {
        // The next start treats an unreadable lock as stale anyway.
      }
      throw err;
    }
    closeSync(fd);
    return {
      path,
      release() {
        const owner = readOwner(path);
        if (owner && owner.pid === me.pid && owner.started === me.started && owner.host === me.host) {
          try {
            unlinkSync(path);
          } catch {
            // Already gone, or the directory turned read-only: the next start sees a stale lock.
          }
        }
      },
    };
  }
}
