import { spawn, type ChildProcess } from "node:child_process";
import { mkdtempSync, readFileSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";
import { DroverClient, type RequestOf, type ResultOf, type Route } from "@drover/protocol";

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

/** How many of a bench server's log lines reach the bench's stderr. */
const serverLogLines = 40;

/**
 * Starts `drover server`; `nodeArgs` go to node itself (e.g. `--cpu-prof`, which NODE_OPTIONS refuses).
 * The server runs as shipped: answers are not checked against the route table
 * (DROVER_DIAGNOSTICS_VALIDATE_RESPONSES, a schema check per answer, would be measured too);
 * test/bench/dispatch-validated.test.ts runs a dispatch pass with the check on instead.
 */
export async function startServerProc(env: Record<string, string> = {}, nodeArgs: string[] = []): Promise<ServerProc> {
  const dir = mkdtempSync(join(tmpdir(), "drover-bench-"));
  const child = spawn(process.execPath, [...profileFlags("server"), ...nodeArgs, droverBin, "server", "--port", "0", "--data-dir", dir], {
    env: { ...process.env, DROVER_ADMIN_TOKEN: adminToken, DROVER_LOG_LEVEL: "warn", DROVER_DIAGNOSTICS_VALIDATE_RESPONSES: "false", ...env },
    stdio: ["ignore", "pipe", "inherit"],
  });
  const url = await new Promise<string>((resolve, reject) => {
    let out = "";
    let listening = false;
    let forwarded = 0;
    child.stdout!.on("data", (d: Buffer) => {
      if (listening) {
        // The server's warnings and errors (it logs at warn): a bench that fails on a 500 shows
        // why. Capped, so a flood of one warning does not bury the run's output.
        for (const line of d.toString().split("\n").filter((l) => l.trim())) {
          if (forwarded < serverLogLines) process.stderr.write(`server ${child.pid}: ${line}\n`);
          else if (forwarded === serverLogLines) process.stderr.write(`server ${child.pid}: more log lines follow, not shown\n`);
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
      child.kill("SIGTERM");
      await new Promise((r) => child.once("exit", r));
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
export async function api<R extends Route>(url: string, route: R, ...[input]: Nothing extends RequestOf<R> ? [input?: RequestOf<R>] : [input: RequestOf<R>]): Promise<ResultOf<R>> {
  return client(url).call(route, (input ?? {}) as RequestOf<R>);
}

export const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));
