import { lchownSync, lstatSync, readdirSync } from "node:fs";
import { join } from "node:path";
import type { Runner } from "./runner.js";

/** The user (and group) a local agent running as root starts terraform and hooks as. */
export interface RunUser {
  uid: number;
  gid: number;
}

/**
 * Reads DROVER_AGENT_RUN_AS_USER (`uid` or `uid:gid`, numeric). Returns why it is unusable, or
 * the ids. Only root can start processes as another user, and running them as root would
 * defeat the purpose.
 */
export function parseRunUser(raw: string, agentUid: number | undefined): RunUser | string {
  const m = /^(\d+)(?::(\d+))?$/.exec(raw.trim());
  if (!m) return `DROVER_AGENT_RUN_AS_USER must be a numeric uid or uid:gid, got ${JSON.stringify(raw)}`;
  const uid = Number(m[1]);
  const gid = Number(m[2] ?? m[1]);
  if (uid === 0 || gid === 0) return "DROVER_AGENT_RUN_AS_USER must not be root (uid or gid 0): runs would see everything the agent holds";
  if (agentUid !== 0) return "DROVER_AGENT_RUN_AS_USER needs the agent to run as root (it starts runs as that user); run the agent as root or unset it";
  return { uid, gid };
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
    engine: (engine, version, cacheDir) => base.engine(engine, version, cacheDir),
    start: (command, args, options) => base.start(command, args, { ...options, uid: user.uid, gid: user.gid }),
    capture: (command, args, options) => base.capture(command, args, { ...options, uid: user.uid, gid: user.gid }),
    files: base.files,
  };
}
