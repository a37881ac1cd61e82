import { spawn, type ChildProcess } from "node:child_process";
import { mkdtempSync, readFileSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";
import { type ResultOf, type Route } from "@drover/protocol";
import { DroverClient, type RequestOf } from "@drover/runtime";

/** The idle agent's RSS target, in MB (decision 0048). */
export const idleAgentTargetMb = 80;

export const repoRoot = join(dirname(fileURLToPath(import.meta.url)), "..", "..");
export const droverBin = join(repoRoot, "packages", "cli", "dist", "src", "main.js");
export const adminToken = "drv_u_bench-admin.0123456789abcdefghij0123456789ab";

/** A `drover server` process on a random port. */
export interface ServerProc {
  url: string;
  child: ChildProcess;
  dir: string;
  stop(): Promise<void>;
}

/**
 * Node flags writing a CPU profile of a bench's `name` process into BENCH_CPU_PROF
 * (--cpu-prof is refused in NODE_OPTIONS); none when that is unset.
 */
export function profileFlags(name: string): string[] {
  const dir = process.env.BENCH_CPU_PROF;
  return dir ? ["--cpu-prof", `--cpu-prof-dir=${dir}`, `--cpu-prof-name=${name}-${Date.now()}.cpuprofile`] : [];
}

const tracked = new Set<ChildProcess>();
const stoppers = new Set<() => void>();

/**
 * Records a process a bench spawned, so `stopTracked` can end it when its bench times out or
 * the run ends (a timed-out bench never reaches its own `finally`); returns it.
 */
export function track<C extends ChildProcess>(child: C): C {
  if (child.exitCode === null && child.signalCode === null) {
    tracked.add(child);
    child.once("exit", () => tracked.delete(child));
  }
  return child;
}

/**
 * Records how to stop something that is not a child of this process (the PostgreSQL cluster
 * pg_ctl daemonizes); returns the function that forgets it once the bench stopped it itself.
 */
export function trackStop(stop: () => void): () => void {
  stoppers.add(stop);
  return () => stoppers.delete(stop);
}

/** How long an abandoned bench's process gets to end after SIGTERM before it is killed. */
const stopGraceMs = 5_000;

/**
 * Ends every tracked process still running and runs every recorded stop, so an abandoned
 * bench's servers, fleets and clusters do not load the benches after it or outlive the run;
 * returns how many it ended. SIGTERM first: an agent ends its steps' process groups (terraform,
 * a provisioner) only on it; SIGKILL after `graceMs` for one that does not exit.
 */
export function stopTracked(graceMs = stopGraceMs): number {
  let ended = 0;
  for (const child of tracked) {
    tracked.delete(child);
    if (child.exitCode === null && child.signalCode === null && child.kill("SIGTERM")) {
      ended++;
      const kill = setTimeout(() => child.kill("SIGKILL"), graceMs);
      // The run may exit before the grace ends; SIGTERM was sent all the same.
      kill.unref();
      child.once("exit", () => clearTimeout(kill));
    }
  }
  for (const stop of stoppers) {
    stoppers.delete(stop);
    try {
      stop();
      ended++;
    } catch (err) {
      process.stderr.write(
        `stopping an abandoned bench's process failed: ${err instanceof Error ? err.message : String(err)}\n`,
      );
    }
  }
  return ended;
}

/** How many of a bench server's log lines reach the bench's stderr. */
const serverLogLines = 40;

/**
 * Starts `drover server`; `nodeArgs` go to node itself (e.g. `--cpu-prof`, which NODE_OPTIONS refuses);
 * `profileName` starts the name of its profile under BENCH_CPU_PROF, so a reader can tell the servers apart.
 * The server runs as shipped: answers are not checked against the route table
 * (DROVER_DIAGNOSTICS_VALIDATE_RESPONSES, a schema check per answer, would be measured too);
 * test/bench/dispatch-validated.test.ts runs a dispatch pass with the check on instead.
 */
export async function startServerProc(
  env: Record<string, string> = {},
  nodeArgs: string[] = [],
  profileName = "server",
): Promise<ServerProc> {
  const dir = mkdtempSync(join(tmpdir(), "drover-bench-"));
  const child = track(
    spawn(
      process.execPath,
      [...profileFlags(profileName), ...nodeArgs, droverBin, "server", "--port", "0", "--data-dir", dir],
      {
        env: {
          ...process.env,
          DROVER_ADMIN_TOKEN: adminToken,
          DROVER_LOG_LEVEL: "warn",
          DROVER_DIAGNOSTICS_VALIDATE_RESPONSES: "false",
          ...env,
        },
        stdio: ["ignore", "pipe", "inherit"],
      },
    ),
  );
  const url = await new Promise<string>((resolve, reject) => {
    let out = "";
    let listening = false;
    let forwarded = 0;
    child.stdout!.on("data", (d: Buffer) => {
      if (listening) {
        // The server's warnings and errors (it logs at warn): a bench that fails on a 500 shows
        // why. Capped, so a flood of one warning does not bury the run's output.
        for (const line of d
          .toString()
          .split("\n")
          .filter((l) => l.trim())) {
          if (forwarded < serverLogLines) process.stderr.write(`server ${child.pid}: ${line}\n`);
          else if (forwarded === serverLogLines)
            process.stderr.write(`server ${child.pid}: more log lines follow, not shown\n`);
          forwarded++;
        }
        return;
      }
      out += d.toString();
      const m = out.match(/listening on (http:\/\/\S+)/);
      if (m) {
        listening = true;
        resolve(m[1]!);
      }
    });
    child.on("exit", (code) => reject(new Error(`server exited (${code}): ${out}`)));
  });
  return {
    url,
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

/** Resident set size of a process in MB, from /proc. */
export function rssMb(pid: number): number {
  const status = readFileSync(`/proc/${pid}/status`, "utf8");
  const kb = Number(status.match(/VmRSS:\s+(\d+)/)?.[1] ?? NaN);
  return kb / 1024;
}

/** CPU seconds (user+system) a process has used, from /proc. */
export function cpuSeconds(pid: number): number {
  const fields = readFileSync(`/proc/${pid}/stat`, "utf8").split(") ")[1]!.split(" ");
  return (Number(fields[11]) + Number(fields[12])) / 100;
}

const clients = new Map<string, DroverClient>();

/** The protocol's typed client for `url` (one per URL, so connections are reused). */
export function client(url: string, token = adminToken): DroverClient {
  const key = `${url} ${token}`;
  let c = clients.get(key);
  if (!c) clients.set(key, (c = new DroverClient({ baseUrl: url, token, timeoutMs: 120_000 })));
  return c;
}

type Nothing = Record<never, never>;

/** A route call through the typed client (admin token unless the input names one); a failure throws its coded error. */
export async function api<R extends Route>(
  url: string,
  route: R,
  ...[input]: Nothing extends RequestOf<R> ? [input?: RequestOf<R>] : [input: RequestOf<R>]
): Promise<ResultOf<R>> {
  return client(url).call(route, (input ?? {}) as RequestOf<R>);
}

export const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));
