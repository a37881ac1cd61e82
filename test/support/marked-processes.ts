import { existsSync, readdirSync, readFileSync } from "node:fs";
import { pollWait } from "./poll.js";

/** A live process found by its marker. */
export interface MarkedProcess {
  pid: number;
  cmdline: string;
}

/**
 * Live (not zombie) processes whose environment holds `name=value` or whose command line
 * contains `value`: the processes a test started under that marker, however deep in the tree
 * and whether or not they left their process group. Linux only (/proc).
 */
export function markedProcesses(
  value: string,
  options: { name?: string; exclude?: readonly number[] } = {},
): MarkedProcess[] {
  if (!existsSync("/proc/self/environ")) throw new Error("markedProcesses needs /proc");
  const entry = options.name ? `${options.name}=${value}` : undefined;
  const out: MarkedProcess[] = [];
  for (const name of readdirSync("/proc")) {
    if (!/^\d+$/.test(name)) continue;
    const pid = Number(name);
    if (pid === process.pid || options.exclude?.includes(pid)) continue;
    try {
      const stat = readFileSync(`/proc/${name}/stat`, "utf8");
      const state = stat.slice(stat.lastIndexOf(")") + 2).split(" ")[0];
      if (state === "Z" || state === "X") continue;
      const cmdline = readFileSync(`/proc/${name}/cmdline`, "utf8").split("\0").join(" ").trim();
      const environ = entry ? readFileSync(`/proc/${name}/environ`, "utf8").split("\0") : [];
      if ((entry && environ.includes(entry)) || (!entry && cmdline.includes(value))) out.push({ pid, cmdline });
    } catch {
      // gone, or not ours
    }
  }
  return out;
}

/** Waits until `check` returns true, polling; fails with `what` after `timeoutMs`. */
export async function until(what: string, check: () => boolean | Promise<boolean>, timeoutMs = 30_000): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  for (let attempt = 0; ; attempt++) {
    if (await check()) return;
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}`);
    await pollWait(attempt);
  }
}
