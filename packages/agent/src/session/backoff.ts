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

/** An error that says how long the server asked to wait (`Retry-After` on 503/429). */
export interface RetryAfter {
  retryAfterMs?: number | undefined;
}

/** The next wait: the backoff delay, or longer when the server asked for it (capped). */
export function waitFor(err: unknown, delayMs: number): number {
  const asked = (err as RetryAfter | null | undefined)?.retryAfterMs;
  return typeof asked === "number" && asked > delayMs ? Math.min(asked, maxRetryAfterMs) : delayMs;
}

/** Parses a `Retry-After` header (delta seconds or an HTTP date) into milliseconds, capped. */
export function parseRetryAfter(header: string | string[] | undefined, now = Date.now()): number | undefined {
  const raw = Array.isArray(header) ? header[0] : header;
  if (!raw) return undefined;
  const trimmed = raw.trim();
  let ms: number;
  if (/^\d+$/.test(trimmed)) ms = Number(trimmed) * 1000;
  else {
    const at = Date.parse(trimmed);
    if (Number.isNaN(at)) return undefined;
    ms = at - now;
  }
  return Math.max(0, Math.min(ms, maxRetryAfterMs));
}
