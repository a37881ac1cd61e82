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
