import { redactionMark } from "@drover/protocol";

const mark = Buffer.from(redactionMark, "utf8");
const empty: Buffer = Buffer.alloc(0);

/**
 * Redacts the secrets that start before `limit` in `data`: at the leftmost occurrence of any
 * secret, the longest one matching there is replaced; the scan goes on after it. Returns the
 * pieces to emit and where the emitted part ends (at `limit`, or later when a secret starting
 * before it runs past it).
 */
function redactBefore(data: Buffer, limit: number, secrets: readonly Buffer[]): { parts: Buffer[]; end: number } {
  const parts: Buffer[] = [];
  let from = 0;
  for (;;) {
    let at = -1;
    for (const secret of secrets) {
      const i = data.indexOf(secret, from);
      if (i >= 0 && i < limit && (at < 0 || i < at)) at = i;
    }
    if (at < 0) break;
    // Longest first: the first that matches here is the longest.
    const secret = secrets.find((s) => at + s.length <= data.length && data.compare(s, 0, s.length, at, at + s.length) === 0)!;
    if (at > from) parts.push(data.subarray(from, at));
    parts.push(mark);
    from = at + secret.length;
  }
  const end = Math.max(from, limit);
  if (end > from) parts.push(data.subarray(from, end));
  return { parts, end };
}

/**
 * Redacts secret values from a byte stream before it leaves the agent, working on the bytes
 * (a secret is matched as its UTF-8 encoding; output is passed on unchanged, never decoded).
 * A secret may be split across two chunks, so output that ends with the start of a secret is
 * held back, unredacted, until more output arrives or the stream ends; any other output is passed
 * on at once (holding back a fixed tail kept a finished line from the log until terraform next
 * printed, often ten seconds later). A chunk without a secret is passed on without being copied:
 * terraform's output may be many MB.
 */
export class StreamRedactor {
  private held: Buffer = empty;
  /** Longest first, so that a secret containing another is replaced whole. */
  private secrets: Buffer[] = [];
  /** The most that can be held: a secret but its last byte. */
  private holdBack = 0;

  /** Sets the values to hide; empty values are ignored. */
  setSecrets(values: readonly string[]): void {
    const unique = [...new Set(values.filter((v) => v.length > 0))];
    this.secrets = unique.map((v) => Buffer.from(v, "utf8")).sort((a, b) => b.length - a.length);
    this.holdBack = Math.max(0, ...this.secrets.map((s) => s.length - 1));
  }

  /** Takes raw output; returns the pieces that may be sent now, in order. */
  push(chunk: Buffer): Buffer[] {
    if (this.secrets.length === 0) {
      const out = [...(this.held.length > 0 ? [this.held] : []), ...(chunk.length > 0 ? [chunk] : [])];
      this.held = empty;
      return out;
    }
    if (!this.found(chunk)) {
      // No secret inside the chunk, nor across the boundary with what was held: only a secret's
      // start at the end is kept, and the rest passes without a copy.
      const total = this.held.length + chunk.length;
      const tail = Buffer.concat([this.held, chunk.subarray(Math.max(0, chunk.length - this.holdBack))]);
      const keepFrom = total - (tail.length - this.secretStart(tail));
      if (keepFrom >= this.held.length) {
        const out = this.held.length > 0 ? [this.held] : [];
        const cut = keepFrom - this.held.length;
        if (cut > 0) out.push(chunk.subarray(0, cut));
        this.held = Buffer.from(chunk.subarray(cut));
        return out;
      }
    }
    const out: Buffer[] = [];
    let data = Buffer.concat([this.held, chunk]);
    for (;;) {
      const keepFrom = this.secretStart(data);
      const { parts, end } = redactBefore(data, keepFrom, this.secrets);
      out.push(...parts);
      if (end === keepFrom) {
        this.held = Buffer.from(data.subarray(end));
        return out;
      }
      // A secret starting before the kept start ran past it: what follows it is looked at anew.
      data = data.subarray(end);
    }
  }

  /**
   * Where the output may end with the start of a secret: the first offset whose rest is a
   * secret's beginning but not the whole secret (whole ones are redacted now); `data.length` when
   * there is none.
   */
  private secretStart(data: Buffer): number {
    for (let i = Math.max(0, data.length - this.holdBack); i < data.length; i++) {
      const rest = data.length - i;
      for (const s of this.secrets) {
        if (s.length > rest && s[0] === data[i] && data.compare(s, 0, rest, i) === 0) return i;
      }
    }
    return data.length;
  }

  /** Whether a secret occurs in `chunk` or starts in the held bytes and ends in `chunk`. */
  private found(chunk: Buffer): boolean {
    const boundary = this.held.length > 0 ? Buffer.concat([this.held, chunk.subarray(0, this.holdBack)]) : empty;
    return this.secrets.some((s) => chunk.includes(s) || boundary.includes(s));
  }

  /** Everything still held, at the end of the stream. */
  end(): Buffer {
    const rest = Buffer.concat(redactBefore(this.held, this.held.length, this.secrets).parts);
    this.held = empty;
    return rest;
  }
}
