import { z } from "zod";

/*
 * Engine versions: an exact version (`1.9.8`, `1.10.0-beta1`) or a constraint list
 * (`>= 1.6, < 2.0`, `~> 1.9`). Nothing else, because the agent turns exact versions into
 * a path in its binary cache.
 */

const exact = /^\d{1,4}\.\d{1,4}\.\d{1,4}(?:-[0-9A-Za-z]+(?:\.[0-9A-Za-z]+)*)?$/;
const constraint = /^(>=|<=|!=|~>|=|>|<)?\s*v?\d{1,4}(?:\.\d{1,4}){0,2}(?:-[0-9A-Za-z]+(?:\.[0-9A-Za-z]+)*)?$/;

/** Whether `v` is one exact version (usable as a cache directory name). */
export function isExactVersion(v: string): boolean {
  return exact.test(v);
}

/** Whether `v` is an exact version or a comma-separated list of constraints. */
export function isVersionConstraint(v: string): boolean {
  return v.split(",").every((part) => constraint.test(part.trim()));
}

export const engineVersionSchema = z
  .string()
  .max(60)
  .refine(
    (v) => isExactVersion(v) || isVersionConstraint(v),
    "must be a version such as 1.9.8 or a constraint such as '>= 1.6, < 2.0' or '~> 1.9'",
  );

type Parsed = [number, number, number, string];

function parse(v: string): Parsed | undefined {
  const m = /^v?(\d+)(?:\.(\d+))?(?:\.(\d+))?(?:-(.+))?$/.exec(v.trim());
  if (!m) return undefined;
  return [Number(m[1]), Number(m[2] ?? 0), Number(m[3] ?? 0), m[4] ?? ""];
}

function compare(a: Parsed, b: Parsed): number {
  for (let i = 0; i < 3; i++) if (a[i] !== b[i]) return (a[i] as number) - (b[i] as number);
  // A pre-release sorts before its release.
  if (a[3] === b[3]) return 0;
  if (a[3] === "") return 1;
  if (b[3] === "") return -1;
  return a[3] < b[3] ? -1 : 1;
}

/** Whether version `v` (as an engine reports it) satisfies an exact version or constraint list. */
export function versionSatisfies(v: string, wanted: string): boolean {
  const have = parse(v);
  if (!have) return false;
  return wanted.split(",").every((part) => {
    const m = /^(>=|<=|!=|~>|=|>|<)?\s*(.+)$/.exec(part.trim());
    const want = m ? parse(m[2] ?? "") : undefined;
    if (!m || !want) return false;
    const c = compare(have, want);
    switch (m[1] ?? "=") {
      case "=":
        return c === 0;
      case "!=":
        return c !== 0;
      case ">":
        return c > 0;
      case ">=":
        return c >= 0;
      case "<":
        return c < 0;
      case "<=":
        return c <= 0;
      default: {
        // ~> 1.9 allows 1.x ≥ 1.9; ~> 1.9.2 allows 1.9.x ≥ 1.9.2.
        const depth = (m[2] ?? "").replace(/-.*/, "").split(".").length;
        if (c < 0) return false;
        return depth >= 3 ? have[0] === want[0] && have[1] === want[1] : have[0] === want[0];
      }
    }
  });
}
