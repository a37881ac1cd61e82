import { mkdir, readdir, rm } from "node:fs/promises";
import { join } from "node:path";

/*
 * Each git call of a fetch works in a directory of its own, made in the process's VCS work
 * directory and removed when the call ends. A process killed mid-fetch cannot remove its own; the
 * next process with the same work directory empties it when it starts, so a crashing server or
 * VCS agent does not fill its disk (or a Pod's emptyDir) with half-fetched repositories.
 */

/** The prefix of the directories a fetch makes; only such entries are removed at start. */
export const fetchDirPrefix = "drover-vcs-";

/** Creates the VCS work directory (owner only: fetches hold private code) and removes what an earlier process left in it. */
export async function prepareVcsWorkDir(dir: string): Promise<string[]> {
  await mkdir(dir, { recursive: true, mode: 0o700 });
  const left = (await readdir(dir)).filter((name) => name.startsWith(fetchDirPrefix));
  for (const name of left) await rm(join(dir, name), { recursive: true, force: true });
  return left;
}
