import { spawn } from "node:child_process";
import { cpSync, mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { routes } from "@drover/protocol";
import { packDir, startAgentProc } from "./agent-runs.js";
import { api, client, cpuSeconds, sleep, startServerProc, track, type ServerProc } from "./harness.js";
import { loadavg } from "node:os";
import { median, type Figure } from "./report.js";

/*
 * The two log figures of the performance issue: a log-heavy apply beside bare terraform, and
 * the throughput of a run's output into the server beside a bare pipe. Both check that every
 * line was stored once, in order. `BENCH_CPU_PROF=<dir>` writes CPU profiles of the
 * agents and servers the benches start (node --cpu-prof) there.
 */

/**
 * Follows a phase's log as `drover run logs --follow` does (long-polls from the last offset) and
 * resolves with the time the line holding `marker` became readable, or undefined if the log
 * completed without it.
 */
async function whenReadable(server: ServerProc, runId: string, marker: string): Promise<number | undefined> {
  let offset = 0;
  let tail = "";
  for (;;) {
    const res = await client(server.url).exchange(routes.runLogs, {
      params: { id: runId },
      query: { phase: "plan", offset, wait: 10_000, limit: 8388608 },
    });
    // The marker may straddle two answers: the end of the last one is searched again.
    const text = tail + res.result.toString("latin1");
    if (text.includes(marker)) return Date.now();
    tail = text.slice(-marker.length);
    offset = Number(res.headers["x-drover-log-offset"]);
    if (res.headers["x-drover-log-complete"] === "true") return undefined;
  }
}

/** Every page of a phase's log, read as the CLI reads it. */
async function readPhaseLog(server: ServerProc, runId: string, phase: "plan" | "apply"): Promise<Buffer> {
  const parts: Buffer[] = [];
  let offset = 0;
  for (;;) {
    const res = await client(server.url).exchange(routes.runLogs, {
      params: { id: runId },
      query: { phase, offset, limit: 8388608 },
    });
    parts.push(res.result);
    offset = Number(res.headers["x-drover-log-offset"]);
    if (res.headers["x-drover-log-complete"] === "true" || res.result.length === 0) break;
  }
  return Buffer.concat(parts);
}

const applyLines = 200_000;
const lineText = (n: number) => `line ${String(n).padStart(6, "0")} ${"x".repeat(26)}`;

/**
 * Checks that terraform's output holds the provisioner's lines 1..count once, in order.
 * terraform's line reader may print a slow line in pieces (trailing whitespace trimmed), so
 * the pieces are joined and whitespace ignored; see test/support/provisioner-lines.ts.
 */
function checkProvisionerLines(text: string, count: number): void {
  let joined = "";
  for (const m of text.matchAll(/\(local-exec\): (.*)$/gm)) if (!m[1]!.startsWith("Executing: [")) joined += m[1]!;
  joined = joined.replace(/\s+/g, "");
  let at = 0;
  for (let n = 1; n <= count; n++) {
    const want = lineText(n).replace(/\s+/g, "");
    if (!joined.startsWith(want, at))
      throw new Error(
        `log-heavy apply: line ${n} is not where it belongs (found ${JSON.stringify(joined.slice(at, at + 40))})`,
      );
    at += want.length;
  }
  if (at !== joined.length)
    throw new Error(`log-heavy apply: ${joined.length - at} characters of provisioner output after line ${count}`);
}

function logHeavyConfig(dir: string): void {
  mkdirSync(dir, { recursive: true });
  writeFileSync(
    join(dir, "main.tf"),
    `resource "terraform_data" "big" {\n  provisioner "local-exec" {\n    command = "seq -f 'line %06g ${"x".repeat(26)}' 1 ${applyLines}"\n  }\n}\n`,
  );
}

/** terraform init/plan/apply of the log-heavy configuration, bare, its output read from a pipe. */
async function bareLogHeavy(config: string): Promise<number> {
  const dir = mkdtempSync(join(tmpdir(), "drover-bench-loud-"));
  cpSync(config, dir, { recursive: true });
  const tfrc = join(dir, ".terraformrc");
  writeFileSync(tfrc, "");
  const env = {
    ...process.env,
    TF_CLI_CONFIG_FILE: tfrc,
    CHECKPOINT_DISABLE: "1",
    TF_IN_AUTOMATION: "1",
    TF_INPUT: "0",
  };
  const started = Date.now();
  for (const args of [
    ["init", "-input=false", "-no-color"],
    ["plan", "-input=false", "-no-color", "-out=plan.tfplan"],
    ["apply", "-input=false", "-no-color", "plan.tfplan"],
  ]) {
    const code = await new Promise<number | null>((resolve) => {
      const child = track(spawn("terraform", args, { cwd: dir, env, stdio: ["ignore", "pipe", "pipe"] }));
      child.stdout.on("data", () => undefined);
      child.stderr.on("data", () => undefined);
      child.on("close", resolve);
    });
    if (code !== 0) throw new Error(`bare terraform ${args[0]} failed`);
  }
  const ms = Date.now() - started;
  rmSync(dir, { recursive: true, force: true });
  return ms;
}

/**
 * Uploads `archive`, starts an auto-apply run, waits until it ends; its time ends at the server's
 * record of the last job finishing. Polled every 250 ms (not faster): the figure does not depend
 * on the interval, and quicker polling would take CPU from the terraform being measured.
 */
async function runUntilEnd(
  server: ServerProc,
  workspace: string,
  archive: Buffer,
): Promise<{ id: string; status: string; ms: number }> {
  const started = Date.now();
  const cv = await api(server.url, routes.uploadConfiguration, { params: { ws: workspace }, body: archive });
  const run = await api(server.url, routes.createRun, {
    body: { workspace, configurationVersionId: cv.id, autoApply: true },
  });
  for (;;) {
    await sleep(250);
    const r = await api(server.url, routes.getRun, { params: { id: run.id } });
    if (!["applied", "planned_and_finished", "errored", "canceled", "discarded"].includes(r.status)) continue;
    const jobs = (await api(server.url, routes.listRunJobs, { params: { id: run.id } })).items as Array<{
      finishedAt: string | null;
    }>;
    const ended = Math.max(...jobs.map((j) => (j.finishedAt ? Date.parse(j.finishedAt) : 0)));
    return { id: run.id, status: r.status, ms: (ended > 0 ? ended : Date.now()) - started };
  }
}

/**
 * A provisioner printing 200,000 short lines (~15 MB of log once terraform prefixes them):
 * upload → applied through server + local agent beside terraform init/plan/apply bare with its
 * output read from a pipe; alternating repetitions, ratio of medians; every run's apply log
 * checked for every line once, in order.
 */
export async function benchLogHeavyApply(reps = 5): Promise<Figure[]> {
  const server = await startServerProc();
  const dir = mkdtempSync(join(tmpdir(), "drover-bench-loud-config-"));
  try {
    const config = join(dir, "config");
    logHeavyConfig(config);
    await api(server.url, routes.createPool, { body: { name: "loud" } });
    const agent = await startAgentProc(server, "loud", "loud-agent");
    const archive = await packDir(config);
    const bare: number[] = [];
    const drover: number[] = [];
    let logBytes = 0;
    try {
      for (let i = 0; i < reps; i++) {
        bare.push(await bareLogHeavy(config));
        await api(server.url, routes.createWorkspace, { body: { name: `loud-${i}`, pool: "loud" } });
        const run = await runUntilEnd(server, `loud-${i}`, archive);
        if (run.status !== "applied") throw new Error(`run ${run.id} ended ${run.status}`);
        drover.push(run.ms);
        const log = await readPhaseLog(server, run.id, "apply");
        logBytes = log.length;
        checkProvisionerLines(log.toString("utf8"), applyLines);
      }
    } finally {
      await agent.stop();
    }
    const ratio = median(drover) / median(bare);
    return [
      {
        bench: `log-heavy apply (a provisioner printing ${applyLines.toLocaleString("en")} lines)`,
        metric: `wall time, init+plan+apply, median of ${reps}`,
        unit: "ms",
        value: median(drover),
        baseline: median(bare),
        baselineLabel: "terraform bare, output read from a pipe",
        target: "≤ 1.10×",
        met: ratio <= 1.1,
        note: `apply log ${(logBytes / 2 ** 20).toFixed(1)} MiB, every line stored once in order (checked each run); through Drover: ${drover.join(", ")} ms; bare: ${bare.join(", ")} ms`,
      },
    ];
  } finally {
    rmSync(dir, { recursive: true, force: true });
    await server.stop();
  }
}

/**
 * A run printing 50 MB of numbered lines through a post-plan hook (hook and terraform output
 * share one log pipeline: pipe reading, redaction, batching, offsets, the server): the time
 * from the hook's start to the job's end on the server (which the agent reports only once the
 * server has acknowledged every log byte) beside the same command read bare from a pipe, and a
 * check that every line arrived once, in order. terraform's own local-exec output is slower
 * than this (its UI, not Drover, bounds that path): that is the log-heavy apply above.
 */
export async function benchLogStreaming(megabytes = 50): Promise<Figure[]> {
  const server = await startServerProc();
  const dir = mkdtempSync(join(tmpdir(), "drover-bench-logs-"));
  try {
    const lines = Math.round((megabytes * 1024 * 1024) / 100);
    const printer = `awk 'BEGIN { for (i = 1; i <= ${lines}; i++) printf "line %010d %s\\n", i, "${"x".repeat(83)}" }'`;
    const hooks = join(dir, "hooks");
    mkdirSync(hooks);
    const startedFile = join(dir, "hook-started");
    const endedFile = join(dir, "hook-ended");
    // The hook records its start and the printer's end (ms since the epoch; the server's clock).
    writeFileSync(
      join(hooks, "post-plan"),
      `#!/bin/sh\nset -e\ndate +%s%3N > '${startedFile}'\n${printer}\ndate +%s%3N > '${endedFile}'\n`,
      { mode: 0o755 },
    );
    const config = join(dir, "config");
    mkdirSync(config);
    writeFileSync(join(config, "main.tf"), 'resource "terraform_data" "quiet" {}\n');

    const bareStart = process.hrtime.bigint();
    await new Promise<void>((resolve) => {
      const child = track(spawn("sh", ["-c", printer], { stdio: ["ignore", "pipe", "inherit"] }));
      child.stdout.on("data", () => undefined);
      child.on("close", () => resolve());
    });
    const bareSeconds = Number(process.hrtime.bigint() - bareStart) / 1e9;

    await api(server.url, routes.createPool, { body: { name: "logs" } });
    await api(server.url, routes.createWorkspace, { body: { name: "logs", pool: "logs" } });
    const agent = await startAgentProc(server, "logs", "log-agent", { DROVER_AGENT_HOOKS_DIR: hooks });
    const cv = await api(server.url, routes.uploadConfiguration, {
      params: { ws: "logs" },
      body: await packDir(config),
    });
    // The server's CPU, sampled as the run is polled: its use from the hook's start to the job's
    // end (to within one poll) is what the streamed MBs cost it.
    const cpuSamples: Array<{ at: number; cpu: number }> = [];
    const loadBefore = loadavg()[0]!;
    const created = await api(server.url, routes.createRun, {
      body: { workspace: "logs", configurationVersionId: cv.id, planOnly: true },
    });
    const lastLine = `line ${String(lines).padStart(10, "0")} `;
    const lastLineReadable = whenReadable(server, created.id, lastLine);
    lastLineReadable.catch(() => undefined);
    let run: { status: string };
    for (;;) {
      run = await api(server.url, routes.getRun, { params: { id: created.id } });
      cpuSamples.push({ at: Date.now(), cpu: cpuSeconds(server.child.pid!) });
      if (["planned_and_finished", "errored", "canceled"].includes(run.status)) break;
      await sleep(50);
    }
    await agent.stop();
    if (run.status !== "planned_and_finished") throw new Error(`log run ended ${run.status}`);
    const log = await readPhaseLog(server, created.id, "plan");
    let expected = 1;
    for (const l of log.toString("utf8").split("\n")) {
      const m = /^line (\d{10}) /.exec(l);
      if (!m) continue;
      if (Number(m[1]) !== expected)
        throw new Error(`log out of order or lost: expected line ${expected}, got ${m[1]}`);
      expected++;
    }
    if (expected - 1 !== lines) throw new Error(`log incomplete: ${expected - 1} of ${lines} lines`);
    const jobs = await api(server.url, routes.listRunJobs, { params: { id: created.id } });
    const plan = jobs.items[0]!;
    const hookStarted = Number(readFileSync(startedFile, "utf8").trim());
    const hookEnded = Number(readFileSync(endedFile, "utf8").trim());
    const lastLineAt = await lastLineReadable;
    if (lastLineAt === undefined) throw new Error("the log completed without its last line");
    const seconds = (lastLineAt - hookStarted) / 1000;
    const toJobEnd = (Date.parse(plan.finishedAt!) - hookStarted) / 1000;
    const atHookStart = [...cpuSamples].reverse().find((c) => c.at <= hookStarted) ?? cpuSamples[0]!;
    const serverCpu = cpuSamples.at(-1)!.cpu - atHookStart.cpu;
    const jobSeconds = (Date.parse(plan.finishedAt!) - Date.parse(plan.startedAt!)) / 1000;
    const mb = (lines * 100) / (1024 * 1024);
    return [
      {
        bench: `log streaming (${megabytes} MB from a run's hook)`,
        metric: "throughput into the server",
        unit: "MB/s",
        value: mb / seconds,
        baseline: mb / bareSeconds,
        baselineLabel: "same command into a bare pipe",
        target: "≥ 100 MB/s",
        met: mb / seconds >= 100,
        note: `${lines} lines, all present and in order; hook start → last line readable on the server (followed as \`drover run logs --follow\` does) ${seconds.toFixed(2)} s (${bareSeconds.toFixed(2)} s bare), of which the printer ran ${((hookEnded - hookStarted) / 1000).toFixed(2)} s; hook start → plan job finished ${toJobEnd.toFixed(2)} s (after the hook, the job renders the plan JSON and uploads); the whole plan job, with terraform init and plan, ${jobSeconds.toFixed(1)} s; server CPU ${((serverCpu * 1000) / mb).toFixed(1)} ms per MB from the hook's start (±50 ms) to the job's end, the follower's reads included; load average ${loadBefore.toFixed(1)} at the start`,
      },
    ];
  } finally {
    rmSync(dir, { recursive: true, force: true });
    await server.stop();
  }
}
