import { spawn } from "node:child_process";
import { mkdirSync, mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { packDir, startAgentProc, type AgentProc } from "./agent-runs.js";
import { inParallel } from "./dispatch.js";
import { api, cpuSeconds, sleep, startServerProc, track } from "./harness.js";
import { describeProfile, summarizeProfiles } from "./profile.js";
import { type Figure } from "./report.js";
import { routes } from "@drover/protocol";

const config = 'resource "terraform_data" "trivial" {}\n';

/** `terraform init` + `plan` of the trivial configuration in a fresh directory, as the agent would. */
function bareRun(): Promise<void> {
  const dir = mkdtempSync(join(tmpdir(), "drover-bench-tp-"));
  writeFileSync(join(dir, "main.tf"), config);
  const tfrc = join(dir, ".terraformrc");
  writeFileSync(tfrc, "");
  const env = {
    ...process.env,
    TF_CLI_CONFIG_FILE: tfrc,
    CHECKPOINT_DISABLE: "1",
    TF_IN_AUTOMATION: "1",
    TF_INPUT: "0",
  };
  const step = (args: string[]) =>
    new Promise<void>((resolve, reject) => {
      const child = track(spawn("terraform", args, { cwd: dir, env, stdio: "ignore" }));
      child.on("exit", (code) =>
        code === 0 ? resolve() : reject(new Error(`bare terraform ${args[0]} exited ${code}`)),
      );
    });
  return step(["init", "-input=false", "-no-color"])
    .then(() => step(["plan", "-input=false", "-no-color", "-out=plan.tfplan"]))
    .finally(() => rmSync(dir, { recursive: true, force: true }));
}

/**
 * Runs per minute one server sustains: `runs` plan-only runs of a one-resource configuration
 * (one workspace each, all queued at once) through `agents` real agents, from the first
 * submission to the last job's end; with the server's CPU per run and a CPU profile of the
 * server (`--cpu-prof`) naming where its time goes. Baseline: the same number of bare
 * `terraform init` + `plan` in as many parallel loops, the machine's own limit for this work.
 */
export async function benchThroughput(runs = 60, agents = 20): Promise<Figure[]> {
  const profileDir = mkdtempSync(join(tmpdir(), "drover-bench-prof-"));
  const server = await startServerProc({}, ["--cpu-prof", `--cpu-prof-dir=${profileDir}`]);
  const fleet: AgentProc[] = [];
  let result: { perMinute: number; cpuPerRun: number; failed: number } | undefined;
  try {
    await api(server.url, routes.createPool, { body: { name: "tp" } });
    const dir = mkdtempSync(join(tmpdir(), "drover-bench-tpcfg-"));
    mkdirSync(join(dir, "cfg"));
    writeFileSync(join(dir, "cfg", "main.tf"), config);
    const archive = await packDir(join(dir, "cfg"));
    rmSync(dir, { recursive: true, force: true });
    const workspaces = await inParallel(
      Array.from({ length: runs }, (_, i) => `tp${i}`),
      4,
      async (ws) => {
        await api(server.url, routes.createWorkspace, { body: { name: ws, pool: "tp" } });
        const cv = await api(server.url, routes.uploadConfiguration, { params: { ws }, body: archive });
        return { ws, cv: cv.id as string };
      },
    );
    for (let i = 0; i < agents; i++) fleet.push(await startAgentProc(server, "tp", `tp-agent-${i}`));
    const cpu0 = cpuSeconds(server.child.pid!);
    const t0 = Date.now();
    const ids = await inParallel(
      workspaces,
      4,
      async ({ ws, cv }) =>
        (
          await api(server.url, routes.createRun, {
            body: { workspace: ws, configurationVersionId: cv, planOnly: true },
          })
        ).id as string,
    );
    const ended = new Map<string, string>();
    while (ended.size < ids.length) {
      for (const id of ids.filter((i) => !ended.has(i))) {
        const run = await api(server.url, routes.getRun, { params: { id } });
        if (["planned_and_finished", "errored", "canceled"].includes(run.status)) ended.set(id, run.status);
      }
      await sleep(200);
    }
    const cpu = cpuSeconds(server.child.pid!) - cpu0;
    // The end is the server's record of the last job finishing, not this loop's polling.
    const finishes = await inParallel(ids, 4, async (id) =>
      Math.max(
        ...((await api(server.url, routes.listRunJobs, { params: { id } })).items as Array<{ finishedAt: string }>).map(
          (j) => Date.parse(j.finishedAt),
        ),
      ),
    );
    const minutes = (Math.max(...finishes) - t0) / 60_000;
    result = {
      perMinute: runs / minutes,
      cpuPerRun: (cpu / runs) * 1000,
      failed: [...ended.values()].filter((s) => s !== "planned_and_finished").length,
    };
  } finally {
    for (const a of fleet) await a.stop();
    await server.stop();
  }
  const profile = summarizeProfiles(profileDir);
  rmSync(profileDir, { recursive: true, force: true });

  const b0 = Date.now();
  await inParallel(
    Array.from({ length: runs }, (_, i) => i),
    agents,
    () => bareRun(),
  );
  const bareMinutes = (Date.now() - b0) / 60_000;
  if (result.failed > 0)
    throw new Error(`${result.failed} of ${runs} throughput runs did not end planned_and_finished`);
  const bench = `throughput (${runs} plan-only runs of one terraform_data, ${agents} agents, SQLite)`;
  return [
    {
      bench,
      metric: "runs per minute",
      unit: "runs/min",
      value: result.perMinute,
      baseline: runs / bareMinutes,
      baselineLabel: `bare terraform init + plan, ${agents} in parallel`,
      target: "reported",
      met: null,
      note:
        `every run planned_and_finished; the server's CPU profile over the whole bench (${profile.busyMs.toFixed(0)} ms busy), self time by place: ${describeProfile(profile)}; ` +
        `top functions: ${profile.byFunction
          .slice(0, 5)
          .map((f) => `${f.fn} ${(f.share * 100).toFixed(0)}%`)
          .join(", ")}`,
    },
    {
      bench,
      metric: "server CPU per run",
      unit: "ms",
      value: result.cpuPerRun,
      baseline: null,
      baselineLabel: "",
      target: "reported",
      met: null,
    },
  ];
}
