import type { Engine } from "@drover/protocol";
import { resolveEngine, type EngineBinary, type EngineFallback } from "../job/engine.js";
import { killGroup, spawnInGroup, startProcess, type ProcessOptions, type RunningProcess } from "./process.js";

/** Where a job's steps execute: as local processes, or in a runner container via the exec-loop. */
export interface Runner {
  /**
   * The terraform/tofu binary where steps run, and its version. `signal` is the job's: it ends
   * whatever the runner must do first (a runner container's pull and start).
   */
  engine(engine: Engine, version: string | null, cacheDir: string, signal: AbortSignal): Promise<EngineBinary>;
  /** Starts a step whose stdout+stderr stream to `onOutput`. */
  start(command: string, args: string[], options: ProcessOptions): RunningProcess;
  /** Runs a step whose stdout is data; stderr streams to `onStderr`. */
  capture(
    command: string,
    args: string[],
    options: {
      cwd: string;
      env: NodeJS.ProcessEnv;
      onStderr(chunk: Buffer): void;
      onSpawn?(pgid: number): void;
      /** The job's signal (see ProcessOptions.signal). */
      signal: AbortSignal;
      uid?: number;
      gid?: number;
    },
  ): Promise<{ code: number; stdout: Buffer }>;
  /**
   * Set when steps do not see this process's PATH (a runner container): the engines its image
   * carries, run when a workspace names no version or as the fallback of a download.
   */
  readonly ownEngines?: EngineFallback;
  /**
   * Makes a release of the agent's engine cache (`path`, the agent's) reachable by the steps,
   * read-only, before the first one starts; returns the path they run it by. Unset: the steps
   * see the agent's path as it is.
   */
  useEngine?(path: string): string;
  /** How the job's own files are reached; unset: plainly (nothing else writes the job's directory). */
  readonly files?: RunFiles | undefined;
  /**
   * What steps see of the agent's own environment besides the job's: all of it (a process on
   * the agent's host, where it is how hosts give runs their credentials), or only its proxy
   * settings (the docker driver's container, a boundary the host's secrets stay behind).
   * Unset: all of it.
   */
  readonly agentEnvironment?: "all" | "proxies";
}

/** File operations of a job on its run directory (paths as the job builds them). */
export interface RunFiles {
  /** Makes the run directory empty with its configuration directory in it. */
  prepare(runDir: string, configDir: string): void;
  /** Runs `fn` with a path that reaches the directory `dir` (e.g. to unpack into it). */
  withDir<T>(dir: string, fn: (path: string) => Promise<T>): Promise<T>;
  read(path: string): Buffer;
  write(path: string, data: string | Buffer): void;
  /** Makes `path` a symbolic link to `target` (a read-only cache entry), creating missing parent directories. */
  link(path: string, target: string): void;
  /** Removes the run directory once the job is over. */
  discard(runDir: string): void;
}

/** The local driver: steps are child processes of the agent. */
export const localRunner: Runner = {
  async engine(engine, version, cacheDir) {
    return resolveEngine(engine, version, cacheDir, process.env.PATH);
  },
  start: startProcess,
  async capture(command, args, options) {
    // Its own process group, killed when it exits, like every step (see startProcess).
    const child = spawnInGroup(command, args, options);
    child.on("exit", () => {
      if (child.pid !== undefined) killGroup(child.pid);
    });
    const parts: Buffer[] = [];
    child.stdout.on("data", (d: Buffer) => parts.push(d));
    child.stderr.on("data", options.onStderr);
    const code = await new Promise<number>((resolve) => {
      child.on("error", () => resolve(127));
      child.on("close", (c) => resolve(c ?? 1));
    });
    return { code, stdout: Buffer.concat(parts) };
  },
};
