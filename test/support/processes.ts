import { spawn, type ChildProcess } from "node:child_process";
import { readFileSync } from "node:fs";
import { fileURLToPath } from "node:url";
import { createServer } from "node:net";
import { dirname, join } from "node:path";

/** Path of the built `drover` CLI entry point. */
export const droverBin = join(
  dirname(fileURLToPath(import.meta.url)),
  "..",
  "..",
  "..",
  "packages",
  "cli",
  "dist",
  "src",
  "main.js",
);

/**
 * A TCP port on 127.0.0.1 that was free a moment ago, for a process to listen on. It is drawn
 * from below the kernel's ephemeral range: a port taken from that range is handed again to the
 * next outgoing connection of any test running beside this one, before the process it was meant
 * for has bound it. Below the range only another test's pick can take it, and picks are random.
 */
export async function freePort(): Promise<number> {
  const [low, high] = belowEphemeralRange();
  for (let tries = 0; tries < 50; tries++) {
    const port = low + Math.floor(Math.random() * (high - low));
    if (await canListen(port)) return port;
  }
  return listenOnAnyPort();
}

/** Ports below the kernel's ephemeral range (`ip_local_port_range`), which listen(0) and connections use. */
function belowEphemeralRange(): [number, number] {
  let ephemeralLow = 32768;
  try {
    ephemeralLow = Number(readFileSync("/proc/sys/net/ipv4/ip_local_port_range", "utf8").trim().split(/\s+/)[0]);
  } catch {
    // Not Linux: the default of most systems' ranges.
  }
  const low = Math.max(1024, ephemeralLow - 12_000);
  return [low, Math.max(low + 1, ephemeralLow)];
}

function canListen(port: number): Promise<boolean> {
  return new Promise((resolve) => {
    const srv = createServer();
    srv.once("error", () => resolve(false));
    srv.listen(port, "127.0.0.1", () => srv.close(() => resolve(true)));
  });
}

function listenOnAnyPort(): Promise<number> {
  return new Promise((resolve, reject) => {
    const srv = createServer();
    srv.on("error", reject);
    srv.listen(0, "127.0.0.1", () => {
      const address = srv.address();
      const port = typeof address === "object" && address ? address.port : 0;
      srv.close(() => resolve(port));
    });
  });
}

/** A child process with its output captured, and helpers to wait on it. */
export interface Proc {
  child: ChildProcess;
  output(): string;
  waitFor(pattern: RegExp, timeoutMs?: number): Promise<RegExpMatchArray>;
  exited: Promise<{ code: number | null; signal: NodeJS.Signals | null }>;
  stop(signal?: NodeJS.Signals): Promise<void>;
}

/** Runs `drover <args>` as a real process. */
export function spawnDrover(args: string[], env: NodeJS.ProcessEnv, cwd?: string): Proc {
  // Every server the tests start checks its answers against the route table, unless a test says otherwise.
  const withDiagnostics = args[0] === "server" ? { ...testServerDiagnostics, ...env } : env;
  return spawnProcess(process.execPath, [droverBin, ...args], withDiagnostics, cwd);
}

/** Diagnostics settings of every server the tests start (in-process, as a process, in a container). */
export const testServerDiagnostics = { DROVER_DIAGNOSTICS_VALIDATE_RESPONSES: "true" } as const;

/** Runs `command <args>` as a child process, its stdout and stderr captured together. */
export function spawnProcess(command: string, args: string[], env: NodeJS.ProcessEnv, cwd?: string): Proc {
  const child = spawn(command, args, { env, cwd, stdio: ["ignore", "pipe", "pipe"] });
  let out = "";
  const listeners = new Set<() => void>();
  const onData = (d: Buffer) => {
    out += d.toString();
    for (const l of listeners) l();
  };
  child.stdout?.on("data", onData);
  child.stderr?.on("data", onData);
  const exited = new Promise<{ code: number | null; signal: NodeJS.Signals | null }>((resolve) =>
    child.on("exit", (code, signal) => resolve({ code, signal })),
  );
  return {
    child,
    output: () => out,
    exited,
    // Generous: a process starting on a loaded 2-core machine can take tens of seconds; it only delays a failure.
    waitFor(pattern, timeoutMs = 60_000) {
      return new Promise((resolve, reject) => {
        const check = () => {
          const m = out.match(pattern);
          if (m) {
            cleanup();
            resolve(m);
          }
        };
        const timer = setTimeout(() => {
          cleanup();
          reject(new Error(`timed out waiting for ${pattern} in output:\n${out}`));
        }, timeoutMs);
        const onExit = () => {
          check();
          cleanup();
          reject(new Error(`process exited before printing ${pattern}; output:\n${out}`));
        };
        const cleanup = () => {
          clearTimeout(timer);
          listeners.delete(check);
          child.off("exit", onExit);
        };
        listeners.add(check);
        child.on("exit", onExit);
        check();
      });
    },
    async stop(signal = "SIGTERM") {
      if (child.exitCode === null && child.signalCode === null) child.kill(signal);
      await exited;
    },
  };
}

/** Runs `drover <args>` to its end (SIGKILL after `timeoutMs`) and returns its exit code and output. */
export function runDrover(
  args: string[],
  env: NodeJS.ProcessEnv,
  timeoutMs = 120_000,
): Promise<{ code: number; stdout: string; stderr: string }> {
  return new Promise((resolve, reject) => {
    const child = spawn(process.execPath, [droverBin, ...args], { env, stdio: ["ignore", "pipe", "pipe"] });
    const stdout: Buffer[] = [];
    const stderr: Buffer[] = [];
    child.stdout.on("data", (d: Buffer) => stdout.push(d));
    child.stderr.on("data", (d: Buffer) => stderr.push(d));
    const timer = setTimeout(() => child.kill("SIGKILL"), timeoutMs);
    child.on("error", reject);
    // 'close', not 'exit': 'exit' may come while the last output still sits in the pipes unread
    // (a busy machine saw `run start --json` answer an empty stdout); 'close' comes after both
    // pipes reached their end.
    child.on("close", (code) => {
      clearTimeout(timer);
      resolve({
        code: code ?? 1,
        stdout: Buffer.concat(stdout).toString("utf8"),
        stderr: Buffer.concat(stderr).toString("utf8"),
      });
    });
  });
}
