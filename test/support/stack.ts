import { mkdirSync, mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { runCliInProcess } from "./cli.js";
import { runDrover, spawnDrover, type Proc } from "./processes.js";
import { startTestServer, type TestServer } from "./server.js";
import { readPhaseLog, waitForRunStatus } from "./typed-api.js";
import { routes } from "@drover/protocol";
import type { StartOptions } from "@drover/server";
import { pollWait } from "./poll.js";

/** A real server with a pool, its token, and helpers to start real agents and run the real CLI. */
export interface Stack {
  server: TestServer;
  pool: string;
  poolToken: string;
  poolTokenId: string;
  dir: string;
  /** Environment every agent and CLI process gets (terraform offline config included). */
  baseEnv: NodeJS.ProcessEnv;
  /** Starts an agent of `pool` (by default the stack's; give another pool's token in `env`). */
  startAgent(name: string, env?: Record<string, string>, pool?: string): Promise<Proc>;
  /** A pool of a test's own, so its runs land only on its agents; returns a token to start them with. */
  createPool(name: string): Promise<{ pool: string; token: string }>;
  /**
   * Runs a user command as the admin, in this process; `subprocess` runs the real binary instead
   * (tests of the binary itself), killed after `timeoutMs`.
   */
  cli(
    args: string[],
    options?: { env?: Record<string, string>; subprocess?: boolean; timeoutMs?: number },
  ): Promise<{ code: number; stdout: string; stderr: string }>;
  /** Uploads a directory and starts a run without following it; returns the run id. */
  startRun(dir: string, workspace: string, flags?: string[]): Promise<string>;
  waitForRun(runId: string, statuses: string[], timeoutMs?: number): Promise<any>;
  stop(): Promise<void>;
}

export async function startStack(serverEnv: Record<string, string> = {}, options: StartOptions = {}): Promise<Stack> {
  const server = await startTestServer(serverEnv, options);
  const dir = mkdtempSync(join(tmpdir(), "drover-e2e-"));
  const tfrc = join(dir, "terraformrc");
  writeFileSync(tfrc, "");
  const pool = "e2e";
  await server.api(routes.createPool, { body: { name: pool } });
  const tok = await server.api(routes.createPoolToken, { params: { pool }, body: { description: "e2e" } });
  const baseEnv: NodeJS.ProcessEnv = {
    ...process.env,
    TF_CLI_CONFIG_FILE: tfrc,
    CHECKPOINT_DISABLE: "1",
    DROVER_URL: server.url,
    DROVER_CONFIG_DIR: join(dir, "cli-config"),
  };
  delete baseEnv.DROVER_TOKEN;
  const agents: Proc[] = [];

  const stack: Stack = {
    server,
    pool,
    poolToken: tok.body.token,
    poolTokenId: tok.body.id,
    dir,
    baseEnv,
    async createPool(name) {
      await server.api(routes.createPool, { body: { name } });
      const created = await server.api(routes.createPoolToken, { params: { pool: name }, body: { description: name } });
      return { pool: name, token: created.body.token as string };
    },
    async startAgent(name, env = {}, agentPool = pool) {
      const agentDir = join(dir, `agent-${name}`);
      const proc = spawnDrover(["agent", "run"], {
        ...baseEnv,
        DROVER_TOKEN: tok.body.token,
        DROVER_AGENT_NAME: name,
        DROVER_AGENT_DATA_DIR: join(agentDir, "data"),
        DROVER_AGENT_CACHE_DIR: join(agentDir, "cache"),
        DROVER_AGENT_HEALTH_PORT: "0",
        DROVER_AGENT_LOG_FORMAT: "json",
        ...env,
      });
      agents.push(proc);
      // Registered once the server lists it; generous: agents started together on a busy machine are slow.
      const deadline = Date.now() + 60_000;
      for (let attempt = 0; ; attempt++) {
        const listed = await server.api(routes.listAgents, { query: { pool: agentPool } });
        if (listed.body.items.some((a: any) => a.name === name && a.status !== "offline")) return proc;
        if (proc.child.exitCode !== null || Date.now() > deadline)
          throw new Error(`agent ${name} did not register:\n${proc.output()}`);
        await pollWait(attempt);
      }
    },
    cli(args, options = {}) {
      const env = { ...baseEnv, DROVER_TOKEN: server.adminToken, ...options.env };
      return options.subprocess ? runDrover(args, env, options.timeoutMs) : runCliInProcess(args, env);
    },
    async startRun(configDir, workspace, flags = []) {
      const res = await stack.cli([
        "run",
        "start",
        configDir,
        "--workspace",
        workspace,
        "--no-follow",
        "--json",
        ...flags,
      ]);
      // With --no-follow the CLI exits 0 once the run exists; anything else fails here with what it printed.
      let id: unknown;
      try {
        id = res.code === 0 ? (JSON.parse(res.stdout) as { id?: unknown }).id : undefined;
      } catch {
        id = undefined;
      }
      if (typeof id !== "string")
        throw new Error(
          `run start failed (exit ${res.code}): stdout ${JSON.stringify(res.stdout)}, stderr ${JSON.stringify(res.stderr)}`,
        );
      return id;
    },
    waitForRun(runId, statuses, timeoutMs = 90_000) {
      return waitForRunStatus(server.url, server.adminToken, runId, statuses, timeoutMs);
    },
    async stop() {
      await Promise.all(agents.map((a) => a.stop("SIGKILL")));
      await server.stop();
      rmSync(dir, { recursive: true, force: true });
    },
  };
  return stack;
}

/** Reads a phase's whole log through the user API. */
export async function runLog(server: TestServer, runId: string, phase: "plan" | "apply"): Promise<string> {
  return readPhaseLog(server.url, server.adminToken, runId, phase);
}

/** Writes a configuration directory from file name → content. */
export function writeConfig(root: string, name: string, files: Record<string, string>): string {
  const dir = join(root, name);
  rmSync(dir, { recursive: true, force: true });
  for (const [file, content] of Object.entries(files)) {
    const path = join(dir, file);
    mkdirp(path);
    writeFileSync(path, content);
  }
  return dir;
}

function mkdirp(file: string): void {
  const parts = file.split("/").slice(0, -1).join("/");
  if (parts) mkdirSync(parts, { recursive: true });
}
