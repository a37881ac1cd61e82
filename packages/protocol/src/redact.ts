/** What replaces a sensitive value wherever it would be shown. */
export const redactionMark = "***";

/** Replaces every occurrence of each secret in `text`, longest secrets first. */
export function redactText(text: string, secrets: readonly string[]): string {
  let out = text;
  for (const s of [...secrets].filter((v) => v.length > 0).sort((a, b) => b.length - a.length)) out = out.split(s).join(redactionMark);
  return out;
}

/** Deep copy of a JSON value with every secret replaced inside every string. */
export function redactJson(value: unknown, secrets: readonly string[]): unknown {
  if (secrets.length === 0) return value;
  if (typeof value === "string") return redactText(value, secrets);
  if (Array.isArray(value)) return value.map((v) => redactJson(v, secrets));
  if (value !== null && typeof value === "object") {
    return Object.fromEntries(Object.entries(value).map(([k, v]) => [k, redactJson(v, secrets)]));
  }
  return value;
}
