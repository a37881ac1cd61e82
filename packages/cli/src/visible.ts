/*
 * Run output is written by whoever wrote the configuration: a terminal escape in it (OSC 52
 * clipboard writes, cursor moves that fake a `[drover] apply succeeded` line) must be shown,
 * not executed, by the CLI (security review N9). Control characters become `\u{1b}`, like
 * `escapeControlChars` writes them; newlines, tabs and CR LF line ends stay as they are.
 */

const empty = Buffer.alloc(0);

/**
 * In bytes read as latin1: C0 controls but tab and newline, a CR not before a newline, DEL, C1
 * controls (UTF-8 `C2 80`–`C2 9F`) and the bidi overrides U+202A–U+202E, U+2066–U+2069.
 */
// eslint-disable-next-line no-control-regex
const control = /[\x00-\x08\x0b\x0c\x0e-\x1f\x7f]|\r(?!\n)|\xc2[\x80-\x9f]|\xe2\x80[\xaa-\xae]|\xe2\x81[\xa6-\xa9]/g;
/** A tail that may be the start of one of them: the next chunk decides. */
const unfinished = /(?:\r|\xc2|\xe2|\xe2\x80|\xe2\x81)$/;

function visible(sequence: string): string {
  const b = [...sequence].map((c) => c.charCodeAt(0));
  const code =
    b.length === 1 ? b[0]! : b.length === 2 ? b[1]! : ((b[0]! & 0x0f) << 12) | ((b[1]! & 0x3f) << 6) | (b[2]! & 0x3f);
  return `\\u{${code.toString(16)}}`;
}

/** Makes control characters in a byte stream visible; a sequence split across chunks is handled whole. */
export class VisibleControls {
  private held: Buffer = empty;

  /** The bytes to print now for `chunk`. */
  push(chunk: Buffer): Buffer {
    const data = this.held.length > 0 ? Buffer.concat([this.held, chunk]) : chunk;
    let text = data.toString("latin1");
    const tail = unfinished.exec(text);
    this.held = tail ? Buffer.from(data.subarray(tail.index)) : empty;
    if (tail) text = text.slice(0, tail.index);
    control.lastIndex = 0;
    if (!control.test(text)) return tail ? data.subarray(0, tail.index) : data;
    return Buffer.from(text.replace(control, visible), "latin1");
  }

  /** What is still held, at the end of the stream. */
  end(): Buffer {
    const text = this.held.toString("latin1");
    this.held = empty;
    return Buffer.from(text.replace(control, visible), "latin1");
  }
}
