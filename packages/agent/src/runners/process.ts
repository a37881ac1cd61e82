import { spawn, type ChildProcessByStdio } from "node:child_process";
import type { Readable } from "node:stream";

/** A running child process of a job (terraform, tofu or a hook). */
export interface RunningProcess {
  /** Sends a signal to the process (SIGKILL: to its whole process group). */
  signal(sig: NodeJS.Signals): void;
  /** `failure` is set when the step's fate is unknown (its runner was lost): never a success. */
  done: Promise<{ code: number | null; signal: NodeJS.Signals | null; failure?: string }>;
}

/** Options of a step's process. */
export interface ProcessOptions {
  cwd: string;
  env: NodeJS.ProcessEnv;
  onOutput(chunk: Buffer): void;
  /**
   * The job's signal, aborted when its work must end: it ends what the runner must do before the
   * process can run (a runner container's pull and start). The process itself ends by
   * RunningProcess.signal, which lets terraform stop gracefully and release its lock.
   */
  signal: AbortSignal;
  /** Called with the process group id once the process runs, so the job can record it. */
  onSpawn?(pgid: number): void;
  /** Run as this user and group (DROVER_AGENT_RUN_AS_USER); the agent's own otherwise. */
  uid?: number;
  gid?: number;
}

/** Kills what is left of a process group; a no-op when it is empty. */
export function killGroup(pgid: number): void {
  try {
    process.kill(-pgid, "SIGKILL");
  } catch {
    // nothing left in it
  }
}

/**
 * Starts a command in its own process group with stdout and stderr merged into `onOutput`.
 * SIGINT/SIGTERM go to the command itself, which forwards them to its children the way it
 * chooses (terraform stops gracefully and releases its lock); SIGKILL takes the whole group.
 * When the command exits, for whatever reason, the rest of its group is killed: no
 * provisioner child (a `sleep` under a shell) outlives its step.
 */
export function startProcess(command: string, args: string[], options: ProcessOptions): RunningProcess {
  const child = spawnInGroup(command, args, options);
  child.stdout.on("data", options.onOutput);
  child.stderr.on("data", options.onOutput);
  const done = new Promise<{ code: number | null; signal: NodeJS.Signals | null }>((resolve) => {
    child.on("error", (err) => {
      options.onOutput(Buffer.from(`failed to start ${command}: ${err.message}\n`));
      resolve({ code: 127, signal: null });
    });
    // A grandchild holding the output pipes would delay "close" until it ends: kill the
    // group on "exit" so "close" follows at once.
    child.on("exit", () => {
      if (child.pid !== undefined) killGroup(child.pid);
    });
    child.on("close", (code, signal) => resolve({ code, signal }));
  });
  return {
    done,
    signal(sig) {
      if (child.pid === undefined || child.exitCode !== null) return;
      try {
        if (sig === "SIGKILL") process.kill(-child.pid, sig);
        else child.kill(sig);
      } catch {
        // already gone
      }
    },
  };
}

/**
 * Spawns a step's command as the leader of its own process group (so the group can be killed
 * as one), stdout and stderr piped, as the given user, and tells `onSpawn` its pid.
 */
export function spawnInGroup(
  command: string,
  args: string[],
  options: Pick<ProcessOptions, "cwd" | "env" | "uid" | "gid" | "onSpawn">,
): ChildProcessByStdio<null, Readable, Readable> {
  const child = spawn(command, args, {
    cwd: options.cwd,
    env: options.env,
    detached: true,
    stdio: ["ignore", "pipe", "pipe"],
    uid: options.uid,
    gid: options.gid,
  });
  if (child.pid !== undefined) options.onSpawn?.(child.pid);
  return child;
}
