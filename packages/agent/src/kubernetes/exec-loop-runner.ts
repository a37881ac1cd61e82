import { existsSync, mkdirSync, openSync, readFileSync, readSync, closeSync, renameSync, statSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import type { Engine } from "@drover/protocol";
import type { EngineBinary } from "../engine.js";
import type { RunningProcess } from "../process.js";
import type { Runner } from "../runner.js";

/** Environment a step must not inherit from the worker: the runner container has its own. */
const containerOwn = /^(PATH|HOME|HOSTNAME|PWD|OLDPWD|SHLVL|_|TERM|NODE_.*|KUBERNETES_.*|npm_.*)$/;

const quote = (s: string) => `'${s.replace(/'/g, `'\\''`)}'`;

/**
 * Runs steps in the runner container through the exec-loop's files on the shared volume
 * (SPEC §6): script then `ready` by rename; output tailed by byte offset; the exit code only
 * from the `exit` file. A runner heartbeat older than `staleMs` means the runner is lost —
 * reported as a failure, never as success.
 */
export class ExecLoopRunner implements Runner {
  private step = 0;

  constructor(
    private readonly dir: string,
    private readonly staleMs = 30_000,
    private readonly pollMs = 100,
  ) {
    mkdirSync(join(dir, "steps"), { recursive: true });
  }

  private write(path: string, content: string): void {
    writeFileSync(`${path}.tmp`, content);
    renameSync(`${path}.tmp`, path);
  }

  private script(command: string, args: string[], cwd: string, env: NodeJS.ProcessEnv, redirect: string): string {
    const exports = Object.entries(env)
      .filter(([k, v]) => v !== undefined && !containerOwn.test(k) && /^[A-Za-z_][A-Za-z0-9_]*$/.test(k))
      .map(([k, v]) => `export ${k}=${quote(v ?? "")}`);
    return ["#!/bin/sh", `cd ${quote(cwd)} || exit 70`, ...exports, `exec ${[command, ...args].map(quote).join(" ")}${redirect}`, ""].join("\n");
  }

  private runnerSilentFor(): number {
    const hb = join(this.dir, "heartbeat");
    if (!existsSync(hb)) return 0;
    return Date.now() - statSync(hb).mtimeMs;
  }

  private launch(script: (stepDir: string) => string, onOutput: (chunk: Buffer) => void): RunningProcess & { stepDir: string } {
    const n = ++this.step;
    const stepDir = join(this.dir, "steps", String(n));
    mkdirSync(stepDir, { recursive: true });
    writeFileSync(join(stepDir, "script.sh"), script(stepDir), { mode: 0o600 });
    this.write(join(stepDir, "ready"), "");
    let offset = 0;
    const tail = () => {
      const path = join(stepDir, "output");
      if (!existsSync(path)) return;
      const fd = openSync(path, "r");
      try {
        const buf = Buffer.alloc(256 * 1024);
        for (;;) {
          const read = readSync(fd, buf, 0, buf.length, offset);
          if (read <= 0) break;
          offset += read;
          onOutput(Buffer.from(buf.subarray(0, read)));
        }
      } finally {
        closeSync(fd);
      }
    };
    const done = new Promise<{ code: number | null; signal: NodeJS.Signals | null; failure?: string }>((resolve) => {
      const timer = setInterval(() => {
        tail();
        const exitPath = join(stepDir, "exit");
        if (existsSync(exitPath)) {
          clearInterval(timer);
          tail();
          const code = Number(readFileSync(exitPath, "utf8").trim());
          resolve(Number.isInteger(code) ? { code, signal: null } : { code: null, signal: null, failure: `the runner wrote an unreadable exit code for step ${n}` });
          return;
        }
        const silent = this.runnerSilentFor();
        if (silent > this.staleMs) {
          clearInterval(timer);
          resolve({ code: null, signal: null, failure: `runner lost: the runner container's heartbeat is ${Math.round(silent / 1000)} s old (step ${n} never reported an exit code)` });
        }
      }, this.pollMs);
    });
    return {
      stepDir,
      done,
      signal: (sig) => {
        const name = sig.replace(/^SIG/, "");
        if (["INT", "TERM", "KILL"].includes(name)) this.write(join(stepDir, "signal"), name);
      },
    };
  }

  async engine(engine: Engine): Promise<EngineBinary> {
    const { code, stdout } = await this.capture(engine, ["version", "-json"], { cwd: "/", env: {}, onStderr: () => {} });
    let version = "unknown";
    try {
      version = (JSON.parse(stdout.toString("utf8")) as { terraform_version?: string }).terraform_version ?? version;
    } catch {
      // keep unknown
    }
    if (code !== 0) throw new Error(`${engine} is not available in the runner container (exit ${code})`);
    return { path: engine, version };
  }

  start(command: string, args: string[], options: { cwd: string; env: NodeJS.ProcessEnv; onOutput(chunk: Buffer): void }): RunningProcess {
    return this.launch(() => this.script(command, args, options.cwd, options.env, ""), options.onOutput);
  }

  async capture(command: string, args: string[], options: { cwd: string; env: NodeJS.ProcessEnv; onStderr(chunk: Buffer): void }): Promise<{ code: number; stdout: Buffer }> {
    const proc = this.launch((stepDir) => this.script(command, args, options.cwd, options.env, ` >${quote(join(stepDir, "stdout"))}`), options.onStderr);
    const { code, failure } = await proc.done;
    if (failure) throw new Error(failure);
    const out = join(proc.stepDir, "stdout");
    return { code: code ?? 1, stdout: existsSync(out) ? readFileSync(out) : Buffer.alloc(0) };
  }

  /** Tells the exec-loop the worker is alive. */
  touchWorkerHeartbeat(): void {
    this.write(join(this.dir, "worker-heartbeat"), "");
  }

  /** Tells the exec-loop to exit once idle. */
  shutdown(): void {
    this.write(join(this.dir, "shutdown"), "");
  }
}
