import { DroverError, maxLogChunkBytes } from "@drover/protocol";
import type { JobClient } from "../session/client.js";
import { pause, waitFor } from "../session/backoff.js";
import { NetworkError } from "../session/client.js";
import { StreamRedactor } from "./redactor.js";

/** The most the server takes in one append: fewer, larger appends cost it less per byte. */
const maxChunk = maxLogChunkBytes;
const flushIntervalMs = 200;
/** What an acknowledged slot of the queue holds instead of its buffer. */
const cleared = Buffer.alloc(0);

/**
 * A job's log on its way to the server: redacted, batched, sent in order by byte offset, and
 * retried after failures without loss or duplication (the server ignores bytes it already
 * has and refuses gaps, telling the offset it expects).
 */
export class LogStream {
  private readonly redactor = new StreamRedactor();
  /**
   * Output not yet acknowledged: `pending[head..]`. The front is dropped by moving `head`, not by
   * `shift()`: when the producer outruns the server, thousands of pipe reads wait here, and
   * shifting each one away copied the whole array every time.
   */
  private pending: Buffer[] = [];
  private head = 0;
  private pendingBytes = 0;
  /** Bytes the server has acknowledged. */
  private sent = 0;
  private sending: Promise<void> | undefined;
  private readonly timer: NodeJS.Timeout;
  private closed = false;
  /** Set by abandon(): the server takes no more of this log. */
  private abandoned = false;
  /** Set by close(): when it aborts, sending stops and what is left stays unsent. */
  private giveUp: AbortSignal | undefined;
  private failure: unknown;
  /**
   * Aborts every append in flight once close()'s `giveUp` does, including appends started
   * before close() was called (a hung request would otherwise outlive the stop budget).
   */
  private readonly stopSending = new AbortController();

  constructor(
    private readonly job: Pick<JobClient, "appendLog">,
    private readonly hooks: {
      onAcknowledged?: ((bytes: number) => void) | undefined;
      onRetry?: (() => void) | undefined;
      /** An append refused for good (not a network failure): the owner decides whether the job goes on. */
      onRefused?: ((err: unknown) => void) | undefined;
    } = {},
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
    if (this.abandoned) return Promise.resolve();
    this.sending ??= this.drain().finally(() => (this.sending = undefined));
    return this.sending;
  }

  /** Up to `n` pending bytes from `from` bytes in, as one buffer; only the buffers it needs are copied. */
  private piece(from: number, n: number): Buffer {
    const parts: Buffer[] = [];
    let skip = from;
    let size = 0;
    for (let i = this.head; i < this.pending.length; i++) {
      const b = this.pending[i]!;
      if (size >= n) break;
      if (skip >= b.length) {
        skip -= b.length;
        continue;
      }
      const part = skip > 0 ? b.subarray(skip) : b;
      skip = 0;
      parts.push(part);
      size += part.length;
    }
    const joined = parts.length === 1 ? parts[0]! : Buffer.concat(parts, size);
    return joined.length > n ? joined.subarray(0, n) : joined;
  }

  /** Forgets the first `n` pending bytes (the server has them). */
  private dropFront(n: number): void {
    this.pendingBytes -= n;
    while (n > 0) {
      const first = this.pending[this.head]!;
      if (first.length <= n) {
        // The slot is cleared as well: until the next compaction it would keep an acknowledged
        // buffer (a pipe read of up to 64 KiB, thousands of them) from being collected.
        this.pending[this.head] = cleared;
        this.head++;
        n -= first.length;
      } else {
        this.pending[this.head] = first.subarray(n);
        n = 0;
      }
    }
    if (this.head === this.pending.length) {
      this.pending = [];
      this.head = 0;
    } else if (this.head >= 1024 && this.head * 2 >= this.pending.length) {
      this.pending = this.pending.slice(this.head);
      this.head = 0;
    }
  }

  private async drain(): Promise<void> {
    let delay = 200;
    while (this.pendingBytes > 0 && !this.abandoned) {
      // Two appends in flight, so the server stores one while the next travels (it holds one
      // that arrives early until its turn); output written meanwhile goes behind them.
      const base = this.sent;
      const first = this.piece(0, maxChunk);
      const second = this.pendingBytes > first.length ? this.piece(first.length, maxChunk) : undefined;
      const round = new AbortController();
      const signal = AbortSignal.any([this.stopSending.signal, round.signal]);
      const sends = [
        this.job.appendLog(base, first, signal).catch((err: unknown) => {
          // The second cannot land without the first: do not leave it waiting on the server.
          round.abort();
          throw err;
        }),
      ];
      if (second) sends.push(this.job.appendLog(base + first.length, second, signal));
      const results = await Promise.allSettled(sends);
      // The server keeps only contiguous bytes: the furthest end an append reports is stored.
      // It may have had some of these bytes already (a retried request).
      let end = -1;
      for (const r of results) if (r.status === "fulfilled") end = Math.max(end, r.value);
      if (end >= 0) {
        const consumed = Math.min(first.length + (second?.length ?? 0), Math.max(0, end - base));
        this.sent += consumed;
        this.dropFront(consumed);
        if (consumed > 0) this.hooks.onAcknowledged?.(consumed);
        delay = 200;
      }
      const failed = results.find((r): r is PromiseRejectedResult => r.status === "rejected");
      if (!failed) continue;
      const err: unknown = failed.reason;
      // Progress was made: what is not acknowledged is simply sent again from `sent`.
      if (end >= 0 && (err instanceof NetworkError || (err instanceof DroverError && err.code === "log_gap"))) continue;
      if (err instanceof DroverError && err.code === "log_gap") {
        const expected = Number(err.details?.expectedOffset);
        if (Number.isInteger(expected) && expected < base) {
          // The server has less than we believed: nothing can restore those bytes; say so,
          // in the log too, where the rest would otherwise close the gap without a trace.
          this.failure = new Error(`the server lost log bytes ${expected}..${base}`);
          const marker = Buffer.from(`\n[drover] the server lost log bytes ${expected}..${base} of this job\n`, "utf8");
          if (this.head > 0) this.pending[--this.head] = marker;
          else this.pending.unshift(marker);
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
      this.hooks.onRefused?.(err);
      return;
    }
  }

  /**
   * The job is no longer this agent's (its lease or its token is gone): sending stops at once,
   * appends in flight included, and what is left stays unsent.
   */
  abandon(): void {
    this.abandoned = true;
    clearInterval(this.timer);
    this.stopSending.abort();
  }

  /**
   * Flushes everything, including held-back text; resolves when the server has it all, or
   * when `giveUp` aborts (then `unsent` tells what is left).
   */
  async close(giveUp?: AbortSignal): Promise<void> {
    this.closed = true;
    this.giveUp = giveUp;
    if (giveUp?.aborted) this.stopSending.abort();
    else giveUp?.addEventListener("abort", () => this.stopSending.abort(), { once: true });
    clearInterval(this.timer);
    const rest = this.redactor.end();
    if (rest.length > 0) {
      this.pending.push(rest);
      this.pendingBytes += rest.length;
    }
    while (this.pendingBytes > 0 && !this.failure && !giveUp?.aborted && !this.abandoned) {
      await this.kick();
    }
    // An abandoned log's refusal was the owner's to report, when it abandoned it.
    if (this.failure && !this.abandoned) throw this.failure;
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
