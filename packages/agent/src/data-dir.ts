import { chmodSync, mkdirSync, readdirSync, rmSync } from "node:fs";
import { join } from "node:path";

/** Names this agent gives the directories it creates in its data dir: run dirs and kept plan dirs. */
const ownEntry = /^(job-[0-9a-z]{16}-\d+|kept-plan-run-[0-9a-z]{16})$/;

/**
 * Makes the data dir private (0700; 0711 when runs are another user, who must reach its own
 * run directory but not list the others) and removes what an earlier process of this agent left
 * there: after a crash a run directory still holds the variables file (with secrets) and the
 * plan. Only names this agent creates are removed, so a data dir pointed at a shared place
 * loses nothing else. Returns the names removed.
 */
export function prepareDataDir(dataDir: string, mode = 0o700): string[] {
  mkdirSync(dataDir, { recursive: true, mode });
  try {
    chmodSync(dataDir, mode);
  } catch (err) {
    // A volume's mount point owned by root (a Kubernetes emptyDir under fsGroup) cannot be
    // chmodded by the agent's user; each entry the agent makes there is private from its
    // umask (0077) all the same.
    if ((err as NodeJS.ErrnoException).code !== "EPERM") throw err;
  }
  const removed: string[] = [];
  for (const name of readdirSync(dataDir)) {
    if (!ownEntry.test(name)) continue;
    rmSync(join(dataDir, name), { recursive: true, force: true });
    removed.push(name);
  }
  return removed;
}
