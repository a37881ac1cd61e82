import { randomInt } from "node:crypto";
import { readdirSync, readFileSync } from "node:fs";

/**
 * The first uid of a range no one else on the host uses, for DROVER_AGENT_RUN_AS_USER: the agent
 * kills every process of its run uids at each job end, so tests running at the same time (and
 * the host's own accounts, `nobody` included) must never share one. Room for 8 job slots.
 */
export function testRunUid(): number {
  return 1_500_000_000 + randomInt(0, 50_000_000) * 8;
}

/** Pids of the live (not zombie) processes whose real uid is `uid`. */
export function processesOfUid(uid: number): number[] {
  const out: number[] = [];
  for (const name of readdirSync("/proc")) {
    if (!/^\d+$/.test(name)) continue;
    try {
      const status = readFileSync(`/proc/${name}/status`, "latin1");
      const state = /^State:\s+(\S)/m.exec(status)?.[1];
      const real = /^Uid:\s+(\d+)/m.exec(status)?.[1];
      if (state !== "Z" && state !== "X" && Number(real) === uid) out.push(Number(name));
    } catch {
      // gone
    }
  }
  return out;
}

/** Kills what a test's run uids left (one pid at a time: never kill(-1) from a test running as root). */
export function endProcessesOfUids(uids: readonly number[]): void {
  for (const uid of uids) {
    if (uid <= 0) continue;
    for (const pid of processesOfUid(uid)) {
      try {
        process.kill(pid, "SIGKILL");
      } catch {
        // gone
      }
    }
  }
}
