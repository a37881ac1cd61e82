// The pause between two looks of a polling wait in the tests.
//
// The suite is CPU-bound (decision 0057): a wait that asks every 25 ms for a minute costs the
// process it asks (a server, the test cluster's API) thousands of answers. The pause starts short,
// so a condition that holds soon is seen at once, and grows to 200 ms for the long waits.

/** Milliseconds to pause after the `attempt`-th look (0-based): 25 ms, growing by half each time, at most 200 ms. */
export function pollPause(attempt: number): number {
  return Math.min(200, Math.round(25 * 1.5 ** attempt));
}

/** Resolves after pollPause(attempt). */
export function pollWait(attempt: number): Promise<void> {
  return new Promise((resolve) => setTimeout(resolve, pollPause(attempt)));
}
