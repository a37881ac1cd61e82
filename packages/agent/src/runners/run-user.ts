import { lchownSync, lstatSync, readdirSync } from "node:fs";
import { join } from "node:path";
import type { Runner } from "./runner.js";

/** The user (and group) a local agent running as root starts terraform and hooks as. */
export interface RunUser {
  uid: number;
  gid: number;
}

/** The highest uid a slot may get: Node starts processes only as a uid that fits an int32. */
const maxUid = 2 ** 31 - 1;
/** The conventional `nobody`: daemons share it, and every process of a run uid is killed at each job end. */
const nobody = 65534;

/**
 * Reads DROVER_AGENT_RUN_AS_USER (`uid` or `uid:gid`, numeric) for an agent running `slots`
 * jobs at once. Returns why it is unusable, or one user per job slot: slot i runs as uid + i,
 * with the given gid, or gid uid + i when none is given. A uid per slot is what keeps a run from
 * reading another run's `/proc/<pid>/environ` and what finds every process it left behind (a run
 * cannot change its uid), so the whole range must belong to this agent alone.
 * Only root can start processes as another user, and running them as root would defeat the purpose.
 */
export function parseRunUsers(raw: string, agentUid: number | undefined, slots: number): RunUser[] | string {
  const m = /^(\d+)(?::(\d+))?$/.exec(raw.trim());
  if (!m) return `DROVER_AGENT_RUN_AS_USER must be a numeric uid or uid:gid, got ${JSON.stringify(raw)}`;
  const uid = Number(m[1]);
  const gid = m[2] === undefined ? undefined : Number(m[2]);
  if (uid === 0 || gid === 0)
    return "DROVER_AGENT_RUN_AS_USER must not be root (uid or gid 0): runs would see everything the agent holds";
  const last = uid + slots - 1;
  if (last > maxUid || (gid ?? 0) > maxUid) {
    return `DROVER_AGENT_RUN_AS_USER: uids ${uid}-${last} (one per job slot) go past ${maxUid}`;
  }
  if (uid <= nobody && nobody <= last) {
    return (
      `DROVER_AGENT_RUN_AS_USER: the run uids ${uid}-${last} include ${nobody} (nobody), which other programs share; ` +
      "every process of a run uid is killed when a job ends, so choose a range no one else uses"
    );
  }
  if (agentUid !== 0)
    return "DROVER_AGENT_RUN_AS_USER needs the agent to run as root (it starts runs as that user); run the agent as root or unset it";
  return Array.from({ length: slots }, (_, i) => ({ uid: uid + i, gid: gid ?? uid + i }));
}

/** Gives a tree to the run user (links themselves, never what they point to). */
export function chownTree(path: string, user: RunUser): void {
  lchownSync(path, user.uid, user.gid);
  if (!lstatSync(path).isDirectory()) return;
  for (const name of readdirSync(path)) chownTree(join(path, name), user);
}

/** A runner whose steps run as `user`: they cannot read the agent's environment, memory or token file. */
export function runnerAs(base: Runner, user: RunUser): Runner {
  return {
    engine: (engine, version, cacheDir, signal) => base.engine(engine, version, cacheDir, signal),
    start: (command, args, options) => base.start(command, args, { ...options, uid: user.uid, gid: user.gid }),
    capture: (command, args, options) => base.capture(command, args, { ...options, uid: user.uid, gid: user.gid }),
    files: base.files,
  };
}
