/** What replaces a sensitive value wherever it would be shown. */
export const redactionMark = "***";

/** Shortest line of a multi-line secret that is redacted on its own (shorter ones, like `}`, are not secret). */
const minLineLength = 6;

/**
 * Every form in which terraform may print a secret: verbatim; escaped inside a quoted string
 * (JSON, and HCL's `\"`, `\\`, `\n`, `$${`); and, for a multi-line value such as a PEM key
 * (shown as a heredoc), each of its lines.
 */
export function secretForms(values: readonly string[]): string[] {
  const forms = new Set<string>();
  for (const v of values) {
    if (v === "") continue;
    forms.add(v);
    forms.add(JSON.stringify(v).slice(1, -1));
    forms.add(
      v
        .replace(/\\/g, "\\\\")
        .replace(/"/g, '\\"')
        .replace(/\n/g, "\\n")
        .replace(/\r/g, "\\r")
        .replace(/\t/g, "\\t")
        .replace(/\$\{/g, "$${")
        .replace(/%\{/g, "%%{"),
    );
    if (/[\r\n]/.test(v)) for (const line of v.split(/\r?\n/)) if (line.trim().length >= minLineLength) forms.add(line.trim());
  }
  forms.delete("");
  return [...forms];
}

/** Replaces every occurrence of each secret in `text`, longest secrets first. */
export function redactText(text: string, secrets: readonly string[]): string {
  let out = text;
  for (const s of [...secrets].filter((v) => v.length > 0).sort((a, b) => b.length - a.length)) out = out.split(s).join(redactionMark);
  return out;
}

/**
 * Deep copy of a JSON value with every secret replaced inside every string, and numbers whose
 * text is a secret (a sensitive `number` variable) replaced by the mark.
 */
export function redactJson(value: unknown, secrets: readonly string[]): unknown {
  if (secrets.length === 0) return value;
  if (typeof value === "string") return redactText(value, secrets);
  if (typeof value === "number" && secrets.includes(String(value))) return redactionMark;
  if (Array.isArray(value)) return value.map((v) => redactJson(v, secrets));
  if (value !== null && typeof value === "object") {
    return Object.fromEntries(Object.entries(value).map(([k, v]) => [k, redactJson(v, secrets)]));
  }
  return value;
}

/** Whether a JSON value holds any of the secrets anywhere (a string containing one, or a number equal to one). */
export function containsSecret(value: unknown, secrets: readonly string[]): boolean {
  if (secrets.length === 0) return false;
  return JSON.stringify(redactJson(value, secrets)) !== JSON.stringify(value);
}
