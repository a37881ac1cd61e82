import { readdirSync, readFileSync } from "node:fs";
import { join } from "node:path";

/** The parts of a V8 `.cpuprofile` (written by `node --cpu-prof`) this summary reads. */
interface CpuProfile {
  nodes: Array<{
    id: number;
    callFrame: { functionName: string; url: string; lineNumber: number };
    children?: number[];
  }>;
  samples: number[];
  timeDeltas: number[];
  /** Microseconds on the machine's monotonic clock (the clock of `process.hrtime`). */
  startTime: number;
}

/** A stretch of the machine's monotonic clock in microseconds, as `monotonicUs()` reads it. */
export interface ProfileWindow {
  fromUs: number;
  toUs: number;
}

/**
 * Now on the clock V8 stamps profile samples with (CLOCK_MONOTONIC, shared by every process on
 * the machine), so a bench can cut another process's profile to the moments it measured.
 */
export const monotonicUs = (): number => Number(process.hrtime.bigint() / 1000n);

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
  /** Every place that had a sample (e.g. `pg` tells a PostgreSQL server's profile from a SQLite one's). */
  places: string[];
}

/**
 * Self time of the profiles in `dir` (a `--cpu-prof-dir`; all of them unless `files` names
 * some), summed, by place and by function; with `window`, only the samples taken in it.
 */
export function summarizeProfiles(dir: string, top = 12, files?: string[], window?: ProfileWindow): ProfileSummary {
  const places = new Map<string, number>();
  const fns = new Map<string, number>();
  for (const file of files ?? readdirSync(dir).filter((f) => f.endsWith(".cpuprofile"))) {
    const profile = JSON.parse(readFileSync(join(dir, file), "utf8")) as CpuProfile;
    const byId = new Map(profile.nodes.map((n) => [n.id, n]));
    let at = profile.startTime;
    profile.samples.forEach((id, i) => {
      at += profile.timeDeltas[i] ?? 0;
      if (window && (at < window.fromUs || at > window.toUs)) return;
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
    places: [...places.keys()],
  };
}

/** One line for a report note: the top places with their share of the process's busy time. */
export function describeProfile(s: ProfileSummary, count = 8): string {
  return s.byPlace
    .slice(0, count)
    .map((p) => `${p.place} ${(p.share * 100).toFixed(0)}%`)
    .join(", ");
}

/** The top functions with their share of busy time, for a report note. */
export function describeFunctions(s: ProfileSummary, count = 5): string {
  return s.byFunction
    .slice(0, count)
    .map((f) => `${f.fn} ${(f.share * 100).toFixed(0)}%`)
    .join(", ");
}
