import { DroverError, type Engine, type JobAssignment, messageOf } from "@drover/protocol";
import { chownSync, lchownSync, mkdirSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { basename, dirname, join } from "node:path";
import type { Logger } from "pino";
import type { DockerSettings } from "../config.js";
import type { EngineBinary, EngineFallback } from "../job/engine.js";
import { ExecLoopRunner, runnerImageEngines } from "./exec-loop.js";
import type { ProcessOptions, RunningProcess } from "./process.js";
import type { RunFiles, Runner } from "./runner.js";
import { SafeDir } from "../job/safe-dir.js";
import { DockerApiError, type DockerEngine } from "../drivers/docker/engine-api.js";
import {
  containerSpec,
  inContainer,
  jobsDirName,
  runnerImageFor,
  type JobRecord,
} from "../drivers/docker/container-spec.js";
import { DiskWatch } from "../drivers/docker/disk-watch.js";
import { cgroupOomKills, memoryEventsFile } from "../drivers/docker/oom.js";
import type { ContainerRemovals } from "../drivers/docker/removals.js";

/** Options of one job's container. */
export interface ContainerJobOptions {
  engine: DockerEngine;
  settings: DockerSettings;
  assignment: JobAssignment;
  /** The agent's data dir; the job's directory goes below it. */
  dataDir: string;
  serverUrl: string;
  agentName: string;
  agentTag: string;
  execLoopPath: string;
  taskCaCertPath: string | undefined;
  hooksDir: string | undefined;
  log: Logger;
  /** The agent's removals of its run containers, which retries one that failed. */
  removals: ContainerRemovals;
  /** How long the exec-loop may stay silent before its step counts as lost. */
  runnerStaleMs?: number;
  /** Time between two measures of the job's directories against DROVER_AGENT_DOCKER_DISK_MB. */
  diskCheckMs?: number;
}

const quietly = async (p: Promise<unknown>): Promise<void> => {
  try {
    await p;
  } catch {
    // best effort: the caller reports what matters
  }
};

/**
 * One job of the docker driver: its steps run in a container of their own, started from the
 * runner image with the agent's exec-loop as entrypoint (decision 0015). The job's directory
 * (`<data>/docker-jobs/<job>-<attempt>`) holds `exec` (the exec-loop's files), `run` (the run's
 * files), `bin` (the exec-loop script) and `job.json` (the job token, never mounted). The agent
 * reaches `exec` and `run` only through handles (the container writes them), and the paths it
 * gives steps are rewritten to where the container sees them.
 */
export class ContainerJob implements Runner {
  readonly files: RunFiles | undefined;
  readonly agentEnvironment = "proxies";
  /** The data dir JobRun uses: its run directory is made below it. */
  readonly runBase: string;
  private readonly dir: string;
  private readonly execHandle: SafeDir;
  private readonly runHandle: SafeDir;
  private readonly loop: ExecLoopRunner;
  private readonly name: string;
  /** The runner image this job's container starts from. */
  private readonly image: string;
  private readonly owner: { uid: number; gid: number } | undefined;
  private started: Promise<string> | undefined;
  private id: string | undefined;
  /** Resolves with a reason when the container stops before the job is over. */
  private exited: Promise<string> | undefined;
  private readonly ending = new AbortController();
  private readonly heartbeat: NodeJS.Timeout;
  private oomFile: string | undefined;
  /** The container's OOM kills counted when the last step ended: the ones after it are the next step's. */
  private oomKillsSeen = 0;
  /** The directory of the agent's verified engine release the container mounts read-only, if the job uses one. */
  private engineDir: string | undefined;
  /** The container's own output (the exec-loop's messages), last 4 KiB, for error reports. */
  private containerTail = "";
  private diskWatch: DiskWatch | undefined;
  /** Why the run was stopped for the disk its directories took; set once. */
  private overDisk: string | undefined;
  private readonly diskExceeded: Promise<string>;
  private reportDiskExceeded: (why: string) => void = () => undefined;

  constructor(private readonly o: ContainerJobOptions) {
    const a = o.assignment;
    this.image = runnerImageFor(o.settings, a.workspace);
    this.name = `drover-${a.jobId}-${a.attempt}`;
    this.dir = join(o.dataDir, jobsDirName, `${a.jobId}-${a.attempt}`);
    this.runBase = join(this.dir, "run");
    const agentUid = process.getuid?.() ?? 0;
    this.owner = agentUid === 0 ? o.settings.user : undefined;
    mkdirSync(join(o.dataDir, jobsDirName), { recursive: true, mode: 0o700 });
    // A leftover of the same attempt (an agent killed before it cleaned up) is never reused.
    rmSync(this.dir, { recursive: true, force: true });
    mkdirSync(join(this.dir, "bin"), { recursive: true, mode: 0o700 });
    const record: JobRecord = {
      url: o.serverUrl,
      jobId: a.jobId,
      attempt: a.attempt,
      runId: a.runId,
      jobToken: a.jobToken,
      container: this.name,
    };
    writeFileSync(join(this.dir, "job.json"), JSON.stringify(record), { mode: 0o600 });
    writeFileSync(join(this.dir, "bin", "exec-loop.sh"), readFileSync(o.execLoopPath), { mode: 0o755 });
    for (const sub of ["exec", "run"]) {
      mkdirSync(join(this.dir, sub), { mode: 0o700 });
      if (this.owner) chownSync(join(this.dir, sub), this.owner.uid, this.owner.gid);
    }
    // Readable by the container's user: the directory is bind-mounted read-only.
    if (this.owner) {
      chownSync(join(this.dir, "bin"), this.owner.uid, this.owner.gid);
      lchownSync(join(this.dir, "bin", "exec-loop.sh"), this.owner.uid, this.owner.gid);
    }
    this.execHandle = SafeDir.open(join(this.dir, "exec"));
    this.runHandle = SafeDir.open(this.runBase);
    this.loop = new ExecLoopRunner(
      inContainer.exec,
      this.execHandle,
      { path: this.runBase, handle: this.runHandle },
      o.runnerStaleMs ?? 30_000,
      100,
      this.owner,
    );
    this.files = this.loop.files;
    this.loop.touchWorkerHeartbeat();
    this.heartbeat = setInterval(() => this.loop.touchWorkerHeartbeat(), 5_000);
    this.heartbeat.unref();
    this.diskExceeded = new Promise((resolve) => (this.reportDiskExceeded = resolve));
  }

  /** Rewrites a path (or an argument holding one) of the agent's into the container's. */
  private translate(s: string): string {
    let out = s.split(this.runBase).join(inContainer.run);
    if (this.o.taskCaCertPath) out = out.split(this.o.taskCaCertPath).join(inContainer.ca);
    if (this.o.hooksDir) out = out.split(this.o.hooksDir.replace(/\/+$/, "")).join(inContainer.hooks);
    return out;
  }

  private translateEnv(env: NodeJS.ProcessEnv): NodeJS.ProcessEnv {
    const out: NodeJS.ProcessEnv = {};
    for (const [k, v] of Object.entries(env)) if (v !== undefined) out[k] = this.translate(v);
    return out;
  }

  /**
   * Creates and starts the container once; rejects with a reason the run's outcome carries. Every
   * call of a job carries the job's signal, so the first one's ends the start at once when the job
   * is canceled, stopped or lost: a stalled pull does not hold it until the pull's deadline.
   */
  private container(jobSignal: AbortSignal): Promise<string> {
    this.started ??= this.startContainer(AbortSignal.any([jobSignal, this.ending.signal]));
    return this.started;
  }

  private async startContainer(signal: AbortSignal): Promise<string> {
    const { engine, log } = this.o;
    const image = this.image;
    // The container's output and end are followed until the job closes it, past a cancel: the
    // steps still run while terraform stops gracefully.
    const ending = this.ending.signal;
    try {
      if (!(await engine.hasImage(image, signal))) {
        log.info({ image }, "pulling the runner image");
        try {
          await engine.pull(image, signal);
        } catch (err) {
          if (signal.aborted) throw err;
          throw new DroverError(
            "not_found",
            `the runner image ${image} is not on this Docker host and pulling it failed: ${messageOf(err)}. Pull or build it on the host, or set ${image === this.o.settings.image ? "DROVER_AGENT_DOCKER_IMAGE" : "the workspace's runner image"} to an image it has`,
          );
        }
      }
      const id = await engine.create(
        this.name,
        containerSpec({ ...this.o, image, dir: this.dir, runBase: this.runBase, engineDir: this.engineDir }),
        signal,
      );
      this.id = id;
      await engine.start(id, signal);
      this.watchDisk();
      const info = await engine.inspect(id, signal);
      this.oomFile = memoryEventsFile(info.State.Pid);
      // The daemon ends the followed output when the container stops, so its end is the container's
      // end: no `wait` is held open beside it (podman's Docker API answers one by polling the runtime,
      // a good part of a core per container). A stream cut short falls back to `wait`.
      const followed = engine
        .follow(id, (stream, data) => this.containerOutput(stream, data), ending)
        .then(
          async () => {
            const state = await engine
              .inspect(id, ending)
              .then((info) => info.State)
              .catch(() => undefined);
            return state && !state.Running ? state.ExitCode : engine.wait(id, ending);
          },
          (err: unknown) => {
            if (!ending.aborted) log.debug({ err: messageOf(err) }, "following the run container's output ended");
            return engine.wait(id, ending);
          },
        );
      this.exited = followed.then(
        (code) => `the run's container ${this.name} stopped (exit code ${code}) before the step ended`,
        () => new Promise<string>(() => {}),
      );
      log.info({ container: this.name, image }, "run container started");
      return id;
    } catch (err) {
      if (err instanceof DroverError || signal.aborted) throw err;
      const msg = messageOf(err);
      if (err instanceof DockerApiError && err.status === 0)
        throw new DroverError(
          "internal",
          `${msg}; check DROVER_AGENT_DOCKER_HOST and that the agent may use the socket`,
        );
      throw new DroverError("internal", `the run's container could not be started from ${image}: ${msg}`);
    }
  }

  /**
   * The run's directories are bind mounts of the host's disk, which the Engine API cannot bound:
   * they are measured while the container lives, and a run past DROVER_AGENT_DOCKER_DISK_MB has
   * its container killed at once (so it writes no more) and its step ended with the reason.
   */
  private watchDisk(): void {
    const limitBytes = this.o.settings.diskBytes;
    if (limitBytes === 0) return;
    this.diskWatch = new DiskWatch({
      dirs: [join(this.dir, "exec"), this.runBase],
      limitBytes,
      intervalMs: this.o.diskCheckMs ?? 2_000,
      onExceeded: (used) => {
        const mib = (n: number) => Math.ceil(n / (1024 * 1024));
        this.overDisk = `out of disk: the run's files on the agent's host took ${mib(used)} MiB, past the docker driver's bound of ${mib(limitBytes)} MiB, and the run was stopped (raise DROVER_AGENT_DOCKER_DISK_MB, or have the run write less)`;
        this.o.log.warn(
          { container: this.name, usedBytes: used, limitBytes },
          "a run's directories outgrew DROVER_AGENT_DOCKER_DISK_MB; killing its container",
        );
        this.reportDiskExceeded(this.overDisk);
        if (this.id) void quietly(this.o.engine.kill(this.id, "SIGKILL", this.ending.signal));
      },
      onError: (err) =>
        this.o.log.warn({ container: this.name, err: messageOf(err) }, "could not measure the run's directories"),
    });
  }

  private containerOutput(stream: "stdout" | "stderr", data: Buffer): void {
    const text = data.toString("utf8");
    this.containerTail = (this.containerTail + text).slice(-4096);
    for (const line of text.split("\n")) if (line.trim()) this.o.log.info({ container: this.name, stream }, line);
  }

  /**
   * The container's OOM kills since the last step ended, by its memory cgroup counter where this
   * host's cgroups are visible (a kill the run survived, `on_failure = continue`, is not a later
   * step's). Undefined where the counter cannot be read: not visible from here, or gone with a
   * container that stopped.
   */
  private oomKillsSinceLastStep(): number | undefined {
    const count = this.oomKillCount();
    return count === undefined ? undefined : count - this.oomKillsSeen;
  }

  /** A step ended: the kills counted so far are behind the next one. */
  private stepEnded(): void {
    this.oomKillsSeen = this.oomKillCount() ?? this.oomKillsSeen;
  }

  /** The container's memory cgroup counter of OOM kills; undefined where it cannot be read. */
  private oomKillCount(): number | undefined {
    return this.oomFile === undefined ? undefined : cgroupOomKills(this.oomFile);
  }

  /**
   * True when the kernel killed a process of the current step (or of the stopped container) for
   * exceeding its memory limit: by the cgroup counter, else by the daemon's OOMKilled state (a
   * daemon may report it only when the main process died).
   */
  private async ranOutOfMemory(): Promise<boolean> {
    if (this.o.settings.memoryBytes === 0 || !this.id) return false;
    const kills = this.oomKillsSinceLastStep();
    if (kills !== undefined) return kills > 0;
    try {
      return (await this.o.engine.inspect(this.id, this.ending.signal)).State.OOMKilled;
    } catch {
      return false;
    }
  }

  private oomMessage(): string {
    const mib = Math.round(this.o.settings.memoryBytes / (1024 * 1024));
    return `out of memory: a process of the run exceeded the container's memory limit of ${mib} MiB and was killed (raise DROVER_AGENT_DOCKER_MEMORY_MB)`;
  }

  /** A step's end, with a lost or out-of-memory container turned into the reason. */
  private async settle(result: {
    code: number | null;
    signal: NodeJS.Signals | null;
    failure?: string;
  }): Promise<{ code: number | null; signal: NodeJS.Signals | null; failure?: string }> {
    // A run that wrote past the bound faster than one interval is caught when its step ends.
    if (!this.overDisk) await this.diskWatch?.check();
    if (this.overDisk) return { code: null, signal: null, failure: this.overDisk };
    const outOfMemory = (result.code !== 0 || Boolean(result.failure)) && (await this.ranOutOfMemory());
    this.stepEnded();
    if (outOfMemory) return { code: null, signal: null, failure: this.oomMessage() };
    return result;
  }

  /** Resolves when the container fails to start or stops while a step runs. */
  private async containerFailure(jobSignal: AbortSignal): Promise<string> {
    try {
      await this.container(jobSignal);
    } catch (err) {
      return messageOf(err);
    }
    const why = await Promise.race([this.exited!, this.diskExceeded]);
    if (this.overDisk) return this.overDisk;
    if (await this.ranOutOfMemory()) return this.oomMessage();
    const tail = this.containerTail.trim().split("\n").slice(-5).join("\n");
    return tail ? `${why}; its last output:\n${tail}` : why;
  }

  /** The engines of the runner image (see runnerImageEngines). */
  readonly ownEngines: EngineFallback = {
    ...runnerImageEngines((engine, signal) => this.engine(engine, null, "", signal)),
    // Asking the image started the run's container without a release mounted: a download could
    // not reach it, so a workspace without a version is refused before one is made.
    noEngine: (engine) => this.noEngineError(engine),
  };

  private noEngineError(engine: string): DroverError {
    return new DroverError(
      "not_found",
      `the runner image ${this.image} has no ${engine} on its PATH: use an image that has one, or set the workspace's engineVersion so that the agent provides it`,
    );
  }

  useEngine(path: string): string {
    // Only a workspace without a version asks the image first (and is refused before a download
    // when it has none): a started container has no release mounted.
    if (this.started) throw this.noEngineError("terraform or tofu");
    this.engineDir = dirname(path);
    return `${inContainer.engine}/${basename(path)}`;
  }

  async engine(engine: Engine, _version: string | null, _cacheDir: string, signal: AbortSignal): Promise<EngineBinary> {
    const failure = this.containerFailure(signal).then((why) => Promise.reject(new DroverError("internal", why)));
    failure.catch(() => {});
    return Promise.race([this.loop.engine(engine), failure]);
  }

  start(command: string, args: string[], options: ProcessOptions): RunningProcess {
    const proc = this.loop.start(
      this.translate(command),
      args.map((x) => this.translate(x)),
      { cwd: this.translate(options.cwd), env: this.translateEnv(options.env), onOutput: options.onOutput },
    );
    const lost = this.containerFailure(options.signal).then((failure) => ({ code: null, signal: null, failure }));
    return {
      signal: (sig) => proc.signal(sig),
      done: Promise.race([proc.done, lost]).then((r) => this.settle(r)),
    };
  }

  async capture(
    command: string,
    args: string[],
    options: { cwd: string; env: NodeJS.ProcessEnv; onStderr(chunk: Buffer): void; signal: AbortSignal },
  ): Promise<{ code: number; stdout: Buffer }> {
    const lost = this.containerFailure(options.signal).then((why) => Promise.reject(new DroverError("internal", why)));
    lost.catch(() => {});
    const r = await Promise.race([
      this.loop.capture(
        this.translate(command),
        args.map((x) => this.translate(x)),
        { cwd: this.translate(options.cwd), env: this.translateEnv(options.env), onStderr: options.onStderr },
      ),
      lost,
    ]);
    if (!this.overDisk) await this.diskWatch?.check();
    if (this.overDisk) throw new DroverError("internal", this.overDisk);
    const outOfMemory = r.code !== 0 && (await this.ranOutOfMemory());
    this.stepEnded();
    if (outOfMemory) throw new DroverError("internal", this.oomMessage());
    return r;
  }

  /**
   * The job is over: the exec-loop is told to exit, the container removed (killed if it does not
   * stop in time), the handles closed and the job's directory deleted. Never throws.
   */
  async close(): Promise<void> {
    clearInterval(this.heartbeat);
    this.diskWatch?.stop();
    this.loop.shutdown();
    // Ends a pull or create still going on, and the output follower.
    this.ending.abort();
    if (this.started) await this.started.catch(() => undefined);
    const id = this.id;
    if (id) {
      const waited = AbortSignal.timeout(10_000);
      await quietly(this.o.engine.wait(id, waited));
      await this.o.removals.remove(id, this.name);
    }
    this.loop.close();
    this.execHandle.close();
    this.runHandle.close();
    try {
      rmSync(this.dir, { recursive: true, force: true });
    } catch (err) {
      this.o.log.warn({ dir: this.dir, err: messageOf(err) }, "could not delete the job's directory");
    }
  }
}
