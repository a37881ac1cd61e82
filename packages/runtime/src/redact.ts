/** What replaces a sensitive value wherever it would be shown. */
export const redactionMark = "***";

/** Shortest line of a multi-line secret that is redacted on its own (shorter ones, like `}`, are not secret). */
const minLineLength = 6;

/** JSON string escaping, as JavaScript and terraform's `jsonencode` without HTML escaping print it. */
const jsonEscape = (v: string): string => JSON.stringify(v).slice(1, -1);

/**
 * Go's `encoding/json` escapes `&`, `<`, `>`, U+2028 and U+2029 as `\uXXXX` (HTML-safe): that is
 * how `jsonencode()` prints them (security review N7).
 */
const goJsonEscape = (v: string): string =>
  jsonEscape(v)
    .replace(/&/g, "\\u0026")
    .replace(/</g, "\\u003c")
    .replace(/>/g, "\\u003e")
    .replace(/\u2028/g, "\\u2028")
    .replace(/\u2029/g, "\\u2029");

/** How terraform shows a string inside a quoted HCL string: `\"`, `\\`, `\n`, `$${`, `%%{`. */
const hclEscape = (v: string): string =>
  v
    .replace(/\\/g, "\\\\")
    .replace(/"/g, '\\"')
    .replace(/\n/g, "\\n")
    .replace(/\r/g, "\\r")
    .replace(/\t/g, "\\t")
    .replace(/\$\{/g, "$${")
    .replace(/%\{/g, "%%{");

const escapes = [jsonEscape, goJsonEscape, hclEscape];

/**
 * Every form in which terraform may print a secret: verbatim; escaped once inside a quoted string
 * (JSON, Go's HTML-safe JSON, HCL); escaped twice (a `jsonencode()` result shown as an HCL
 * string, N11); and, for a multi-line value such as a PEM key (shown as a heredoc), each of its
 * lines. Each form is also matched where terraform wrapped it: see {@link SecretMatcher}.
 */
export function secretForms(values: readonly string[]): string[] {
  const forms = new Set<string>();
  for (const v of values) {
    if (v === "") continue;
    forms.add(v);
    for (const once of escapes.map((e) => e(v))) {
      forms.add(once);
      for (const e of escapes) forms.add(e(once));
    }
    if (!/[\r\n]/.test(v)) continue;
    for (const line of v.split(/\r?\n/)) if (line.trim().length >= minLineLength) forms.add(line.trim());
  }
  forms.delete("");
  return [...forms];
}

/*
 * Wrap-tolerant matching (security review N1). Terraform word-wraps diagnostics (78 columns when
 * not on a terminal, the terminal's width otherwise) by replacing a space with a newline and the
 * box's `│ ` prefix, and indents wrapped plan values: a secret with spaces comes out split at any
 * of its whitespace runs. So each form is matched as its words with, between two words, any run
 * of layout whitespace and box-drawing characters. Words are never split: terraform wraps only
 * at whitespace. Matching works on UTF-8 bytes (the agent's log is bytes, never decoded): a
 * regular expression over the bytes read as latin1, one character per byte.
 */

/** Layout whitespace a secret is split into words at; the same characters make up a gap. */
const wordBreak = /[\t\n\v\f\r \u00a0]+/;
/**
 * One unit of a gap, as latin1-read UTF-8: whitespace, NBSP, the box characters │ ╷ ╵, or a colour
 * (SGR) sequence, which terraform puts around the box when its output is coloured.
 */
const gapUnitSource = "(?:[\\t\\n\\v\\f\\r ]|\\xc2\\xa0|\\xe2\\x94\\x82|\\xe2\\x95[\\xb5\\xb7]|\\x1b\\[[0-9;]{0,16}m)";
/** Gap units allowed beyond the secret's own whitespace run: a line break, the box prefix and indentation. */
const gapSlack = 64;
/** The most bytes one gap unit takes (a colour sequence). */
const maxUnitBytes = 19;

interface Pattern {
  words: Buffer[];
  /** Most gap units between word i and word i + 1. */
  gaps: number[];
  /** The most bytes a match can span. */
  span: number;
}

const isAlnum = (b: number): boolean =>
  (b >= 0x30 && b <= 0x39) || (b >= 0x41 && b <= 0x5a) || (b >= 0x61 && b <= 0x7a);
/** One byte as a pattern that matches only it, in a regular expression over latin1-read bytes. */
const regexByte = (b: number): string =>
  isAlnum(b) ? String.fromCharCode(b) : `\\x${b.toString(16).padStart(2, "0")}`;

/** Length of the colour sequence `ESC [ digits-and-semicolons m` at `i`; 0 when none, -1 when `data` ends in one. */
function sgrAt(data: Buffer, i: number): number {
  if (i + 1 >= data.length) return -1;
  if (data[i + 1] !== 0x5b) return 0;
  for (let j = i + 2; j <= i + maxUnitBytes - 1; j++) {
    if (j >= data.length) return -1;
    const c = data[j]!;
    if (c === 0x6d) return j + 1 - i;
    if (!((c >= 0x30 && c <= 0x39) || c === 0x3b)) return 0;
  }
  return 0;
}

/** Length in bytes of the gap unit at `i`, 0 when none starts there, -1 when `data` ends inside one. */
function gapUnitAt(data: Buffer, i: number): number {
  const b = data[i];
  if (b === 0x09 || b === 0x0a || b === 0x0b || b === 0x0c || b === 0x0d || b === 0x20) return 1;
  if (b === 0x1b) return sgrAt(data, i);
  if (b === 0xc2) return i + 1 >= data.length ? -1 : data[i + 1] === 0xa0 ? 2 : 0;
  if (b !== 0xe2) return 0;
  if (i + 1 >= data.length) return -1;
  const b1 = data[i + 1];
  if (b1 !== 0x94 && b1 !== 0x95) return 0;
  if (i + 2 >= data.length) return -1;
  const b2 = data[i + 2];
  return (b1 === 0x94 && b2 === 0x82) || (b1 === 0x95 && (b2 === 0xb5 || b2 === 0xb7)) ? 3 : 0;
}

/** The secret forms of one job or workspace, compiled once for matching in text and in bytes. */
export class SecretMatcher {
  private readonly patterns: Pattern[];
  private readonly regex: RegExp | undefined;
  private readonly firstWords: Buffer[];
  private readonly firstWordTexts: string[];
  /** The most bytes a match can span: how far back from the end a match may have started. */
  readonly span: number;

  constructor(forms: readonly string[]) {
    const patterns: Pattern[] = [];
    for (const form of new Set(forms)) {
      const words = form.split(wordBreak).filter((w) => w !== "");
      if (words.length === 0) continue;
      const runs = (form.trim().match(new RegExp(wordBreak.source, "g")) ?? []).map((r) => r.length);
      const gaps = runs.map((r) => r + gapSlack);
      const bytes = words.map((w) => Buffer.from(w, "utf8"));
      const span = bytes.reduce((n, w) => n + w.length, 0) + gaps.reduce((n, g) => n + g * maxUnitBytes, 0);
      patterns.push({ words: bytes, gaps, span });
    }
    // Longest first: where several forms match at one place, the longest is replaced whole.
    patterns.sort((a, b) => b.span - a.span);
    this.patterns = patterns;
    this.span = Math.max(0, ...patterns.map((p) => p.span));
    const firstWords = new Set(patterns.map((p) => p.words[0]!.toString("latin1")));
    this.firstWords = [...firstWords].map((w) => Buffer.from(w, "latin1"));
    this.firstWordTexts = this.firstWords.map((w) => w.toString("utf8"));
    const wordSource = (w: Buffer) => [...w].map(regexByte).join("");
    const alternatives = patterns.map((p) =>
      p.words.map((w, i) => (i === 0 ? "" : `${gapUnitSource}{1,${p.gaps[i - 1]}}`) + wordSource(w)).join(""),
    );
    this.regex = alternatives.length > 0 ? new RegExp(alternatives.join("|"), "g") : undefined;
  }

  /** Whether there is nothing to hide. */
  get empty(): boolean {
    return this.patterns.length === 0;
  }

  /** Whether `data` holds the first word of some form: without one, no match starts in it. */
  mayMatchIn(data: Buffer): boolean {
    return this.firstWords.some((w) => data.includes(w));
  }

  /** The leftmost match in `text` (bytes read as latin1) at or after `from`, the longest form there. */
  find(text: string, from: number): { at: number; end: number } | undefined {
    if (!this.regex) return undefined;
    this.regex.lastIndex = from;
    const m = this.regex.exec(text);
    return m ? { at: m.index, end: m.index + m[0].length } : undefined;
  }

  /**
   * The first offset at or after `from` where `data` ends with the unfinished start of a match:
   * more bytes could complete it, so they cannot be passed on yet. `data.length` when none.
   */
  partialFrom(data: Buffer, from: number): number {
    for (let i = Math.max(from, data.length - this.span); i < data.length; i++) {
      for (const p of this.patterns) if (p.words[0]![0] === data[i] && this.unfinished(data, i, p, 0)) return i;
    }
    return data.length;
  }

  /** Whether `data` from `i` is, up to its end, a beginning of `p` from word `k` on, not all of it. */
  private unfinished(data: Buffer, i: number, p: Pattern, k: number): boolean {
    const word = p.words[k]!;
    const rest = data.length - i;
    if (rest <= word.length) {
      return data.compare(word, 0, rest, i, data.length) === 0 && (rest < word.length || k + 1 < p.words.length);
    }
    if (data.compare(word, 0, word.length, i, i + word.length) !== 0) return false;
    if (k + 1 === p.words.length) return false;
    // Every length of the gap is tried: the next word may itself begin with a box character.
    let at = i + word.length;
    for (let units = 0; units < p.gaps[k]!; units++) {
      const n = gapUnitAt(data, at);
      if (n < 0) return true;
      if (n === 0) return false;
      at += n;
      if (at === data.length || this.unfinished(data, at, p, k + 1)) return true;
    }
    return false;
  }

  /** `data` with every match replaced by the mark. */
  redactBytes(data: Buffer): Buffer {
    if (this.empty || !this.mayMatchIn(data)) return data;
    const text = data.toString("latin1");
    const parts: Buffer[] = [];
    let from = 0;
    for (let m = this.find(text, 0); m; m = this.find(text, from)) {
      parts.push(data.subarray(from, m.at), markBytes);
      from = m.end;
    }
    if (from === 0) return data;
    parts.push(data.subarray(from));
    return Buffer.concat(parts);
  }

  /** `text` with every match replaced by the mark. */
  redactText(text: string): string {
    if (this.empty || !this.firstWordTexts.some((w) => text.includes(w))) return text;
    return this.redactBytes(Buffer.from(text, "utf8")).toString("utf8");
  }
}

const markBytes = Buffer.from(redactionMark, "utf8");

/** Compiled matchers of the secret lists in use: callers pass one list many times (every string of a plan). */
const compiled = new WeakMap<readonly string[], SecretMatcher>();

function matcherFor(secrets: readonly string[]): SecretMatcher {
  let m = compiled.get(secrets);
  if (!m) compiled.set(secrets, (m = new SecretMatcher(secrets)));
  return m;
}

/** Replaces every occurrence of each secret in `text`, also where terraform wrapped it; longest secrets first. */
export function redactText(text: string, secrets: readonly string[]): string {
  return matcherFor(secrets).redactText(text);
}

/**
 * Deep copy of a JSON value with every secret replaced inside every string and object key (a map
 * keyed by a secret, N11), and numbers whose text is a secret (a sensitive `number` variable)
 * replaced by the mark.
 */
export function redactJson(value: unknown, secrets: readonly string[]): unknown {
  if (secrets.length === 0) return value;
  if (typeof value === "string") return redactText(value, secrets);
  if (typeof value === "number" && secrets.includes(String(value))) return redactionMark;
  if (Array.isArray(value)) return value.map((v) => redactJson(v, secrets));
  if (value !== null && typeof value === "object") {
    return Object.fromEntries(Object.entries(value).map(([k, v]) => [redactText(k, secrets), redactJson(v, secrets)]));
  }
  return value;
}

/** Whether a JSON value holds any of the secrets anywhere (a string containing one, or a number equal to one). */
export function containsSecret(value: unknown, secrets: readonly string[]): boolean {
  if (secrets.length === 0) return false;
  return JSON.stringify(redactJson(value, secrets)) !== JSON.stringify(value);
}
