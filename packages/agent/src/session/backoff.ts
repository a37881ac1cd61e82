/** Longest wait a server's `Retry-After` may impose on the agent, whatever it asks for. */
export const maxRetryAfterMs = 30_000;

/**
 * Waits `ms`, or less when `signal` aborts; never rejects. The abort listener is removed when
 * the wait ends, so a loop of pauses on one long-lived signal adds nothing per turn. The timer
 * keeps the process alive: a wait may be all an agent has to do while its server is away.
 */
export function pause(ms: number, signal?: AbortSignal): Promise<void> {
  if (signal?.aborted) return Promise.resolve();
  return new Promise((resolve) => {
    const done = () => {
      clearTimeout(timer);
      signal?.removeEventListener("abort", done);
      resolve();
    };
    const timer = setTimeout(done, ms);
    signal?.addEventListener("abort", done, { once: true });
  });
}

/** An abortable wait; `pause` unless a test hands in its own clock. */
export type Sleep = (ms: number, signal: AbortSignal) => Promise<void>;

/** An error that says how long the server asked to wait (`Retry-After` on 503/429). */
export interface RetryAfter {
  retryAfterMs?: number | undefined;
}

/** The next wait: the backoff delay, or longer when the server asked for it (capped). */
export function waitFor(err: unknown, delayMs: number): number {
  const asked = (err as RetryAfter | null | undefined)?.retryAfterMs;
  return typeof asked === "number" && asked > delayMs ? Math.min(asked, maxRetryAfterMs) : delayMs;
}

/** Exponential backoff: `initialMs`, doubling up to `maxMs`; `reset()` after a success. */
export class Backoff {
  private delay: number;

  constructor(private readonly range: { initialMs: number; maxMs: number }) {
    this.delay = range.initialMs;
  }

  /** The wait before the next attempt after `err` (its Retry-After when longer), and doubles the next. */
  next(err: unknown): number {
    const wait = waitFor(err, this.delay);
    this.delay = Math.min(this.range.maxMs, this.delay * 2);
    return wait;
  }

  reset(): void {
    this.delay = this.range.initialMs;
  }
}
