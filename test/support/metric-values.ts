// Reads values out of a Prometheus text exposition, for tests of what the metrics say.

/** Labels of a sample as written in the exposition (`{a="b"}`), parsed. */
function labelsOf(text: string | undefined): Record<string, string> {
  return Object.fromEntries([...(text ?? "").matchAll(/([a-zA-Z_]+)="((?:[^"\\]|\\.)*)"/g)].map((m) => [m[1]!, m[2]!]));
}

/**
 * The sum of `name`'s samples whose labels include `labels` (a histogram's `_count` or `_sum` by
 * its full name); undefined when no sample matches.
 */
export function sampleValue(text: string, name: string, labels: Record<string, string> = {}): number | undefined {
  let total: number | undefined;
  for (const m of text.matchAll(/^([a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{(.*)\})? (\S+)$/gm)) {
    if (m[1] !== name) continue;
    const have = labelsOf(m[2]);
    if (Object.entries(labels).every(([k, v]) => have[k] === v)) total = (total ?? 0) + Number(m[3]);
  }
  return total;
}

/** Fetches `url` (a /metrics endpoint) and reads one value as `sampleValue` does. */
export async function scrape(
  url: string,
  name: string,
  labels: Record<string, string> = {},
): Promise<number | undefined> {
  // eslint-disable-next-line no-restricted-globals -- any process's /metrics (agents, controllers), read alike
  return sampleValue(await (await fetch(url)).text(), name, labels);
}
