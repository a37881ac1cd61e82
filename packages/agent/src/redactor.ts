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
 * A secret may be split across two chunks, so the last (longest secret − 1) bytes are held back,
 * unredacted, until more output arrives or the stream ends. A chunk without a secret is passed on without
 * being copied: terraform's output may be many MB.
 */
export class StreamRedactor {
  private held: Buffer = empty;
  /** Longest first, so that a secret containing another is replaced whole. */
  private secrets: Buffer[] = [];
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
    if (chunk.length >= this.holdBack && !this.found(chunk)) {
      // No secret inside the chunk, nor across the boundary with what was held: no copy.
      const out = this.held.length > 0 ? [this.held] : [];
      const cut = chunk.length - this.holdBack;
      if (cut > 0) out.push(chunk.subarray(0, cut));
      this.held = Buffer.from(chunk.subarray(cut));
      return out;
    }
    // The last (longest − 1) bytes stay raw: a secret starting there may not be complete yet.
    const data = Buffer.concat([this.held, chunk]);
    const { parts, end } = redactBefore(data, Math.max(0, data.length - this.holdBack), this.secrets);
    this.held = Buffer.from(data.subarray(end));
    return parts;
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
