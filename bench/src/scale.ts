import { spawn } from "node:child_process";
import { join } from "node:path";
import { pathToFileURL } from "node:url";
import { routes } from "@drover/protocol";
import {
  api,
  client,
  cpuSeconds,
  repoRoot,
  rssMb,
  sleep,
  startServerProc,
  track,
  trackStop,
  type ServerProc,
} from "./harness.js";
import { percentile, type ExpectedRow, type Figure } from "./report.js";

interface FleetResult {
  /** Client-side heartbeat p99, each failed heartbeat counted at its timeout. */
  heartbeatP99: number;
  /** Heartbeats sent in the steady window, the failed ones included. */
  heartbeats: number;
  /** Heartbeats in the steady window that failed (timed out, refused, any answer but 200). */
  heartbeatFailures: number;
  errors: number;
  /** The first distinct failures the workers saw. */
  errorKinds: string[];
  rssMb: number;
  cpuPercent: number;
  /** CPU of the simulated fleet's processes together in the same window, in % of one core. */
  fleetCpuPercent: number;
  /** Worst p99 event-loop delay among the simulated fleet's processes: their own queueing. */
  clientLoopDelayP99: number;
  /** The server's own view (request received → answered) from its latency histogram. */
  serverSide: ServerSide;
}

interface ServerSide {
  count: number;
  over50ms: number;
  /** Upper bound (ms) of the histogram bucket holding the 99th percentile. */
  p99AtMostMs: number;
}

/**
 * Heartbeats the server answered, how many took it over 50 ms, and the bucket of its p99,
 * from its /metrics histogram; `before` subtracts an earlier reading, so only the steady
 * window counts.
 */
async function serverHeartbeatShare(
  url: string,
  before?: Map<string, number>,
): Promise<{ share: ServerSide; buckets: Map<string, number> }> {
  const text = (await client(url).call(routes.metrics, {})).toString("utf8");
  const buckets = new Map<string, number>();
  for (const l of text.split("\n")) {
    if (
      !l.startsWith("drover_http_request_duration_seconds_bucket") ||
      !l.includes(`route="${routes.agentHeartbeat.path}"`)
    )
      continue;
    const le = l.match(/le="([^"]+)"/)?.[1];
    if (le) buckets.set(le, (buckets.get(le) ?? 0) + Number(l.split(" ").at(-1)));
  }
  const at = (le: string) => (buckets.get(le) ?? 0) - (before?.get(le) ?? 0);
  const count = at("+Inf");
  const bounds = [...buckets.keys()].filter((le) => le !== "+Inf").sort((a, b) => Number(a) - Number(b));
  const p99 = bounds.find((le) => at(le) >= count * 0.99);
  return {
    share: { count, over50ms: count - at("0.05"), p99AtMostMs: p99 === undefined ? Infinity : Number(p99) * 1000 },
    buckets,
  };
}

const warmupMs = 8000;

/** How long a simulated agent waits for a heartbeat's answer; a failed heartbeat counts as this long. */
export const heartbeatTimeoutMs = 60_000;

/** What one fleet-worker process prints at its end. */
export interface WorkerResult {
  latencies: number[];
  heartbeatFailures: number;
  errors: number;
  errorKinds: string[];
  loopDelayP99Ms: number;
  windowCpuPercent: number;
}

/**
 * The client-side heartbeat latencies of a fleet: every answered heartbeat's, and each failed
 * one's (timed out, 401, 500…) as `timeoutMs`, so a fleet that loses heartbeats cannot read as
 * meeting its p99 on the ones that got through.
 */
export function clientLatencies(
  results: Array<Pick<WorkerResult, "latencies" | "heartbeatFailures">>,
  timeoutMs = heartbeatTimeoutMs,
): number[] {
  return results.flatMap((r) => [...r.latencies, ...Array.from({ length: r.heartbeatFailures }, () => timeoutMs)]);
}

/** The start of the name of the CPU profile (BENCH_CPU_PROF) of the server of a fleet of `agents` on `db`. */
export const scaleProfileName = (db: ScalePlan["db"], agents: number): string => `server-${db}-${agents}`;

/** Among profile file names, the newest of the server of `agents` agents on `db`; undefined when none. */
export function scaleProfileFile(files: string[], db: ScalePlan["db"], agents: number): string | undefined {
  const prefix = `${scaleProfileName(db, agents)}-`;
  return files
    .filter((f) => f.startsWith(prefix) && f.endsWith(".cpuprofile"))
    .sort()
    .at(-1);
}

/** Runs `agents` simulated agents in `workers` processes against one server for `durationMs`. */
export async function fleet(
  database: "sqlite" | "postgres",
  agents: number,
  workers: number,
  durationMs: number,
  serverNodeArgs: string[] = [],
): Promise<FleetResult> {
  let pg: { url: string; stop(): void } | undefined;
  const env: Record<string, string> = { DROVER_AGENT_HEARTBEAT_SECONDS: "5" };
  if (database === "postgres") {
    const mod = (await import(pathToFileURL(join(repoRoot, "scripts", "postgres.mjs")).href)) as {
      startPostgres(): Promise<{ url: string; stop(): void }>;
    };
    pg = await mod.startPostgres();
    env.DROVER_DATABASE_URL = pg.url;
  }
  // pg_ctl daemonizes the cluster: if this bench is abandoned (timed out), the runner stops it,
  // and a `finally` that runs after that must not stop it twice.
  const cluster = pg;
  let pgStopped = false;
  const stopPg = () => {
    if (!cluster || pgStopped) return;
    pgStopped = true;
    cluster.stop();
  };
  const forgetPg = trackStop(stopPg);
  let server: ServerProc;
  try {
    server = await startServerProc(env, serverNodeArgs, scaleProfileName(database, agents));
  } catch (err) {
    forgetPg();
    stopPg();
    throw err;
  }
  try {
    await api(server.url, routes.createPool, { body: { name: "fleet" } });
    const { token } = await api(server.url, routes.createPoolToken, { params: { pool: "fleet" }, body: {} });
    const perWorker = Math.ceil(agents / workers);
    const children = Array.from({ length: workers }, (_, w) =>
      track(
        spawn(
          process.execPath,
          [
            join(repoRoot, "bench", "dist", "fleet-worker.js"),
            server.url,
            token,
            String(Math.min(perWorker, agents - w * perWorker)),
            String(durationMs),
            `w${w}`,
            String(warmupMs),
            String(heartbeatTimeoutMs),
          ],
          {
            stdio: ["pipe", "pipe", "inherit"],
          },
        ),
      ),
    );
    const registered: Array<Promise<void>> = [];
    const outputs = children.map(
      (c) =>
        new Promise<string>((resolve) => {
          let out = "";
          registered.push(
            new Promise<void>((ready) => {
              c.stdout!.on("data", (d: Buffer) => {
                out += d.toString();
                if (out.includes("registered\n")) ready();
              });
              c.on("exit", () => ready());
            }),
          );
          c.on("exit", () => resolve(out));
        }),
    );
    await Promise.all(registered);
    for (const c of children) c.stdin!.end("go\n");
    // Measure the server in the same steady window as the heartbeats.
    await sleep(warmupMs);
    const before = (await serverHeartbeatShare(server.url)).buckets;
    const cpu0 = cpuSeconds(server.child.pid!);
    const t0 = Date.now();
    let peakRss = 0;
    while (Date.now() - t0 < durationMs - 2000) {
      peakRss = Math.max(peakRss, rssMb(server.child.pid!));
      await sleep(500);
    }
    const seconds = (Date.now() - t0) / 1000;
    const cpuPercent = ((cpuSeconds(server.child.pid!) - cpu0) / seconds) * 100;
    const results = (await Promise.all(outputs)).map((o) => JSON.parse(o.trim().split("\n").at(-1)!) as WorkerResult);
    // Each worker measures its own CPU over its steady window (a worker may have exited by now).
    const fleetCpuPercent = results.reduce((sum, r) => sum + r.windowCpuPercent, 0);
    const latencies = clientLatencies(results);
    const serverSide = (await serverHeartbeatShare(server.url, before)).share;
    return {
      heartbeatP99: percentile(latencies, 99),
      heartbeats: latencies.length,
      heartbeatFailures: results.reduce((n, r) => n + r.heartbeatFailures, 0),
      errors: results.reduce((n, r) => n + r.errors, 0),
      errorKinds: [...new Set(results.flatMap((r) => r.errorKinds))],
      rssMb: peakRss,
      cpuPercent,
      fleetCpuPercent,
      clientLoopDelayP99: Math.max(...results.map((r) => r.loopDelayP99Ms)),
      serverSide,
    };
  } finally {
    await server.stop();
    forgetPg();
    stopPg();
  }
}

/** One fleet size of the scale bench and its targets. */
export interface ScalePlan {
  db: "sqlite" | "postgres";
  agents: number;
  workers: number;
  p99: number;
  rss: number;
}

const allPlans: ScalePlan[] = [
  { db: "sqlite", agents: 1000, workers: 4, p99: 50, rss: 300 },
  { db: "postgres", agents: 5000, workers: 5, p99: 50, rss: 500 },
];

/**
 * The fleets to run: all, or those of the databases listed in BENCH_SCALE_DATABASES
 * (comma-separated `sqlite`, `postgres`), so the 5,000-agent PostgreSQL pass can run alone.
 */
export function scalePlans(selection = process.env.BENCH_SCALE_DATABASES): ScalePlan[] {
  if (selection === undefined || selection.trim() === "") return allPlans;
  const names = selection.split(",").map((n) => n.trim());
  const unknown = names.filter((n) => !allPlans.some((p) => p.db === n));
  if (unknown.length > 0)
    throw new Error(
      `BENCH_SCALE_DATABASES: unknown database ${unknown.join(", ")}; use sqlite, postgres or both, comma-separated`,
    );
  return allPlans.filter((p) => names.includes(p.db));
}

/** Whether `selection` (BENCH_SCALE_DATABASES) runs every fleet, so a run of all benches is a full one. */
export function scaleCoversAll(selection = process.env.BENCH_SCALE_DATABASES): boolean {
  return scalePlans(selection).length === allPlans.length;
}

/** The rows the scale bench reports for `plans`, values aside (also what a failed scale bench reports). */
export function scaleRows(plans = scalePlans()): ExpectedRow[] {
  return plans.flatMap(({ db, agents, workers, p99, rss }) => {
    const bench = `scale (${agents} agents in ${workers} processes, long-polling + heartbeating, ${db})`;
    return [
      { bench, metric: "heartbeat p99 (client side)", unit: "ms", target: `≤ ${p99} ms` },
      { bench, metric: "heartbeat p99 (server's histogram, bucket bound)", unit: "ms", target: `≤ ${p99} ms` },
      { bench, metric: "server peak RSS", unit: "MB", target: `≤ ${rss} MB` },
      { bench, metric: "server CPU", unit: "%", target: "—" },
    ];
  });
}

/**
 * SQLite with 1,000 agents (the first target, kept to show regressions) and PostgreSQL with
 * 5,000 agents in 5 processes, each beside 10 agents on the same database.
 */
export async function benchScale(durationMs = 30_000, plans = scalePlans()): Promise<Figure[]> {
  const figures: Figure[] = [];
  for (const plan of plans) {
    const { db, agents, workers, p99, rss } = plan;
    const small = await fleet(db, 10, 1, durationMs);
    const big = await fleet(db, agents, workers, durationMs);
    const [clientRow, serverRow, rssRow, cpuRow] = scaleRows([plan]) as [
      ExpectedRow,
      ExpectedRow,
      ExpectedRow,
      ExpectedRow,
    ];
    const note =
      `${big.heartbeats} heartbeats in a ${durationMs / 1000} s steady window after an ${warmupMs / 1000} s warm-up, ${big.heartbeatFailures} of them failed, each counted in the client-side p99 at its ${heartbeatTimeoutMs / 1000} s timeout; ${big.errors} errors in all (polls included)${big.errorKinds.length ? ` (${big.errorKinds.join("; ")})` : ""}; ` +
      `the server's own latency (its histogram, same window): p99 ≤ ${big.serverSide.p99AtMostMs} ms, ${big.serverSide.over50ms} of ${big.serverSide.count} heartbeats over 50 ms (10 agents: p99 ≤ ${small.serverSide.p99AtMostMs} ms); ` +
      `the simulated fleet's own event-loop delay p99 ${big.clientLoopDelayP99.toFixed(1)} ms (its share of the client-side figure, which shares the 2 cores with the server), its CPU ${big.fleetCpuPercent.toFixed(0)}% of a core`;
    figures.push(
      {
        ...clientRow,
        value: big.heartbeatP99,
        baseline: small.heartbeatP99,
        baselineLabel: "10 agents",
        met: big.heartbeatP99 <= p99,
        note,
      },
      {
        ...serverRow,
        value: big.serverSide.p99AtMostMs,
        baseline: small.serverSide.p99AtMostMs,
        baselineLabel: "10 agents",
        met: big.serverSide.p99AtMostMs <= p99,
      },
      { ...rssRow, value: big.rssMb, baseline: small.rssMb, baselineLabel: "10 agents", met: big.rssMb <= rss },
      { ...cpuRow, value: big.cpuPercent, baseline: small.cpuPercent, baselineLabel: "10 agents", met: null },
    );
  }
  return figures;
}
