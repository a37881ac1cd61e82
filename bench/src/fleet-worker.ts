// A child process simulating many agents: each registers, long-polls continuously and
// heartbeats on the interval the server gives. Heartbeat latency is sampled only in the
// steady window [warm-up, warm-up + duration]: the start-up burst (every agent registering
// and connecting at once) is reported separately by the caller, not mixed into the p99.
// Prints one JSON line at the end.
import { setMaxListeners } from "node:events";
import { monitorEventLoopDelay } from "node:perf_hooks";
import { Agent, request } from "undici";

// The same HTTP client the real agent uses (undici's request, kept-alive connections), so the
// simulated fleet costs its processes what real agents would, not fetch's extra layers.
const dispatcher = new Agent({ connections: null, keepAliveTimeout: 60_000, headersTimeout: 0, bodyTimeout: 0 });

const [url, token, countArg, durationArg, prefix, warmupArg] = process.argv.slice(2);
const count = Number(countArg);
const durationMs = Number(durationArg);
const warmupMs = Number(warmupArg ?? 8000);
const loopDelay = monitorEventLoopDelay({ resolution: 10 });
loopDelay.enable();

async function call(path: string, auth: string, body?: unknown, signal?: AbortSignal): Promise<any> {
  const res = await request(url + path, {
    method: "POST",
    headers: { authorization: `Bearer ${auth}`, "content-type": "application/json" },
    body: JSON.stringify(body ?? {}),
    signal,
    dispatcher,
  });
  const text = await res.body.text();
  if (res.statusCode >= 300) throw new Error(`${path}: ${res.statusCode} ${text}`);
  return text ? JSON.parse(text) : undefined;
}

const sessions: Array<{ session: string; interval: number }> = [];
for (let i = 0; i < count; i++) {
  const reg = await call("/api/agent/v1/register", token!, { name: `${prefix}-${i}`, version: "bench", driver: "local", capacity: 1 });
  sessions.push({ session: reg.sessionToken, interval: reg.heartbeatIntervalMs });
}
const start = performance.now();
const windowStart = start + warmupMs;
const windowEnd = windowStart + durationMs;
const stop = new AbortController();
// Every simulated agent's long-poll listens on this one signal.
setMaxListeners(0, stop.signal);
const latencies: number[] = [];
let errors = 0;

await Promise.all(
  sessions.map(async ({ session, interval }, i) => {
    const polling = (async () => {
      while (!stop.signal.aborted) {
        try {
          await call("/api/agent/v1/jobs/next?wait=25000", session, undefined, stop.signal);
        } catch {
          if (!stop.signal.aborted) errors++;
        }
      }
    })();
    await new Promise((r) => setTimeout(r, (i * 7919) % interval));
    while (performance.now() < windowEnd) {
      const t = performance.now();
      try {
        await call("/api/agent/v1/heartbeat", session, { runningJobs: 0 });
        if (t >= windowStart && t < windowEnd) latencies.push(performance.now() - t);
      } catch {
        errors++;
      }
      await new Promise((r) => setTimeout(r, interval));
    }
    stop.abort();
    await polling;
  }),
);
process.stdout.write(JSON.stringify({ latencies, errors, loopDelayP99Ms: loopDelay.percentile(99) / 1e6 }) + "\n");
