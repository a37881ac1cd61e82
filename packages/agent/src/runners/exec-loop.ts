import { messageOf } from "@drover/protocol";
import { fchownSync, lchownSync } from "node:fs";
import { join } from "node:path";
import type { Engine } from "@drover/protocol";
import type { EngineBinary, EngineFallback } from "../job/engine.js";
import type { RunningProcess } from "./process.js";
import type { RunFiles, Runner } from "./runner.js";
import { below, type SafeDir } from "../job/safe-dir.js";

/** Environment a step must not inherit from the worker: the runner container has its own. */
const containerOwn = /^(PATH|HOME|HOSTNAME|PWD|OLDPWD|SHLVL|_|TERM|NODE_.*|KUBERNETES_.*|npm_.*)$/;

const quote = (s: string) => `'${s.replace(/'/g, `'\\''`)}'`;

/** The runner container has no such engine on its PATH. */
export class EngineMissing extends Error {}

/**
 * The engines of a runner image, found by `find`: what runs when a workspace names no version, or
 * the fallback of a download. An image without the engine offers none; any other failure (a
 * runner that cannot start or is lost) is the run's error.
 */
export function runnerImageEngines(
  find: (engine: Engine, signal: AbortSignal) => Promise<EngineBinary>,
): EngineFallback {
  return {
    where: "in the runner image",
    engines: async (engine, signal) => {
      try {
        return [await find(engine, signal)];
      } catch (err) {
        if (err instanceof EngineMissing) return [];
        throw err;
      }
    },
  };
}

/**
 * Runs steps in the runner container through the exec-loop's files on the shared volume:
 * script then `ready` by rename; output tailed by byte offset; the exit code only
 * from the `exit` file. A runner heartbeat older than `staleMs` means the runner is lost —
 * reported as a failure, never as success.
 *
 * The runner container shares these directories and runs the configuration's code, which can
 * plant links or swap directories. So every file operation goes through directory handles
 * opened once (SafeDir): nothing is read or written through a link, and no step can make
 * this process touch a file outside the directories it was given.
 */
export class ExecLoopRunner implements Runner {
  private step = 0;
  private readonly steps: SafeDir;
  /** The job's data directory (JobRun's dataDir) as this process reaches it, when given. */
  readonly files: RunFiles | undefined;

  /**
   * `dir` is the exec directory as the runner container names it, `exec` its handle here;
   * `data` the job's data directory (its path and handle), whose files JobRun then reaches
   * only through it.
   */
  constructor(
    private readonly dir: string,
    private readonly exec: SafeDir,
    data?: { path: string; handle: SafeDir },
    private readonly staleMs = 30_000,
    private readonly pollMs = 100,
    /** The runner's user when it differs from this process's (an agent running as root): each step's files become its. */
    private readonly owner?: { uid: number; gid: number },
    /** A runner whose exec-loop has written no heartbeat this long after this object was made never started (undefined: wait). */
    private readonly startTimeoutMs?: number,
  ) {
    this.steps = exec.dir("steps", { create: "missing" });
    if (data) this.files = safeRunFiles(data.path, data.handle);
  }

  private script(command: string, args: string[], cwd: string, env: NodeJS.ProcessEnv, redirect: string): string {
    const exports = Object.entries(env)
      .filter(([k, v]) => v !== undefined && !containerOwn.test(k) && /^[A-Za-z_][A-Za-z0-9_]*$/.test(k))
      .map(([k, v]) => `export ${k}=${quote(v ?? "")}`);
    return [
      "#!/bin/sh",
      `cd ${quote(cwd)} || exit 70`,
      ...exports,
      `exec ${[command, ...args].map(quote).join(" ")}${redirect}`,
      "",
    ].join("\n");
  }

  private readonly createdAt = Date.now();

  /** Why the runner counts as lost or never started, if it does. */
  private runnerFailure(step: number): string | undefined {
    const mtime = this.exec.mtimeMs("heartbeat");
    if (mtime === undefined) {
      const waited = Date.now() - this.createdAt;
      if (this.startTimeoutMs === undefined || waited <= this.startTimeoutMs) return undefined;
      return `runner never started: the runner container's exec-loop wrote no heartbeat within ${Math.round(this.startTimeoutMs / 1000)} s (DROVER_WORKER_RUNNER_START_TIMEOUT_SECONDS); its entrypoint must be the exec-loop (step ${step} never ran)`;
    }
    const silent = Date.now() - mtime;
    if (silent > this.staleMs)
      return `runner lost: the runner container's heartbeat is ${Math.round(silent / 1000)} s old (step ${step} never reported an exit code)`;
    return undefined;
  }

  private launch(
    script: (stepDir: string) => string,
    onOutput: (chunk: Buffer) => void,
  ): RunningProcess & { stepDir: string; handle: SafeDir } {
    const n = ++this.step;
    const stepDir = join(this.dir, "steps", String(n));
    // New, so nothing was planted in it before this step; the handle keeps it this step's own.
    const handle = this.steps.dir(String(n), { create: "fresh" });
    handle.write("script.sh", script(stepDir), 0o600);
    if (this.owner) {
      // Through the handle and without following links: the runner writes its output, pid and exit here.
      fchownSync(handle.fd, this.owner.uid, this.owner.gid);
      lchownSync(handle.at("script.sh"), this.owner.uid, this.owner.gid);
    }
    handle.write("ready", "");
    let offset = 0;
    const tail = () => {
      offset = handle.readFrom("output", offset, onOutput);
    };
    const done = new Promise<{ code: number | null; signal: NodeJS.Signals | null; failure?: string }>((resolve) => {
      const end = (result: { code: number | null; signal: NodeJS.Signals | null; failure?: string }) => {
        clearInterval(timer);
        resolve(result);
      };
      const timer = setInterval(() => {
        try {
          tail();
          const exit = handle.read("exit");
          if (exit !== undefined) {
            tail();
            const code = Number(exit.toString("utf8").trim());
            end(
              Number.isInteger(code)
                ? { code, signal: null }
                : { code: null, signal: null, failure: `the runner wrote an unreadable exit code for step ${n}` },
            );
            return;
          }
          const failure = this.runnerFailure(n);
          if (failure) end({ code: null, signal: null, failure });
        } catch (err) {
          // A planted link or a swapped file: the step's outcome is unknown, so it failed.
          end({ code: null, signal: null, failure: `step ${n}: ${messageOf(err)}` });
        }
      }, this.pollMs);
    });
    return {
      stepDir,
      handle,
      done,
      signal: (sig) => {
        const name = sig.replace(/^SIG/, "");
        // A run that blocked its own signal file only keeps its own step running.
        if (["INT", "TERM", "KILL"].includes(name)) quietly(() => handle.write("signal", name));
      },
    };
  }

  /** The runner image's engines; the agent's cache is at the same path in the runner. */
  readonly ownEngines: EngineFallback = runnerImageEngines((engine) => this.engine(engine));

  async engine(engine: Engine): Promise<EngineBinary> {
    const { code, stdout } = await this.capture(engine, ["version", "-json"], {
      cwd: "/",
      env: {},
      onStderr: () => {},
    });
    let version = "unknown";
    try {
      version = (JSON.parse(stdout.toString("utf8")) as { terraform_version?: string }).terraform_version ?? version;
    } catch {
      // keep unknown
    }
    if (code !== 0) throw new EngineMissing(`${engine} is not available in the runner container (exit ${code})`);
    return { path: engine, version };
  }

  start(
    command: string,
    args: string[],
    options: { cwd: string; env: NodeJS.ProcessEnv; onOutput(chunk: Buffer): void },
  ): RunningProcess {
    const proc = this.launch(() => this.script(command, args, options.cwd, options.env, ""), options.onOutput);
    void proc.done.then(() => proc.handle.close());
    return proc;
  }

  async capture(
    command: string,
    args: string[],
    options: { cwd: string; env: NodeJS.ProcessEnv; onStderr(chunk: Buffer): void },
  ): Promise<{ code: number; stdout: Buffer }> {
    const proc = this.launch(
      (stepDir) => this.script(command, args, options.cwd, options.env, ` >${quote(join(stepDir, "stdout"))}`),
      options.onStderr,
    );
    const { code, failure } = await proc.done;
    try {
      if (failure) throw new Error(failure);
      return { code: code ?? 1, stdout: proc.handle.read("stdout") ?? Buffer.alloc(0) };
    } finally {
      proc.handle.close();
    }
  }

  /** Releases the handles this runner opened (not the ones it was given). */
  close(): void {
    this.steps.close();
  }

  /** Tells the exec-loop the worker is alive (a run that blocks the file only starves its own runner). */
  touchWorkerHeartbeat(): void {
    quietly(() => this.exec.write("worker-heartbeat", ""));
  }

  /** Tells the exec-loop to exit once idle; false when the run blocked the file. */
  shutdown(): boolean {
    return quietly(() => this.exec.write("shutdown", ""));
  }
}

/**
 * Runs a write the run can make fail (by planting a directory at the name): it runs in
 * timers of a process that may hold other runs, so its failure must not throw there.
 */
function quietly(fn: () => void): boolean {
  try {
    fn();
    return true;
  } catch {
    return false;
  }
}

/**
 * JobRun's file access to a data directory the runner also writes: every path is resolved
 * below the handle without following links. The directory is new for each job (an emptyDir,
 * or a directory the node worker just made), so preparing it only creates, and discarding
 * is left to whoever removes the directory once the runner has gone.
 */
export function safeRunFiles(base: string, handle: SafeDir): RunFiles {
  return {
    prepare(_runDir, configDir) {
      handle.dir(below(base, configDir), { create: "missing" }).close();
    },
    async withDir(dir, fn) {
      const d = handle.dir(below(base, dir));
      try {
        return await fn(d.procPath);
      } finally {
        d.close();
      }
    },
    read(path) {
      const data = handle.read(below(base, path));
      if (data === undefined) throw Object.assign(new Error(`${path} does not exist`), { code: "ENOENT" });
      return data;
    },
    write(path, data) {
      handle.write(below(base, path), data);
    },
    link(path, target) {
      handle.link(below(base, path), target);
    },
    discard() {},
  };
}
