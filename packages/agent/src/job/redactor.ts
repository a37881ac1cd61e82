import { redactionMark, SecretMatcher } from "@drover/runtime";

const mark = Buffer.from(redactionMark, "utf8");
const empty: Buffer = Buffer.alloc(0);

/**
 * Redacts secret values from a byte stream before it leaves the agent, working on the bytes
 * (a secret is matched as its UTF-8 encoding; output is passed on unchanged, never decoded), in
 * every form {@link SecretMatcher} knows, word-wrapped ones included. A secret may be split
 * across chunks (and, wrapped, across lines), so output that ends with the unfinished start of a
 * secret is held back, unredacted, until more output arrives or the stream ends; any other output
 * is passed on at once (holding back a fixed tail kept a finished line from the log until
 * terraform next printed, often ten seconds later). A chunk without a secret's first word is
 * passed on without being copied: terraform's output may be many MB.
 */
export class StreamRedactor {
  private held: Buffer = empty;
  private matcher = new SecretMatcher([]);

  /** Sets the values to hide; empty values are ignored. */
  setSecrets(values: readonly string[]): void {
    this.matcher = new SecretMatcher(values);
  }

  /** Takes raw output; returns the pieces that may be sent now, in order. */
  push(chunk: Buffer): Buffer[] {
    if (this.matcher.empty) {
      const out = [...(this.held.length > 0 ? [this.held] : []), ...(chunk.length > 0 ? [chunk] : [])];
      this.held = empty;
      return out;
    }
    if (this.held.length === 0 && !this.matcher.mayMatchIn(chunk)) {
      // No match starts inside the chunk: only the unfinished start of one at its end is kept.
      const keep = this.matcher.partialFrom(chunk, 0);
      this.held = keep < chunk.length ? Buffer.from(chunk.subarray(keep)) : empty;
      return keep > 0 ? [chunk.subarray(0, keep)] : [];
    }
    const data = this.held.length > 0 ? Buffer.concat([this.held, chunk]) : chunk;
    const { parts, end } = this.redactUpTo(data, false);
    this.held = end < data.length ? Buffer.from(data.subarray(end)) : empty;
    return parts;
  }

  /**
   * Redacts `data` from its start: each leftmost match that starts before the first unfinished
   * one is replaced (a match may run past where the previous unfinished one started: what follows
   * it is looked at anew). With `all`, nothing is unfinished (the stream has ended).
   */
  private redactUpTo(data: Buffer, all: boolean): { parts: Buffer[]; end: number } {
    const text = data.toString("latin1");
    const parts: Buffer[] = [];
    let from = 0;
    for (;;) {
      const keep = all ? data.length : this.matcher.partialFrom(data, from);
      const m = this.matcher.find(text, from);
      if (!m || m.at >= keep) {
        if (keep > from) parts.push(data.subarray(from, keep));
        return { parts, end: keep };
      }
      if (m.at > from) parts.push(data.subarray(from, m.at));
      parts.push(mark);
      from = m.end;
    }
  }

  /** Everything still held, at the end of the stream. */
  end(): Buffer {
    const rest = this.held.length > 0 ? Buffer.concat(this.redactUpTo(this.held, true).parts) : empty;
    this.held = empty;
    return rest;
  }
}
