import { spawn, type ChildProcess } from "node:child_process";
import { mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { create } from "tar";
import { api, droverBin, profileFlags, sleep, track, type ServerProc } from "./harness.js";
import { routes } from "@drover/protocol";

/** A real `drover agent run` process registered with a server. */
export interface AgentProc {
  child: ChildProcess;
  dir: string;
  stop(): Promise<void>;
}

export async function startAgentProc(
  server: ServerProc,
  pool: string,
  name: string,
  env: Record<string, string> = {},
): Promise<AgentProc> {
  const { token } = await api(server.url, routes.createPoolToken, { params: { pool }, body: {} });
  const dir = mkdtempSync(join(tmpdir(), "drover-bench-agent-"));
  const tfrc = join(dir, "terraformrc");
  writeFileSync(tfrc, "");
  const child = spawn(process.execPath, [...profileFlags("agent"), droverBin, "agent", "run"], {
    env: {
      ...process.env,
      DROVER_TOKEN: token,
      DROVER_AGENT_NAME: name,
      DROVER_AGENT_DATA_DIR: join(dir, "data"),
      DROVER_AGENT_CACHE_DIR: join(dir, "cache"),
      DROVER_AGENT_HEALTH_PORT: "0",
      DROVER_AGENT_LOG_FORMAT: "json",
      TF_CLI_CONFIG_FILE: tfrc,
      CHECKPOINT_DISABLE: "1",
      ...env,
    },
    stdio: ["ignore", "ignore", "inherit"],
  });
  track(child);
  for (let i = 0; i < 200; i++) {
    const agents = await api(server.url, routes.listAgents, { query: { pool } });
    if (agents.items.some((a: { name: string; status: string }) => a.name === name && a.status !== "offline")) break;
    await sleep(50);
  }
  return {
    child,
    dir,
    async stop() {
      // Already ended (killed with its abandoned bench, or crashed): waiting for "exit" would hang.
      if (child.exitCode === null && child.signalCode === null) {
        const exited = new Promise((r) => child.once("exit", r));
        child.kill("SIGTERM");
        await exited;
      }
      rmSync(dir, { recursive: true, force: true });
    },
  };
}

/** Packs a directory as a configuration upload. */
export async function packDir(dir: string): Promise<Buffer> {
  const chunks: Buffer[] = [];
  for await (const c of create(
    { gzip: true, cwd: dir, filter: (p) => !p.includes(".terraform") && !p.includes("tfstate") },
    ["."],
  ) as AsyncIterable<Buffer>)
    chunks.push(c);
  return Buffer.concat(chunks);
}

/** Uploads `archive` to `workspace`, starts an auto-apply run and waits until it ends. */
/** Where a run's wall time went, in ms, from the server's job records. */
export interface RunTimeline {
  /** Upload start → plan job started (upload, run creation, dispatch, the agent's claim). */
  toPlan: number;
  plan: number;
  /** Plan job finished → apply job started (queueing the apply, dispatch, claim). */
  handoff: number;
  apply: number;
}

export async function runToCompletion(
  server: ServerProc,
  workspace: string,
  archive: Buffer,
): Promise<{ id: string; status: string; ms: number; timeline: RunTimeline | null }> {
  const started = Date.now();
  const cv = await api(server.url, routes.uploadConfiguration, { params: { ws: workspace }, body: archive });
  const run = await api(server.url, routes.createRun, {
    body: { workspace, configurationVersionId: cv.id, autoApply: true },
  });
  for (;;) {
    const r = await api(server.url, routes.getRun, { params: { id: run.id } });
    if (["applied", "planned_and_finished", "errored", "canceled", "discarded"].includes(r.status)) {
      // The end is the server's own record of the last job finishing (same machine, same
      // clock), so this loop's polling interval does not count against Drover.
      const jobs = (await api(server.url, routes.listRunJobs, { params: { id: run.id } })).items as Array<{
        phase: string;
        startedAt: string | null;
        finishedAt: string | null;
      }>;
      const ended = Math.max(...jobs.map((j) => (j.finishedAt ? Date.parse(j.finishedAt) : 0)));
      const plan = jobs.find((j) => j.phase === "plan");
      const apply = jobs.find((j) => j.phase === "apply");
      const t = (s: string | null | undefined) => (s ? Date.parse(s) : NaN);
      const timeline =
        plan && apply
          ? {
              toPlan: t(plan.startedAt) - started,
              plan: t(plan.finishedAt) - t(plan.startedAt),
              handoff: t(apply.startedAt) - t(plan.finishedAt),
              apply: t(apply.finishedAt) - t(apply.startedAt),
            }
          : null;
      return { id: run.id, status: r.status, ms: (ended > 0 ? ended : Date.now()) - started, timeline };
    }
    await sleep(20);
  }
}
