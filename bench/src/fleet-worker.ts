// A child process simulating many agents: each registers, long-polls continuously and
// heartbeats on the interval the server gives. Heartbeat latency is sampled only in the
// steady window [warm-up, warm-up + duration]: the start-up burst (every agent registering
// and connecting at once) is reported separately by the caller, not mixed into the p99.
// Prints one JSON line at the end.
import { monitorEventLoopDelay } from "node:perf_hooks";
import { DroverClient, routes } from "@drover/protocol";
import { Agent } from "undici";

// The same HTTP client the real agent uses (the typed client on undici, kept-alive
// connections), so the simulated fleet costs its processes what real agents would.
const dispatcher = new Agent({ connections: null, keepAliveTimeout: 60_000, headersTimeout: 0, bodyTimeout: 0 });

const [url, token, countArg, durationArg, prefix, warmupArg] = process.argv.slice(2);
const count = Number(countArg);
const durationMs = Number(durationArg);
const warmupMs = Number(warmupArg ?? 8000);
const loopDelay = monitorEventLoopDelay({ resolution: 10 });
loopDelay.enable();

const client = new DroverClient({ baseUrl: url!, dispatcher });

const sessions: Array<{ session: string; interval: number }> = [];
for (let i = 0; i < count; i++) {
  const reg = await client.call(routes.register, { token, body: { name: `${prefix}-${i}`, version: "bench", driver: "local", capacity: 1 } });
  sessions.push({ session: reg.sessionToken, interval: reg.heartbeatIntervalMs });
}
// Every worker registers its agents first; the parent starts all of them at once (a line on
// stdin), so the steady windows of the workers coincide.
process.stdout.write("registered\n");
await new Promise<void>((resolve) => process.stdin.once("data", () => resolve()));
const start = performance.now();
const windowStart = start + warmupMs;
const windowEnd = windowStart + durationMs;
// One controller per simulated agent, all aborted at the end: a thousand polls listening on one
// signal made every call's add/remove of its abort listener walk a thousand-long list.
const stops = sessions.map(() => new AbortController());
const latencies: number[] = [];
let errors = 0;
/** The first few distinct failures, so a failing fleet says why. */
const errorKinds = new Set<string>();
const failed = (err: unknown) => {
  errors++;
  if (errorKinds.size < 5) errorKinds.add(err instanceof Error ? err.message.slice(0, 200) : String(err));
};

await Promise.all(
  sessions.map(async ({ session, interval }, i) => {
    const stop = stops[i]!;
    const polling = (async () => {
      while (!stop.signal.aborted) {
        try {
          await client.call(routes.pollJob, { token: session, query: { wait: 25_000 }, signal: stop.signal, timeoutMs: 40_000 });
        } catch (err) {
          if (!stop.signal.aborted) failed(err);
        }
      }
    })();
    await new Promise((r) => setTimeout(r, (i * 7919) % interval));
    while (performance.now() < windowEnd) {
      const t = performance.now();
      try {
        await client.call(routes.agentHeartbeat, { token: session, body: { runningJobs: 0 } });
        if (t >= windowStart && t < windowEnd) latencies.push(performance.now() - t);
      } catch (err) {
        failed(err);
      }
      await new Promise((r) => setTimeout(r, interval));
    }
    stop.abort();
    await polling;
  }),
);
process.stdout.write(JSON.stringify({ latencies, errors, errorKinds: [...errorKinds], loopDelayP99Ms: loopDelay.percentile(99) / 1e6 }) + "\n");
