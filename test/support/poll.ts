// The pause between two looks of a polling wait in the tests.
//
// The suite is CPU-bound (decision 0057): a wait that asks every 25 ms for a minute costs the
// process it asks (a server, the test cluster's API) thousands of answers. The pause starts short,
// so a condition that holds soon is seen at once, and grows to 100 ms for the long waits (a
// wait for a state that lasts briefly should watch, not poll).

/** Milliseconds to pause after the `attempt`-th look (0-based): 25 ms, growing by half each time, at most 100 ms. */
export function pollPause(attempt: number): number {
  return Math.min(100, Math.round(25 * 1.5 ** attempt));
}

/** Resolves after pollPause(attempt). */
export function pollWait(attempt: number): Promise<void> {
  return new Promise((resolve) => setTimeout(resolve, pollPause(attempt)));
}

/**
 * Looks until `look` gives a value, pausing by pollWait; past `timeoutMs` throws, naming `what`
 * and what `diagnose` says (the processes' last output, the calls a stand-in saw).
 */
export async function lookUntil<T>(
  what: string,
  look: () => Promise<T | undefined> | T | undefined,
  options: { timeoutMs?: number; diagnose?: () => string } = {},
): Promise<T> {
  const deadline = Date.now() + (options.timeoutMs ?? 120_000);
  for (let attempt = 0; ; attempt++) {
    const seen = await look();
    if (seen !== undefined) return seen;
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}\n${options.diagnose?.() ?? ""}`);
    await pollWait(attempt);
  }
}

/**
 * `promise`'s value, or null when it has not settled within `ms`. The timer is cleared either
 * way: a pending one would keep the test file's process up long after its last test.
 */
export async function within<T>(promise: Promise<T>, ms: number): Promise<T | null> {
  let timer: NodeJS.Timeout | undefined;
  try {
    return await Promise.race([promise, new Promise<null>((resolve) => (timer = setTimeout(() => resolve(null), ms)))]);
  } finally {
    clearTimeout(timer);
  }
}
