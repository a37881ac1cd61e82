import { mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { create } from "tar";
import { api, sleep, startServerProc } from "./harness.js";
import { percentile, type Figure } from "./report.js";

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

/**
 * Queued → started latency for `jobs` jobs handed to `agents` waiting agents. Agents are
 * protocol clients that start each job the moment they receive it, so the figure is the
 * server's dispatch path (queue → wake-up → claim → start), measured by the server's own
 * timestamps.
 */
async function measure(mode: Mode, jobs: number, agents: number): Promise<number[]> {
  const server = await startServerProc({ DROVER_LEASE_TTL_SECONDS: "600" });
  try {
    const url = server.url;
    await api(url, "POST", "/api/v1/pools", undefined, { name: "bench" });
    const archive = await tinyArchive();
    const cvs: Array<{ ws: string; cv: string }> = [];
    for (let i = 0; i < jobs; i++) {
      const ws = `d${i}`;
      await api(url, "POST", "/api/v1/workspaces", undefined, { name: ws, pool: "bench" });
      const cv = await api(url, "POST", `/api/v1/workspaces/${ws}/configuration-versions`, undefined, archive, "application/gzip");
      cvs.push({ ws, cv: cv.id });
    }
    const sessions: string[] = [];
    for (let i = 0; i < agents; i++) {
      const { token } = await api(url, "POST", "/api/v1/pools/bench/tokens", undefined, {});
      sessions.push((await api(url, "POST", "/api/agent/v1/register", token, { name: `a${i}`, version: "bench", driver: "local", capacity: 1000 })).sessionToken);
    }
    let started = 0;
    const loops = sessions.map(async (session) => {
      while (started < jobs) {
        const res = await api(url, "POST", `/api/agent/v1/jobs/next?wait=${mode === "long-poll" ? 5000 : 0}`, session);
        if (res.job) {
          await api(url, "POST", `/api/agent/v1/jobs/${res.job.jobId}/start`, res.job.jobToken);
          started++;
        } else if (mode === "interval-1s") {
          await sleep(1000);
        }
      }
    });
    await sleep(500);
    const runIds: string[] = [];
    for (const { ws, cv } of cvs) {
      runIds.push((await api(url, "POST", "/api/v1/runs", undefined, { workspace: ws, configurationVersionId: cv })).id);
      // Spread the queueing a little, as real runs arrive, so agents are waiting when most jobs land.
      if (runIds.length % 50 === 0) await sleep(20);
    }
    await Promise.all(loops);
    const latencies: number[] = [];
    for (const id of runIds) {
      const job = (await api(url, "GET", `/api/v1/runs/${id}/jobs`)).items[0];
      latencies.push(Date.parse(job.startedAt) - Date.parse(job.createdAt));
    }
    return latencies;
  } finally {
    await server.stop();
  }
}

export async function benchDispatch(jobs = 1000, agents = 10): Promise<Figure[]> {
  const baseline = await measure("interval-1s", jobs, agents);
  const ours = await measure("long-poll", jobs, agents);
  const figure = (metric: string, p: number, target: number | null): Figure => {
    const value = percentile(ours, p);
    return {
      bench: `dispatch (${jobs} jobs, ${agents} agents, SQLite)`,
      metric,
      unit: "ms",
      value,
      baseline: percentile(baseline, p),
      baselineLabel: "1 s interval polling",
      target: target === null ? "—" : `≤ ${target} ms`,
      met: target === null ? null : value <= target,
    };
  };
  return [figure("queued→started p50", 50, 20), figure("queued→started p99", 99, 100), figure("queued→started max", 100, null)];
}
