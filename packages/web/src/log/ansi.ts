/*
 * Terraform (like most CLIs) colours its output with ANSI/VT escape sequences. The log viewer
 * shows those colours, so this module turns one line into styled text runs. It returns data and
 * never HTML: the viewer renders each run as a text node, so nothing in a log can become markup.
 *
 * Every line is parsed from the default style, on its own. The viewer is virtualised and must be
 * able to render line 150,000 without parsing the 149,999 before it, and terraform resets the
 * style at the end of each coloured line anyway, so a colour that leaks across a newline is rare
 * and showing it uncoloured is the cheaper mistake.
 *
 * The parser makes one pass over the line and never backtracks, so it is linear in the input, and
 * it treats anything it does not understand as something to drop, so it cannot throw.
 */

/** A colour: an index into the 256-colour palette, or a 24-bit colour as `#rrggbb`. */
export type Colour = { palette: number } | { rgb: string };

/** A run of text in one style. */
export interface Segment {
  text: string;
  fg: Colour | null;
  bg: Colour | null;
  bold: boolean;
  dim: boolean;
  italic: boolean;
  underline: boolean;
  inverse: boolean;
}

type Style = Omit<Segment, "text">;

const ESC = 0x1b;
const BEL = 0x07;
const CR = 0x0d;
const TAB = 0x09;
// The 8-bit forms of CSI, OSC and ST: rare in UTF-8 output, but they are controls, not text.
const CSI8 = 0x9b;
const OSC8 = 0x9d;
const ST8 = 0x9c;

const CUBE = [0, 95, 135, 175, 215, 255];

function hex2(v: number): string {
  return v.toString(16).padStart(2, "0");
}

/** The xterm colour of palette entries 16–255 (the 6×6×6 cube and the grey ramp) as `#rrggbb`. */
export function xtermHex(n: number): string {
  if (n >= 232) {
    const v = 8 + 10 * (n - 232);
    return `#${hex2(v)}${hex2(v)}${hex2(v)}`;
  }
  const i = n - 16;
  return `#${hex2(CUBE[Math.floor(i / 36) % 6] ?? 0)}${hex2(CUBE[Math.floor(i / 6) % 6] ?? 0)}${hex2(CUBE[i % 6] ?? 0)}`;
}

function isText(c: number): boolean {
  return c === TAB || (c >= 0x20 && c !== 0x7f && (c < 0x80 || c > 0x9f));
}

function sameColour(a: Colour | null, b: Colour | null): boolean {
  if (a === null || b === null) return a === b;
  if ("palette" in a) return "palette" in b && a.palette === b.palette;
  return "rgb" in b && a.rgb === b.rgb;
}

function sameStyle(a: Style, b: Style): boolean {
  return (
    a.bold === b.bold &&
    a.dim === b.dim &&
    a.italic === b.italic &&
    a.underline === b.underline &&
    a.inverse === b.inverse &&
    sameColour(a.fg, b.fg) &&
    sameColour(a.bg, b.bg)
  );
}

function reset(s: Style): void {
  s.fg = null;
  s.bg = null;
  s.bold = s.dim = s.italic = s.underline = s.inverse = false;
}

function isByte(v: number | undefined): v is number {
  return v !== undefined && Number.isInteger(v) && v >= 0 && v <= 255;
}

/**
 * Reads an extended colour (`5;n` or `2;r;g;b`) starting at nums[k], the mode. Returns the colour
 * (null when malformed) and the index after what it consumed.
 */
function extendedColour(nums: number[], k: number): [Colour | null, number] {
  const mode = nums[k];
  if (mode === 5) {
    const n = nums[k + 1];
    return [isByte(n) ? { palette: n } : null, k + 2];
  }
  if (mode === 2) {
    const r = nums[k + 1];
    const g = nums[k + 2];
    const b = nums[k + 3];
    const ok = isByte(r) && isByte(g) && isByte(b);
    return [ok ? { rgb: `#${hex2(r)}${hex2(g)}${hex2(b)}` } : null, k + 4];
  }
  return [null, k + 1];
}

/** Applies the parameters of one SGR sequence (the text between `ESC[` and `m`) to the style. */
function applySgr(body: string, s: Style): void {
  // ":" separates sub-parameters (`38:2::r:g:b`, `4:3`); ";" separates parameters.
  const groups = body.split(";").map((g) => g.split(":").map(Number));
  const flat = groups.map((g) => g[0] ?? 0);
  let g = 0;
  while (g < groups.length) {
    const group = groups[g] ?? [0];
    const code = flat[g] ?? 0;
    g++;
    if (code === 38 || code === 48 || code === 58) {
      let colour: Colour | null;
      if (group.length > 1) {
        // The colon form may carry a colour-space id before r;g;b: `38:2:cs:r:g:b`.
        const sub = group[1] === 2 && group.length >= 6 ? [2, ...group.slice(3)] : group.slice(1);
        colour = extendedColour(sub, 0)[0];
      } else {
        [colour, g] = extendedColour(flat, g);
      }
      if (colour !== null && code === 38) s.fg = colour;
      if (colour !== null && code === 48) s.bg = colour;
      continue;
    }
    if (code === 0) reset(s);
    else if (code === 1) s.bold = true;
    else if (code === 2) s.dim = true;
    else if (code === 3) s.italic = true;
    else if (code === 4) s.underline = group.length > 1 ? group[1] !== 0 : true;
    else if (code === 7) s.inverse = true;
    else if (code === 22) s.bold = s.dim = false;
    else if (code === 23) s.italic = false;
    else if (code === 24) s.underline = false;
    else if (code === 27) s.inverse = false;
    else if (code >= 30 && code <= 37) s.fg = { palette: code - 30 };
    else if (code === 39) s.fg = null;
    else if (code >= 40 && code <= 47) s.bg = { palette: code - 40 };
    else if (code === 49) s.bg = null;
    else if (code >= 90 && code <= 97) s.fg = { palette: code - 90 + 8 };
    else if (code >= 100 && code <= 107) s.bg = { palette: code - 100 + 8 };
  }
}

type OnSgr = (params: string) => void;

// CSI: parameter bytes 0x30–0x3F, intermediate bytes 0x20–0x2F, a final byte 0x40–0x7E.
function skipCsi(line: string, start: number, onSgr: OnSgr | null): number {
  const n = line.length;
  let k = start;
  let sgrParams = true; // only digits, ";" and ":" make an SGR (not `ESC[>4;1m` and the like)
  while (k < n) {
    const c = line.charCodeAt(k);
    if (c < 0x30 || c > 0x3f) break;
    if (c > 0x3b) sgrParams = false;
    k++;
  }
  const paramEnd = k;
  while (k < n && line.charCodeAt(k) >= 0x20 && line.charCodeAt(k) <= 0x2f) k++;
  if (k >= n) return n;
  const f = line.charCodeAt(k);
  if (f < 0x40 || f > 0x7e) return k; // malformed: drop what was read, resume at the odd character
  if (f === 0x6d && k === paramEnd && sgrParams && onSgr !== null) onSgr(line.slice(start, paramEnd));
  return k + 1;
}

// OSC, DCS, SOS, PM, APC: a string ended by BEL or ST; unterminated ones run to the line's end.
function skipString(line: string, start: number): number {
  for (let k = start; k < line.length; k++) {
    const c = line.charCodeAt(k);
    if (c === BEL || c === ST8) return k + 1;
    if (c === ESC) return line.charCodeAt(k + 1) === 0x5c ? k + 2 : k;
  }
  return line.length;
}

// The index after the control character at i and the sequence it starts, if any.
function skipControl(line: string, i: number, onSgr: OnSgr | null): number {
  const n = line.length;
  const c = line.charCodeAt(i);
  if (c === CSI8) return skipCsi(line, i + 1, onSgr);
  if (c === OSC8) return skipString(line, i + 1);
  if (c !== ESC) return i + 1;
  const j = i + 1;
  if (j >= n) return n;
  const d = line.charCodeAt(j);
  if (d === 0x5b) return skipCsi(line, j + 1, onSgr);
  if (d === 0x5d || d === 0x50 || d === 0x58 || d === 0x5e || d === 0x5f) return skipString(line, j + 1);
  // Anything else: intermediates then one final character, like `ESC(B` or `ESC7`.
  let k = j;
  while (k < n && line.charCodeAt(k) >= 0x20 && line.charCodeAt(k) <= 0x2f) k++;
  if (k < n && line.charCodeAt(k) >= 0x30 && line.charCodeAt(k) <= 0x7e) return k + 1;
  return k;
}

/*
 * Walks a line once: text runs go to onText, SGR parameters to onSgr, and everything else is
 * skipped. A carriage return mid-line is a progress meter redrawing itself, so what follows
 * replaces what came before (onOverwrite); clearing only once new text arrives makes a trailing
 * "\r" harmless.
 */
function scan(line: string, onText: (text: string) => void, onOverwrite: () => void, onSgr: OnSgr | null): void {
  const n = line.length;
  let overwrite = false;
  let i = 0;
  while (i < n) {
    const c = line.charCodeAt(i);
    if (isText(c)) {
      let j = i + 1;
      while (j < n && isText(line.charCodeAt(j))) j++;
      if (overwrite) onOverwrite();
      overwrite = false;
      onText(line.slice(i, j));
      i = j;
    } else if (c === CR) {
      overwrite = true;
      i++;
    } else i = skipControl(line, i, onSgr);
  }
}

/** Splits one log line into styled segments, dropping every escape sequence and control character. */
export function parseAnsi(line: string): Segment[] {
  const out: Segment[] = [];
  const style: Style = { fg: null, bg: null, bold: false, dim: false, italic: false, underline: false, inverse: false };
  let pending = "";
  const flush = (): void => {
    if (pending === "") return;
    const last = out[out.length - 1];
    if (last !== undefined && sameStyle(last, style)) last.text += pending;
    else out.push({ text: pending, ...style });
    pending = "";
  };
  scan(
    line,
    (text) => (pending += text),
    () => {
      out.length = 0;
      pending = "";
    },
    (params) => {
      flush();
      applySgr(params, style);
    },
  );
  flush();
  return out;
}

function paint(colour: Colour | null, role: "fg" | "bg", classes: string[], style: Record<string, string>): void {
  if (colour === null) return;
  if ("palette" in colour && colour.palette < 16) classes.push(`ansi-${role}-${colour.palette}`);
  else style[role === "fg" ? "color" : "backgroundColor"] = "rgb" in colour ? colour.rgb : xtermHex(colour.palette);
}

// Palette 0–15 are classes so that they follow the light or dark theme; other colours are exact.
// Inverse swaps the colours here, and a default colour swaps through the ansi-inverse class.
/** The classes (from log.css) and inline colours that show a segment. */
export function segmentLook(seg: Segment): { className: string | undefined; style: Record<string, string> } {
  const classes: string[] = [];
  const style: Record<string, string> = {};
  paint(seg.inverse ? seg.bg : seg.fg, "fg", classes, style);
  paint(seg.inverse ? seg.fg : seg.bg, "bg", classes, style);
  if (seg.bold) classes.push("ansi-bold");
  if (seg.dim) classes.push("ansi-dim");
  if (seg.italic) classes.push("ansi-italic");
  if (seg.underline) classes.push("ansi-underline");
  if (seg.inverse) classes.push("ansi-inverse");
  return { className: classes.length > 0 ? classes.join(" ") : undefined, style };
}

/** The text of a line as parseAnsi shows it, without styles (what search looks at). */
export function stripAnsi(line: string): string {
  let text = "";
  scan(
    line,
    (run) => (text += run),
    () => (text = ""),
    null,
  );
  return text;
}
