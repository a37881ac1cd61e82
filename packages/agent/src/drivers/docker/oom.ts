import { existsSync, readFileSync } from "node:fs";

/**
 * The file counting the OOM kills of the memory cgroup process `pid` is in, as this host sees
 * it: `memory.oom_control` (cgroup v1) or `memory.events` (v2). Undefined when the process or
 * its cgroups are not visible here (an agent in a container of its own).
 */
export function memoryEventsFile(pid: number, proc = "/proc", cgroupRoot = "/sys/fs/cgroup"): string | undefined {
  if (!pid) return undefined;
  let lines: string[];
  try {
    lines = readFileSync(`${proc}/${pid}/cgroup`, "utf8").split("\n");
  } catch {
    return undefined;
  }
  const v1 = lines.find((l) => /^\d+:([^:]*,)?memory(,[^:]*)?:/.test(l));
  const candidates: string[] = [];
  if (v1) candidates.push(`${cgroupRoot}/memory${v1.slice(v1.lastIndexOf(":") + 1)}/memory.oom_control`);
  const v2 = lines.find((l) => l.startsWith("0::"));
  if (v2) candidates.push(`${cgroupRoot}${v2.slice(3)}/memory.events`);
  return candidates.find((f) => existsSync(f));
}

/**
 * The `oom_kill` count of a cgroup's memory events file (0 when it has none yet); undefined when
 * the file cannot be read, as when its cgroup went with a container that stopped.
 */
export function cgroupOomKills(file: string): number | undefined {
  try {
    const m = /^oom_kill (\d+)$/m.exec(readFileSync(file, "utf8"));
    return m ? Number(m[1]) : 0;
  } catch {
    return undefined;
  }
}
