import { mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { create } from "tar";
import { api, sleep, startServerProc } from "./harness.js";
import {
  describeFunctions,
  describeProfile,
  monotonicUs,
  summarizeProfiles,
  type ProfileSummary,
  type ProfileWindow,
} from "./profile.js";
import { percentile, type Figure } from "./report.js";
import { routes } from "@drover/protocol";

/** A one-file configuration archive. */
export async function tinyArchive(): Promise<Buffer> {
  const dir = mkdtempSync(join(tmpdir(), "drover-bench-cfg-"));
  writeFileSync(join(dir, "main.tf"), "");
  const chunks: Buffer[] = [];
  const stream = create({ gzip: true, cwd: dir }, ["main.tf"]);
  for await (const c of stream as AsyncIterable<Buffer>) chunks.push(c);
  rmSync(dir, { recursive: true, force: true });
  return Buffer.concat(chunks);
}

type Mode = "long-poll" | "interval-1s";

/** Runs `task` over `items` with at most `limit` in flight, keeping the results in order. */
export async function inParallel<T, R>(
  items: T[],
  limit: number,
  task: (item: T, index: number) => Promise<R>,
): Promise<R[]> {
  const results = new Array<R>(items.length);
  let next = 0;
  await Promise.all(
    Array.from({ length: Math.min(limit, items.length) }, async () => {
      while (next < items.length) {
        const i = next++;
        results[i] = await task(items[i]!, i);
      }
    }),
  );
  return results;
}

interface DispatchResult {
  latencies: number[];
  /** Jobs an agent was handed more than once, or whose start the server refused: must be 0. */
  duplicates: number;
  /** Jobs whose recorded attempt is not 1 (claimed, lost and claimed again): must be 0. */
  reclaimed: number;
  /** From the first submission to the last job started, on the clock of CPU profiles. */
  window: ProfileWindow;
}

/**
 * Queued → started latency for `jobs` jobs handed to `agents` waiting agents. Agents are
 * protocol clients that start each job the moment they receive it, so the figure is the
 * server's dispatch path (queue → wake-up → claim → start), measured by the server's own
 * timestamps. Runs are submitted by `submitters` clients (one, by default), as fast as the server
 * takes them, so the queue is never idle while it fills. `serverEnv` adds server settings (the
 * test suite's pass turns on DROVER_DIAGNOSTICS_VALIDATE_RESPONSES).
 */
export async function measure(
  mode: Mode,
  jobs: number,
  agents: number,
  submitters = 1,
  serverNodeArgs: string[] = [],
  serverEnv: Record<string, string> = {},
): Promise<DispatchResult> {
  const server = await startServerProc({ DROVER_LEASE_TTL_SECONDS: "600", ...serverEnv }, serverNodeArgs);
  try {
    const url = server.url;
    await api(url, routes.createPool, { body: { name: "bench" } });
    const archive = await tinyArchive();
    // One workspace per job: a workspace runs one run at a time, so this is what lets every job queue at once.
    const cvs = await inParallel(
      Array.from({ length: jobs }, (_, i) => `d${i}`),
      8,
      async (ws) => {
        await api(url, routes.createWorkspace, { body: { name: ws, pool: "bench" } });
        const cv = await api(url, routes.uploadConfiguration, { params: { ws }, body: archive });
        return { ws, cv: cv.id as string };
      },
    );
    const sessions = await inParallel(
      Array.from({ length: agents }, (_, i) => i),
      8,
      async (i) => {
        const { token } = await api(url, routes.createPoolToken, { params: { pool: "bench" }, body: {} });
        return (
          await api(url, routes.register, {
            token: token,
            body: { name: `a${i}`, version: "bench", driver: "local", capacity: Math.min(jobs, 1000) },
          })
        ).sessionToken as string;
      },
    );
    let started = 0;
    const handed = new Map<string, number>();
    let refused = 0;
    const loops = sessions.map(async (session) => {
      while (started < jobs) {
        const res = await api(url, routes.pollJob, {
          query: { wait: mode === "long-poll" ? 5000 : 0 },
          token: session,
        });
        if (res.job) {
          handed.set(res.job.jobId, (handed.get(res.job.jobId) ?? 0) + 1);
          try {
            await api(url, routes.startJob, {
              params: { id: res.job.jobId },
              body: { starter: "test" },
              token: res.job.jobToken,
            });
          } catch {
            refused++;
          }
          started++;
        } else if (mode === "interval-1s") {
          await sleep(1000);
        }
      }
    });
    await sleep(500);
    const fromUs = monotonicUs();
    const runIds = await inParallel(
      cvs,
      submitters,
      async ({ ws, cv }) =>
        (await api(url, routes.createRun, { body: { workspace: ws, configurationVersionId: cv } })).id as string,
    );
    await Promise.all(loops);
    const window = { fromUs, toUs: monotonicUs() };
    const rows = await inParallel(
      runIds,
      8,
      async (id) =>
        (await api(url, routes.listRunJobs, { params: { id } })).items as Array<{
          id: string;
          attempt: number;
          createdAt: string;
          startedAt: string | null;
        }>,
    );
    const latencies: number[] = [];
    let reclaimed = 0;
    for (const items of rows) {
      const job = items[0]!;
      if (items.length !== 1 || job.attempt !== 1 || job.startedAt === null) reclaimed++;
      if (job.startedAt !== null) latencies.push(Date.parse(job.startedAt) - Date.parse(job.createdAt));
    }
    const duplicates = [...handed.values()].filter((n) => n > 1).length + refused + (jobs - handed.size);
    return { latencies, duplicates, reclaimed, window };
  } finally {
    await server.stop();
  }
}

/**
 * Long-poll dispatch of `jobs` jobs to `agents` agents beside 1 s interval polling. The
 * long-poll pass's server runs with `--cpu-prof` (sampling, a few per cent of its CPU): its
 * summary goes in the p99 note, so a miss names where the server's time went in this run.
 */
export async function benchDispatch(jobs = 10_000, agents = 100): Promise<Figure[]> {
  const baseline = await measure("interval-1s", jobs, agents);
  const profileDir = mkdtempSync(join(tmpdir(), "drover-bench-dispatch-prof-"));
  let ours: DispatchResult;
  let profile: ProfileSummary;
  try {
    ours = await measure("long-poll", jobs, agents, 1, ["--cpu-prof", `--cpu-prof-dir=${profileDir}`]);
    profile = summarizeProfiles(profileDir, 12, undefined, ours.window);
  } finally {
    rmSync(profileDir, { recursive: true, force: true });
  }
  const correct =
    ours.duplicates === 0 && ours.reclaimed === 0 && baseline.duplicates === 0 && baseline.reclaimed === 0;
  const figure = (metric: string, p: number, target: number | null): Figure => {
    const value = percentile(ours.latencies, p);
    return {
      bench: `dispatch (${jobs} jobs, ${agents} agents, SQLite)`,
      metric,
      unit: "ms",
      value,
      baseline: percentile(baseline.latencies, p),
      baselineLabel: "1 s interval polling",
      target: target === null ? "—" : `≤ ${target} ms`,
      met: target === null ? null : value <= target && correct,
    };
  };
  const p99 = figure("queued→started p99", 99, 20);
  p99.note =
    `${ours.latencies.length} jobs started; jobs handed out twice, refused at start or never handed out: ${ours.duplicates} (baseline ${baseline.duplicates}); ` +
    `jobs not started on their first attempt: ${ours.reclaimed} (baseline ${baseline.reclaimed}); runs submitted one after another as fast as the server accepts them (agents are waiting when most jobs land); ` +
    `the long-poll server's CPU profile from the first submission to the last start (${((ours.window.toUs - ours.window.fromUs) / 1e6).toFixed(1)} s, ${profile.busyMs.toFixed(0)} ms busy), self time by place: ${describeProfile(profile)}; top functions: ${describeFunctions(profile)}`;
  p99.why =
    'the server\'s CPU profile in this figure\'s note (taken in this run); bench/notes/issue-18.md, sections "Dispatch, 10,000 jobs, 100 agents" and "Server pass of 2026-11-26"';
  return [figure("queued→started p50", 50, null), p99, figure("queued→started max", 100, null)];
}
