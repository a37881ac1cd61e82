import { DroverError, maxLogChunkBytes } from "@drover/protocol";
import type { JobClient } from "./client.js";
import { pause, waitFor } from "./backoff.js";
import { NetworkError } from "./client.js";
import { StreamRedactor } from "./redactor.js";

/** The most the server takes in one append: fewer, larger appends cost it less per byte. */
const maxChunk = maxLogChunkBytes;
const flushIntervalMs = 200;

/**
 * A job's log on its way to the server: redacted, batched, sent in order by byte offset, and
 * retried after failures without loss or duplication (the server ignores bytes it already
 * has and refuses gaps, telling the offset it expects).
 */
export class LogStream {
  private readonly redactor = new StreamRedactor();
  private pending: Buffer[] = [];
  private pendingBytes = 0;
  /** Bytes the server has acknowledged. */
  private sent = 0;
  private sending: Promise<void> | undefined;
  private readonly timer: NodeJS.Timeout;
  private closed = false;
  /** Set by close(): when it aborts, sending stops and what is left stays unsent. */
  private giveUp: AbortSignal | undefined;
  private failure: unknown;

  constructor(
    private readonly job: JobClient,
    private readonly hooks: { onAcknowledged?: ((bytes: number) => void) | undefined; onRetry?: (() => void) | undefined } = {},
  ) {
    this.timer = setInterval(() => void this.kick(), flushIntervalMs);
    this.timer.unref();
  }

  setSecrets(values: readonly string[]): void {
    this.redactor.setSecrets(values);
  }

  /** Adds raw output (from terraform, a hook, or the agent's own lines). */
  write(data: Buffer | string): void {
    for (const buf of this.redactor.push(typeof data === "string" ? Buffer.from(data, "utf8") : data)) {
      this.pending.push(buf);
      this.pendingBytes += buf.length;
    }
    if (this.pendingBytes >= maxChunk) void this.kick();
  }

  /** A line from the agent itself. */
  line(text: string): void {
    this.write(`${text}\n`);
  }

  private kick(): Promise<void> {
    this.sending ??= this.drain().finally(() => (this.sending = undefined));
    return this.sending;
  }

  /** The first `n` pending bytes as one buffer; only the buffers it needs are copied. */
  private head(n: number): Buffer {
    const parts: Buffer[] = [];
    let size = 0;
    for (const b of this.pending) {
      if (size >= n) break;
      parts.push(b);
      size += b.length;
    }
    const joined = parts.length === 1 ? parts[0]! : Buffer.concat(parts, size);
    return joined.length > n ? joined.subarray(0, n) : joined;
  }

  /** Forgets the first `n` pending bytes (the server has them). */
  private dropFront(n: number): void {
    this.pendingBytes -= n;
    while (n > 0) {
      const first = this.pending[0]!;
      if (first.length <= n) {
        this.pending.shift();
        n -= first.length;
      } else {
        this.pending[0] = first.subarray(n);
        n = 0;
      }
    }
  }

  private async drain(): Promise<void> {
    let delay = 200;
    while (this.pendingBytes > 0) {
      // Output written while this request is in flight is appended behind `chunk`.
      const chunk = this.head(maxChunk);
      try {
        const end = await this.job.appendLog(this.sent, chunk, this.giveUp);
        const accepted = end - this.sent;
        // The server may already have had some of these bytes (a retried request).
        const consumed = Math.min(chunk.length, Math.max(0, accepted));
        this.sent += consumed;
        this.dropFront(consumed);
        if (consumed > 0) this.hooks.onAcknowledged?.(consumed);
        delay = 200;
      } catch (err) {
        if (err instanceof DroverError && err.code === "log_gap") {
          const expected = Number(err.details?.expectedOffset);
          if (Number.isInteger(expected) && expected < this.sent) {
            // The server has less than we believed: nothing can restore those bytes; say so,
            // in the log too, where the rest would otherwise close the gap without a trace.
            this.failure = new Error(`the server lost log bytes ${expected}..${this.sent}`);
            const marker = Buffer.from(`\n[drover] the server lost log bytes ${expected}..${this.sent} of this job\n`, "utf8");
            this.pending.unshift(marker);
            this.pendingBytes += marker.length;
          }
          this.sent = Number.isInteger(expected) ? expected : this.sent;
          continue;
        }
        if (this.giveUp?.aborted) return;
        if (err instanceof NetworkError) {
          this.hooks.onRetry?.();
          // Closing: results matter more than speed, so retry sooner.
          await pause(waitFor(err, delay), this.giveUp);
          delay = Math.min(this.closed ? 2_000 : 5_000, delay * 2);
          continue;
        }
        this.failure = err;
        return;
      }
    }
  }

  /**
   * Flushes everything, including held-back text; resolves when the server has it all, or
   * when `giveUp` aborts (then `unsent` tells what is left).
   */
  async close(giveUp?: AbortSignal): Promise<void> {
    this.closed = true;
    this.giveUp = giveUp;
    clearInterval(this.timer);
    const rest = this.redactor.end();
    if (rest.length > 0) {
      this.pending.push(rest);
      this.pendingBytes += rest.length;
    }
    while (this.pendingBytes > 0 && !this.failure && !giveUp?.aborted) {
      await this.kick();
    }
    if (this.failure) throw this.failure;
  }

  /** Bytes written but not acknowledged by the server. */
  get unsent(): number {
    return this.pendingBytes;
  }

  /** Bytes acknowledged by the server so far. */
  get acknowledged(): number {
    return this.sent;
  }
}
