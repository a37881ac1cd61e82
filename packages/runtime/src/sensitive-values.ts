import type { JobVariable } from "@drover/protocol";

/** Quoted strings shorter than this inside a sensitive HCL value are not masked on their own. */
const minPartLength = 6;

/**
 * What to mask of a sensitive variable: its value, and for an HCL value also each quoted string
 * in it, since terraform shows a map or an object it evaluated element by element (`token =
 * "…"`), never as the text that was set.
 */
export function sensitiveValues(v: Pick<JobVariable, "value" | "hcl">): string[] {
  if (!v.hcl) return [v.value];
  const parts = [...v.value.matchAll(/"((?:[^"\\]|\\.)*)"/g)].map((m) => unescapeHcl(m[1] ?? ""));
  return [v.value, ...parts.filter((p) => p.length >= minPartLength)];
}

function unescapeHcl(s: string): string {
  return s
    .replace(/\\u([0-9a-fA-F]{4})|\\U([0-9a-fA-F]{8})|\\(.)/g, (_m, u4?: string, u8?: string, c?: string) => {
      const hex = u4 ?? u8;
      if (hex !== undefined) return String.fromCodePoint(parseInt(hex, 16));
      return ({ n: "\n", r: "\r", t: "\t" } as Record<string, string>)[c ?? ""] ?? c ?? "";
    })
    .replace(/\$\$\{/g, "${")
    .replace(/%%\{/g, "%{");
}
