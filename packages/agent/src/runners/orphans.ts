import { spawn } from "node:child_process";
import { createHash } from "node:crypto";
import { appendFileSync, existsSync, mkdirSync, readdirSync, readFileSync, rmdirSync, rmSync } from "node:fs";
import { join, resolve } from "node:path";
import type { Logger } from "pino";
import { pause } from "../session/backoff.js";
import type { RunUser } from "./run-user.js";

/**
 * Every process a job starts carries this variable (inherited by terraform, its providers and
 * provisioners): `<agent tag>:<job>-<attempt>`. The agent tag is derived from the data
 * directory, so agents sharing a host never end each other's processes.
 */
export const processTagVariable = "DROVER_AGENT_PROCESS_TAG";

const recordDir = ".process-groups";

/** The tag of the agent that owns `dataDir`. */
export function agentTag(dataDir: string): string {
  return createHash("sha256").update(resolve(dataDir)).digest("hex").slice(0, 16);
}

/**
 * The process groups of one job, recorded in the agent's data directory while the job runs,
 * so that an agent restarted after a crash knows which jobs left processes behind.
 */
export class ProcessGroupRecord {
  private readonly dir: string;
  private readonly file: string;

  constructor(dataDir: string, jobKey: string) {
    this.dir = join(dataDir, recordDir);
    this.file = join(this.dir, jobKey);
  }

  add(pgid: number): void {
    // Another job's remove() may take the (empty) directory away at any moment: try twice.
    for (let i = 0; ; i++) {
      mkdirSync(this.dir, { recursive: true });
      try {
        appendFileSync(this.file, `${pgid}\n`);
        return;
      } catch (err) {
        if (i > 0 || (err as NodeJS.ErrnoException).code !== "ENOENT") throw err;
      }
    }
  }

  /** The job is over and none of its processes live on: forget it (and the directory once empty). */
  remove(): void {
    rmSync(this.file, { force: true });
    try {
      rmdirSync(this.dir);
    } catch {
      // another job's record is still there
    }
  }
}

/** A live (not zombie) process and what it says about itself. */
interface ProcInfo {
  pid: number;
  environ: string;
}

/** The fields of /proc/<pid>/stat after the command name (which is in parentheses and may contain spaces). */
function statFields(pid: number | string): string[] {
  const stat = readFileSync(`/proc/${pid}/stat`, "utf8");
  return stat.slice(stat.lastIndexOf(")") + 2).split(" ");
}

/**
 * When process `pid` started, in clock ticks since boot (/proc/<pid>/stat field 22); undefined
 * where it cannot be read. A process started from it or after it never has an earlier value.
 */
export function processStartTicks(pid: number): number | undefined {
  try {
    const ticks = Number(statFields(pid)[19]);
    return Number.isSafeInteger(ticks) ? ticks : undefined;
  } catch {
    return undefined;
  }
}

/**
 * Live processes of this user, from /proc; empty where there is no /proc. With `startedFrom`
 * (clock ticks since boot), only processes started then or later: reading every process's
 * environment is the slow part on a busy host, and older ones cannot be a later job's.
 */
function listProcesses(startedFrom?: number): ProcInfo[] {
  if (!existsSync("/proc/self/stat")) return [];
  const out: ProcInfo[] = [];
  for (const name of readdirSync("/proc")) {
    if (!/^\d+$/.test(name)) continue;
    const pid = Number(name);
    if (pid === process.pid) continue;
    try {
      const fields = statFields(name);
      if (fields[0] === "Z" || fields[0] === "X") continue;
      if (startedFrom !== undefined && Number(fields[19]) < startedFrom) continue;
      out.push({ pid, environ: readFileSync(`/proc/${name}/environ`, "latin1") });
    } catch {
      // gone, or not ours to read
    }
  }
  return out;
}

/** Whether the process carries `tag`; a tag ending in ":" matches every job of that agent. */
function carries(p: ProcInfo, tag: string): boolean {
  const entry = `${processTagVariable}=${tag}`;
  return p.environ.split("\0").some((kv) => (tag.endsWith(":") ? kv.startsWith(entry) : kv === entry));
}

/**
 * Kills every live process that carries `tag` (and, where there is no /proc, the recorded
 * process groups), then waits until they are gone or `timeoutMs` passes. Resolves with the
 * number of processes killed. `startedFrom`: the start (processStartTicks) of the first process
 * that carried the tag; older processes are not looked at.
 */
export async function killTagged(
  tag: string,
  groups: readonly number[],
  timeoutMs: number,
  startedFrom?: number,
): Promise<number> {
  const tagged = (p: ProcInfo): boolean => p.environ.includes(`${processTagVariable}=`) && carries(p, tag);
  const targets = listProcesses(startedFrom).filter(tagged);
  if (!existsSync("/proc/self/stat")) {
    for (const g of groups) {
      try {
        process.kill(-g, "SIGKILL");
      } catch {
        // already gone
      }
    }
    return 0;
  }
  // Listing reads every process's environment (slow on a busy host): none found, none to wait for.
  if (targets.length === 0) return 0;
  for (const p of targets) {
    try {
      process.kill(p.pid, "SIGKILL");
    } catch {
      // already gone
    }
  }
  const deadline = Date.now() + timeoutMs;
  while (Date.now() < deadline && listProcesses(startedFrom).some(tagged)) await pause(50);
  return targets.length;
}

/** Whether a /proc/<pid>/status says the process is live and has `uid` as its real, effective or saved uid. */
function ofUser(status: string, uid: number): boolean {
  const state = /^State:\s+(\S)/m.exec(status)?.[1];
  if (state === undefined || state === "Z" || state === "X") return false;
  const ids = /^Uid:\s+(\d+)\s+(\d+)\s+(\d+)/m.exec(status);
  return ids !== null && ids.slice(1, 4).some((id) => Number(id) === uid);
}

/**
 * Live processes with `uid` among their real, effective and saved uids. The status file, not the
 * owner of /proc/<pid>: a process that makes itself non-dumpable shows as root's there.
 */
function processesOf(uid: number): number[] {
  if (!existsSync("/proc/self/status")) return [];
  const out: number[] = [];
  for (const name of readdirSync("/proc")) {
    if (!/^\d+$/.test(name)) continue;
    try {
      if (ofUser(readFileSync(`/proc/${name}/status`, "latin1"), uid)) out.push(Number(name));
    } catch {
      // gone
    }
  }
  return out;
}

/**
 * kill(-1, SIGKILL) from a process that is `user`: the kernel signals every process that user may
 * signal in one pass over the process table, so none escapes by forking while it is listed.
 * The helper runs only once setuid to `user` succeeded (Node never execs it otherwise).
 */
function killAllAs(user: RunUser): Promise<void> {
  // kill(-1) as root would end every process on the host.
  if (!(user.uid > 0)) throw new Error(`refusing to kill every process of uid ${user.uid}`);
  return new Promise((resolve) => {
    const options = { uid: user.uid, gid: user.gid, env: {}, cwd: "/", stdio: "ignore" } as const;
    const helper = spawn("/bin/sh", ["-c", "kill -s KILL -- -1"], options);
    helper.once("error", () => resolve());
    helper.once("exit", () => resolve());
  });
}

/**
 * Kills every process of `user` (a run user no one else has), then waits until they are gone or
 * `timeoutMs` passes. Resolves with the number of processes found. A process cannot leave its
 * uid, whatever it does to its environment, session or parent; so unlike killTagged nothing of
 * a job escapes this.
 */
export async function killUser(user: RunUser, timeoutMs: number): Promise<number> {
  const found = processesOf(user.uid);
  if (found.length === 0) return 0;
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    await killAllAs(user);
    // Also from here: the helper may have failed to start (no /bin/sh, the process table full).
    for (const pid of processesOf(user.uid)) {
      try {
        process.kill(pid, "SIGKILL");
      } catch {
        // already gone
      }
    }
    if (processesOf(user.uid).length === 0 || Date.now() >= deadline) return found.length;
    await pause(50);
  }
}

/**
 * At start, before taking work: ends the processes that jobs of an earlier run of this agent
 * (same data directory) left behind when it died, and forgets their records. With run users
 * (DROVER_AGENT_RUN_AS_USER), every process of theirs is one: no job of this agent runs yet.
 */
export async function reapOrphans(
  dataDir: string,
  log: Logger,
  runUsers: readonly RunUser[] = [],
  timeoutMs = 10_000,
): Promise<void> {
  const dir = join(dataDir, recordDir);
  const jobs = existsSync(dir) ? readdirSync(dir) : [];
  const groups: number[] = [];
  for (const job of jobs) {
    for (const line of readFileSync(join(dir, job), "utf8").split("\n"))
      if (/^\d+$/.test(line)) groups.push(Number(line));
  }
  let killed = await killTagged(`${agentTag(dataDir)}:`, groups, timeoutMs);
  for (const user of runUsers) killed += await killUser(user, timeoutMs);
  if (killed > 0 || jobs.length > 0)
    log.warn({ jobs, killed }, "ended processes left behind by jobs of this agent's previous run");
  rmSync(dir, { recursive: true, force: true });
}
