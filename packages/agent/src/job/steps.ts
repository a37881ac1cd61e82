import { DroverError, messageOf, type Engine } from "@drover/protocol";
import { redactText } from "@drover/runtime";
import type { Logger } from "pino";
import type { EngineBinary } from "./engine.js";
import type { LogStream } from "./log-stream.js";
import { killTagged, killUser, ProcessGroupRecord, processStartTicks } from "../runners/orphans.js";
import type { RunningProcess } from "../runners/process.js";
import type { RunUser } from "../runners/run-user.js";
import type { Runner } from "../runners/runner.js";

/** A step that exited non-zero: the run failed (terraform's error is in the message). */
export class StepFailed extends Error {
  /** The step's output tail, redacted (empty for a hook or a capture). */
  readonly output: string;
  constructor(message: string, output = "") {
    super(message);
    this.output = output;
  }
}

/** What a job's steps need to know of it. */
export interface StepsOptions {
  runner: Runner;
  log: LogStream;
  logger: Logger;
  engine: Engine;
  /** The job's data directory (its process groups are recorded there) and its `<job>-<attempt>` key. */
  dataDir: string;
  key: string;
  /** The process tag every process of the job carries. */
  processTag: string;
  /** The run user whose every process the job's end kills (a job slot's own uid). */
  ownedUser: RunUser | undefined;
  hookTimeoutMs: number;
  /** Why the job must end now, if it must: thrown before a step starts, or for one that failed. */
  interruption(): Error | undefined;
  /** Values hidden from the error excerpts. */
  secrets(): string[];
  /** The job's signal, which the runner's preparations end with (see ProcessOptions.signal). */
  signal: AbortSignal;
}

/**
 * The processes of one job (terraform steps and hooks) through its runner: one at a time,
 * with the output tail kept for the error excerpt and every process group recorded, so the
 * job's end can kill what a step left behind.
 */
export class Steps {
  private process: RunningProcess | undefined;
  /** Set once the job must kill whatever step runs or starts. */
  private killed = false;
  private readonly groups: number[] = [];
  private groupRecord: ProcessGroupRecord | undefined;
  /** When the job's first process started (clock ticks since boot); unknown when it could not be read. */
  private firstStart: number | undefined;
  /** The latest output of the running step (≤ 64 KiB kept), for the error excerpt. */
  private tail: Buffer[] = [];
  private tailBytes = 0;

  constructor(private readonly o: StepsOptions) {}

  /** Signals the running step, if any. */
  signal(sig: NodeJS.Signals): void {
    this.process?.signal(sig);
  }

  /** Kills the running step and any the job would start after it. */
  kill(): void {
    this.killed = true;
    this.signal("SIGKILL");
  }

  private check(): void {
    const why = this.o.interruption();
    if (why) throw why;
  }

  /** Runs a step whose output is the run log; an exit code not in `okCodes` fails the run. Resolves with the exit code. */
  async step(
    binary: EngineBinary,
    args: string[],
    cwd: string,
    env: NodeJS.ProcessEnv,
    okCodes: readonly number[] = [0],
    observe?: (chunk: Buffer) => void,
  ): Promise<number> {
    this.check();
    this.o.log.line(`\n[drover] $ ${this.o.engine} ${args.join(" ")}`);
    this.tail = [];
    this.tailBytes = 0;
    const code = await this.spawn(binary.path, args, cwd, env, (chunk) => {
      this.o.log.write(chunk);
      observe?.(chunk);
      this.tail.push(chunk);
      this.tailBytes += chunk.length;
      while (this.tailBytes - (this.tail[0]?.length ?? 0) > 64 * 1024) this.tailBytes -= this.tail.shift()?.length ?? 0;
    });
    if (!okCodes.includes(code)) {
      // A step killed because the job must end ends it as that, not as a failed run.
      this.check();
      // Redacted before it is cut to an excerpt: a cut through a secret would leave a part of it.
      const output = redactText(Buffer.concat(this.tail).toString("utf8"), this.o.secrets());
      throw new StepFailed(errorExcerpt(output) ?? `${this.o.engine} ${args[0]} exited with code ${code}`, output);
    }
    return code;
  }

  /** Runs a step whose stdout is data (show -json, output -json); stderr goes to the log. */
  async capture(binary: EngineBinary, args: string[], cwd: string, env: NodeJS.ProcessEnv): Promise<Buffer> {
    this.check();
    const { code, stdout } = await this.o.runner.capture(binary.path, args, {
      cwd,
      env,
      onStderr: (d) => this.o.log.write(d),
      onSpawn: (g) => this.recordGroup(g),
      signal: this.o.signal,
    });
    if (code !== 0) throw new StepFailed(`${this.o.engine} ${args.join(" ")} exited with code ${code}`);
    return stdout;
  }

  /** Runs a hook (a file of DROVER_AGENT_HOOKS_DIR); non-zero or timeout fails the run. */
  async hook(name: string, path: string, cwd: string, env: NodeJS.ProcessEnv): Promise<void> {
    this.check();
    this.o.log.line(`\n[drover] hook ${name}`);
    let timedOut = false;
    const timer = setTimeout(() => {
      timedOut = true;
      this.signal("SIGKILL");
    }, this.o.hookTimeoutMs);
    const code = await this.spawn(path, [], cwd, env, (chunk) => this.o.log.write(chunk)).finally(() =>
      clearTimeout(timer),
    );
    if (timedOut) throw new StepFailed(`hook ${name} timed out after ${this.o.hookTimeoutMs / 1000} s`);
    if (code !== 0) {
      this.check();
      throw new StepFailed(`hook ${name} exited with code ${code}`);
    }
  }

  private async spawn(
    command: string,
    args: string[],
    cwd: string,
    env: NodeJS.ProcessEnv,
    onOutput: (b: Buffer) => void,
  ): Promise<number> {
    const proc = this.o.runner.start(command, args, {
      cwd,
      env,
      onOutput,
      onSpawn: (g) => this.recordGroup(g),
      signal: this.o.signal,
    });
    this.process = proc;
    // A kill that arrived between steps applies to this one too.
    if (this.killed) proc.signal("SIGKILL");
    const { code, signal, failure } = await proc.done;
    this.process = undefined;
    if (failure) throw new DroverError("internal", failure);
    return code ?? (signal ? 128 : 1);
  }

  private recordGroup(pgid: number): void {
    // Every process of this job descends from its first one: none started before it.
    if (this.groups.length === 0) this.firstStart = processStartTicks(pgid);
    this.groups.push(pgid);
    try {
      this.groupRecord ??= new ProcessGroupRecord(this.o.dataDir, this.o.key);
      this.groupRecord.add(pgid);
    } catch (err) {
      this.o.logger.warn({ job: this.o.key, err: messageOf(err) }, "could not record the job's process group");
    }
  }

  /**
   * The job's steps are over: whatever of its processes still lives (a provisioner's child
   * that left its group) is killed before the outcome is reported, so that nothing of this
   * attempt runs beside a later one.
   */
  async end(): Promise<void> {
    if (this.groups.length === 0) return;
    try {
      // A run can shed its tag (`env -i setsid …`), never its uid.
      const owned = this.o.ownedUser;
      const killed = owned
        ? await killUser(owned, 10_000)
        : await killTagged(this.o.processTag, this.groups, 10_000, this.firstStart);
      if (killed > 0) this.o.logger.warn({ job: this.o.key, killed }, "killed processes the job left behind");
      this.groupRecord?.remove();
    } catch (err) {
      this.o.logger.warn({ job: this.o.key, err: messageOf(err) }, "could not check for processes the job left behind");
    }
  }
}

/** The first "Error: …" block of terraform's output, without its box drawing. */
export function errorExcerpt(output: string): string | undefined {
  const at = output.indexOf("Error: ");
  if (at < 0) return undefined;
  return output
    .slice(at, at + 1500)
    .split("\n")
    .map((l) => l.replace(/^[\u2502\u2577\u2575]\s?/, "").trimEnd())
    .filter((l, i, all) => !(l === "" && all[i - 1] === ""))
    .join("\n")
    .trim();
}
