import { readdirSync, readFileSync } from "node:fs";
import { join } from "node:path";

/** The parts of a V8 `.cpuprofile` (written by `node --cpu-prof`) this summary reads. */
interface CpuProfile {
  nodes: Array<{ id: number; callFrame: { functionName: string; url: string; lineNumber: number }; children?: number[] }>;
  samples: number[];
  timeDeltas: number[];
}

/** Where a sample's time went, by the package or source file its function belongs to. */
function place(url: string, fn: string): string {
  if (fn === "(garbage collector)" || fn === "(program)" || fn === "(idle)") return fn;
  if (url === "") return "(native / V8 builtins)";
  if (url.startsWith("node:")) return url;
  const nm = url.lastIndexOf("/node_modules/");
  if (nm >= 0) {
    const rest = url.slice(nm + "/node_modules/".length).split("/");
    return rest[0]!.startsWith("@") ? `${rest[0]}/${rest[1]}` : rest[0]!;
  }
  const pkg = url.match(/\/packages\/([^/]+)\/dist\/src\/(.+)\.js$/);
  return pkg ? `@drover/${pkg[1]} ${pkg[2]}` : url;
}

export interface ProfileSummary {
  /** Milliseconds of CPU the profile sampled, idle excluded. */
  busyMs: number;
  /** Self time by package or Drover source file, largest first, with its share of busy time. */
  byPlace: Array<{ place: string; ms: number; share: number }>;
  /** Self time by function, largest first. */
  byFunction: Array<{ fn: string; ms: number; share: number }>;
}

/** Self time of every profile in `dir` (a `--cpu-prof-dir`), summed, by place and by function. */
export function summarizeProfiles(dir: string, top = 12): ProfileSummary {
  const places = new Map<string, number>();
  const fns = new Map<string, number>();
  for (const file of readdirSync(dir).filter((f) => f.endsWith(".cpuprofile"))) {
    const profile = JSON.parse(readFileSync(join(dir, file), "utf8")) as CpuProfile;
    const byId = new Map(profile.nodes.map((n) => [n.id, n]));
    profile.samples.forEach((id, i) => {
      const node = byId.get(id);
      if (!node) return;
      const { functionName, url, lineNumber } = node.callFrame;
      if (functionName === "(idle)") return;
      const us = profile.timeDeltas[i] ?? 0;
      const where = place(url, functionName);
      places.set(where, (places.get(where) ?? 0) + us);
      const fn = `${functionName || "(anonymous)"} ${where === url ? url.split("/").slice(-2).join("/") : where}:${lineNumber + 1}`;
      fns.set(fn, (fns.get(fn) ?? 0) + us);
    });
  }
  const busy = [...places.values()].reduce((a, b) => a + b, 0);
  const rank = (m: Map<string, number>) => [...m].sort((a, b) => b[1] - a[1]).slice(0, top);
  return {
    busyMs: busy / 1000,
    byPlace: rank(places).map(([p, us]) => ({ place: p, ms: us / 1000, share: us / busy })),
    byFunction: rank(fns).map(([fn, us]) => ({ fn, ms: us / 1000, share: us / busy })),
  };
}

/** One line for a report note: the top places with their share of the process's busy time. */
export function describeProfile(s: ProfileSummary, count = 8): string {
  return s.byPlace
    .slice(0, count)
    .map((p) => `${p.place} ${(p.share * 100).toFixed(0)}%`)
    .join(", ");
}
