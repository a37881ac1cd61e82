import assert from "node:assert/strict";
import { existsSync, mkdirSync, readFileSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { rawTarGz } from "./archives.js";
import { spawnDrover, type Proc } from "./processes.js";
import { readPhaseLog, routeCall, type ApiResponse, type RouteArgs } from "./typed-api.js";
import { routes, type Route } from "@drover/protocol";

/*
 * Fault tests' building blocks: real `drover server` and `drover agent run` processes, and an
 * apply whose length the test controls. The apply prints numbered lines until the test creates
 * a gate file, so a fault can land mid-apply without guessing durations, and the log can be
 * checked line by line afterwards (nothing lost, nothing doubled).
 */

export type { ApiResponse };
// Fault tests wait on runs through the same long-poll as every test.
export { waitForRunStatus } from "./typed-api.js";

/** Calls a route of `url` with a bearer token; never throws on an HTTP error status. */
export async function call<R extends Route>(
  url: string,
  route: R,
  token: string,
  ...[input]: RouteArgs<R>
): Promise<ApiResponse> {
  return routeCall(url, route, ...([{ token, ...input }] as RouteArgs<R>));
}

/** Like `call`, but a status ≥ 300 throws with the body. */
export async function callOk<R extends Route>(
  url: string,
  route: R,
  token: string,
  ...input: RouteArgs<R>
): Promise<any> {
  const res = await call(url, route, token, ...input);
  if (res.status >= 300) throw new Error(`${route.method} ${route.path}: ${res.status} ${JSON.stringify(res.body)}`);
  return res.body;
}

/** Polls `check` until it returns a value other than undefined, or fails after `timeoutMs`. */
export async function eventually<T>(what: string, check: () => Promise<T | undefined>, timeoutMs = 60_000): Promise<T> {
  const deadline = Date.now() + timeoutMs;
  let last: unknown;
  for (;;) {
    try {
      const v = await check();
      if (v !== undefined) return v;
    } catch (err) {
      last = err;
    }
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}${last ? `: ${String(last)}` : ""}`);
    await new Promise((r) => setTimeout(r, 100));
  }
}

/** A `drover server` process and the URL it listens on. */
export interface ServerProc {
  proc: Proc;
  url: string;
}

/** Starts `drover server` with `env` added (on a random port unless it sets DROVER_PORT). */
export async function startServerProc(env: Record<string, string>): Promise<ServerProc> {
  const proc = spawnDrover(["server"], { ...process.env, DROVER_LOG_LEVEL: "info", DROVER_PORT: "0", ...env });
  const url = (await proc.waitFor(/listening on (http:\/\/\S+)/, 60_000))[1]!;
  return { proc, url };
}

/** Starts `drover agent run` against `serverUrl` and waits until the server lists it online. */
export async function startAgentProc(options: {
  serverUrl: string;
  adminToken: string;
  poolToken: string;
  pool: string;
  name: string;
  dir: string;
}): Promise<Proc> {
  const agentDir = join(options.dir, `agent-${options.name}`);
  const tfrc = join(options.dir, "terraformrc");
  if (!existsSync(tfrc)) writeFileSync(tfrc, "");
  const env: NodeJS.ProcessEnv = {
    ...process.env,
    TF_CLI_CONFIG_FILE: tfrc,
    CHECKPOINT_DISABLE: "1",
    DROVER_URL: options.serverUrl,
    DROVER_TOKEN: options.poolToken,
    DROVER_AGENT_NAME: options.name,
    DROVER_AGENT_DATA_DIR: join(agentDir, "data"),
    DROVER_AGENT_CACHE_DIR: join(agentDir, "cache"),
    DROVER_AGENT_HEALTH_PORT: "0",
    DROVER_AGENT_LOG_FORMAT: "json",
  };
  const proc = spawnDrover(["agent", "run"], env);
  await eventually(`agent ${options.name} to register`, async () => {
    if (proc.child.exitCode !== null) throw new Error(`agent ${options.name} exited:\n${proc.output()}`);
    const listed = await callOk(options.serverUrl, routes.listAgents, options.adminToken, {
      query: { pool: options.pool },
    });
    return listed.items.some((a: any) => a.name === options.name && a.status !== "offline") ? true : undefined;
  });
  return proc;
}

/** Files of a gated apply: prints `tick-N` lines until `gate` exists, then `ticks-done-N`. */
export function gatedApplyConfig(gate: string, marker: string): string {
  // Shell arithmetic `$((…))` is not HCL interpolation (only `${` is), so it passes through.
  return `resource "terraform_data" "gated" {
  input = "${gate}"
  provisioner "local-exec" {
    command = "echo started >> ${marker}; i=0; while [ ! -f ${gate} ]; do i=$((i+1)); echo tick-$i; sleep 0.2; done; echo ticks-done-$i"
  }
}
`;
}

/** Creates a workspace in `pool` and starts an auto-applied run of `mainTf`; returns the run id. */
export async function startGatedRun(
  url: string,
  token: string,
  pool: string,
  workspace: string,
  mainTf: string,
): Promise<string> {
  await callOk(url, routes.createWorkspace, token, { body: { name: workspace, pool } });
  const cv = await callOk(url, routes.uploadConfiguration, token, {
    params: { ws: workspace },
    body: rawTarGz([{ path: "main.tf", content: mainTf }]),
  });
  const run = await callOk(url, routes.createRun, token, {
    body: { workspace, configurationVersionId: cv.id, autoApply: true },
  });
  return run.id as string;
}

/** A phase's whole log, following offsets to the end. */
export async function phaseLog(url: string, token: string, runId: string, phase: "plan" | "apply"): Promise<string> {
  return readPhaseLog(url, token, runId, phase);
}

/** Waits until the apply log shows at least `n` ticks. */
export async function waitForTicks(url: string, token: string, runId: string, n: number): Promise<void> {
  await eventually(`${n} ticks in the apply log`, async () => {
    const log = await phaseLog(url, token, runId, "apply");
    const ticks = [...log.matchAll(/tick-(\d+)$/gm)].length;
    return ticks >= n ? true : undefined;
  });
}

/** Asserts the gated apply's log holds tick-1…tick-N exactly once each, in order, then the end line. */
export function assertWholeTicks(log: string): number {
  const done = log.match(/ticks-done-(\d+)$/m);
  assert.ok(done, `the apply log ends with ticks-done:\n${log.slice(-2000)}`);
  const n = Number(done[1]);
  const seen = [...log.matchAll(/: tick-(\d+)$/gm)].map((m) => Number(m[1]));
  assert.deepEqual(
    seen,
    Array.from({ length: n }, (_, i) => i + 1),
    "every tick line once, in order",
  );
  assert.equal([...log.matchAll(/ticks-done-\d+$/gm)].length, 1, "the end line once");
  return n;
}

/** Asserts every job of the run ran in exactly one attempt and the provisioner started once. */
export async function assertRanOnce(url: string, token: string, runId: string, marker: string): Promise<void> {
  const jobs = await callOk(url, routes.listRunJobs, token, { params: { id: runId } });
  for (const job of jobs.items) assert.equal(job.attempt, 1, `the ${job.phase} job ran in one attempt`);
  assert.equal(readFileSync(marker, "utf8"), "started\n", "the provisioner ran once");
}

/** Makes sure `dir` exists and returns it. */
export function ensureDir(dir: string): string {
  mkdirSync(dir, { recursive: true });
  return dir;
}
