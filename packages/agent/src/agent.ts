import {
  DroverError,
  noopTracer,
  startTelemetryIfSet,
  type JobAssignment,
  type Telemetry,
  messageOf,
} from "@drover/protocol";
import type { Server } from "node:http";
import type { Logger } from "pino";
import { pause, waitFor } from "./session/backoff.js";
import { AgentClient, NetworkError, type ClientTimeouts } from "./session/client.js";
import { stopPlan, stopReserveMs, type AgentConfig } from "./config.js";
import { AgentMetrics, closeHealthServer, startHealthServer } from "./health.js";
import { chmodSync, mkdirSync } from "node:fs";
import { prepareDataDir } from "./data-dir.js";
import { runnerAs } from "./runners/run-user.js";
import { localRunner } from "./runners/runner.js";
import { JobRun, type JobSettings } from "./job/job.js";
import { KeptPlanDirs } from "./job/kept-plans.js";
import { agentTag, reapOrphans } from "./runners/orphans.js";
import { ContainerJob } from "./runners/container.js";
import { DockerEngine } from "./drivers/docker/engine-api.js";
import { reapDockerOrphans } from "./drivers/docker/orphans.js";
import type { Runner } from "./runners/runner.js";
import { createRequire } from "node:module";

/**
 * The exec-loop script shipped with this package; the docker driver mounts it into every run
 * container. Resolved through the package's exports: the script is not under dist/.
 */
const execLoopPath = createRequire(import.meta.url).resolve("@drover/agent/exec-loop.sh");
import { writeAgentStatus } from "./drivers/kubernetes/agent-status.js";
import type { ProviderCache } from "./providers/cache.js";
import type { ModuleCache } from "./modules/cache.js";
import { openCaches } from "./cache/caches.js";
import type { EngineCache } from "./engines/cache.js";

export const agentVersion = "0.1.0";
/**
 * Agent lifecycle: starting → running → stopping → stopped. Wrong transitions are bugs.
 * `running` polls for work; `stopping` takes none and winds running jobs down per the stop
 * action; `stopped` has deregistered.
 */
export type AgentState = "starting" | "running" | "stopping" | "stopped";

/** The pool token was revoked or is unknown: the agent cannot go on. */
export class FatalAgentError extends Error {
  override readonly name = "FatalAgentError";
}

/** The agent began stopping while a call was being retried. */
class StopRequested extends Error {}

/** Knobs for tests and embedders; the defaults are the production behaviour. */
export interface AgentOptions {
  /** Overrides the heartbeat interval the server hands out at registration. */
  heartbeatMs?: number;
  /** Overrides the HTTP client's deadlines. */
  timeouts?: Partial<ClientTimeouts>;
}

const maxRegisterBackoffMs = 30_000;

export class Agent {
  state: AgentState = "starting";
  private readonly client: AgentClient;
  private readonly metrics = new AgentMetrics();
  private session: string | undefined;
  private heartbeatMs = 10_000;
  /** Running jobs by job id and attempt, with the promise of each one's end. */
  private readonly jobs = new Map<string, { run: JobRun; ended: Promise<void>; slot: number }>();
  private readonly pollAbort = new AbortController();
  private health: Server | undefined;
  private lastActivity: number | null = null;
  private jobsTaken = 0;
  private exitCode = 0;
  private stopping: Promise<void> | undefined;
  private slotFreed: (() => void) | undefined;
  private fatal: Error | undefined;
  private readonly keptPlans: KeptPlanDirs;
  /** The provider cache runs read (DROVER_AGENT_PROVIDER_CACHE_ENABLED). */
  private readonly providerCache: ProviderCache | undefined;
  /** The module cache runs read (DROVER_AGENT_MODULE_CACHE_ENABLED). */
  private readonly moduleCache: ModuleCache | undefined;
  /** The engine versions workspaces ask for (local driver; containers bring their own engine). */
  private readonly engines: EngineCache | undefined;
  /** OTLP export; the no-op one unless DROVER_AGENT_OTLP_ENDPOINT is set. */
  private telemetry: Telemetry = { tracer: noopTracer, shutdown: async () => undefined };
  private telemetryStarted = false;
  /** The Docker Engine API of the docker driver. */
  private readonly docker: DockerEngine | undefined;

  constructor(
    private readonly config: AgentConfig,
    private readonly log: Logger,
    private readonly options: AgentOptions = {},
  ) {
    this.client = new AgentClient(config.url, config.caCertPem, options.timeouts);
    this.keptPlans = new KeptPlanDirs(config.dataDir, config.concurrency, config.planReuseMs);
    const caches = openCaches(config, this.client.dispatcher, log, config.caCertPem);
    this.providerCache = caches.providers;
    this.moduleCache = caches.modules;
    if (this.providerCache) this.metrics.addCache("providers", this.providerCache.counters);
    if (this.moduleCache) this.metrics.addCache("modules", this.moduleCache.counters);
    // The controller runs no job itself: its pods' workers keep the releases.
    if (config.driver !== "kubernetes") {
      this.engines = caches.engines;
      if (this.engines) this.metrics.addCache("engines", this.engines.counters);
    }
    if (config.docker) this.docker = new DockerEngine(config.docker.socketPath);
  }

  private transition(to: AgentState): void {
    const allowed: Record<AgentState, AgentState[]> = {
      starting: ["running", "stopping"],
      running: ["stopping"],
      stopping: ["stopped"],
      stopped: [],
    };
    if (!allowed[this.state].includes(to)) throw new Error(`agent cannot go from ${this.state} to ${to}`);
    this.state = to;
  }

  private async register(): Promise<void> {
    const reg = await this.client.register(this.config.token, {
      name: this.config.name,
      version: agentVersion,
      driver: this.config.driver,
      capacity: this.config.concurrency,
    });
    this.session = reg.sessionToken;
    this.heartbeatMs = this.options.heartbeatMs ?? reg.heartbeatIntervalMs;
    this.log.info({ agent: reg.agentId, pool: reg.poolName, url: this.config.url }, "registered");
    if (this.config.otlp && !this.telemetryStarted) {
      this.telemetryStarted = true;
      try {
        this.telemetry = await startTelemetryIfSet({
          ...this.config.otlp,
          resource: {
            "service.name": "drover-agent",
            "drover.pool": reg.poolName,
            "drover.agent": this.config.name,
            "k8s.pod.name": this.config.kubernetesPod,
          },
          exposition: () => this.metrics.render(),
        });
      } catch (err) {
        this.log.warn({ err: messageOf(err) }, "OpenTelemetry export could not start; running without it");
      }
    }
  }

  /** Runs until stopped; resolves with the process exit code. */
  async run(): Promise<number> {
    if (this.config.driver === "local") {
      // Everything runs create (variables file, plan, state copies) is for this user's eyes only.
      process.umask(0o077);
      const leftovers = prepareDataDir(this.config.dataDir, this.config.runUsers ? 0o711 : 0o700);
      if (this.config.runUsers) {
        // The run user reaches its provider cache below it, without listing anything else.
        mkdirSync(this.config.cacheDir, { recursive: true, mode: 0o711 });
        chmodSync(this.config.cacheDir, 0o711);
      }
      if (leftovers.length > 0)
        this.log.info({ removed: leftovers }, "removed run directories an earlier agent process left behind");
    }
    if (this.docker) prepareDataDir(this.config.dataDir, 0o700);
    if (this.config.healthPort > 0) {
      this.health = await startHealthServer(
        this.config.healthPort,
        {
          health: () => ({
            live: this.state !== "stopped",
            ready: this.state === "running",
            details: {
              state: this.state,
              lastActivity: this.lastActivity ? new Date(this.lastActivity).toISOString() : null,
            },
          }),
          metrics: () => this.metrics.render(),
        },
        this.config.healthAddress,
      );
    }
    try {
      // Before any work: processes an earlier run of this agent left behind (it was killed)
      // must not run beside a new attempt.
      await reapOrphans(this.config.dataDir, this.log, this.config.runUsers);
      if (this.docker) {
        // Before any work: containers of an earlier process of this agent are removed and their runs ended.
        await this.docker.version(AbortSignal.timeout(30_000));
        await reapDockerOrphans(
          this.docker,
          this.config.dataDir,
          agentTag(this.config.dataDir),
          this.config.caCertPem,
          this.log,
        );
      }
      await this.retrying(() => this.register());
    } catch (err) {
      if (err instanceof StopRequested) {
        await this.stopping;
        return this.exitCode;
      }
      await this.closeHealth();
      await this.docker?.close();
      throw err;
    }
    if (this.state === "starting") this.transition("running");
    this.publishStatus();
    const heartbeat = this.heartbeatLoop();
    await this.pollLoop();
    if (this.fatal) {
      this.exitCode = 1;
      await this.stop();
    }
    await this.stopping;
    await heartbeat;
    // The last jobs' spans and the final counters go out before the process exits.
    await this.telemetry
      .shutdown()
      .catch((err: unknown) => this.log.warn({ err: messageOf(err) }, "flushing telemetry failed"));
    return this.exitCode;
  }

  /**
   * Retries registration-type calls on network errors with backoff (or the server's
   * Retry-After) until they succeed or the agent stops (StopRequested); auth errors are fatal.
   */
  private async retrying<T>(work: () => Promise<T>): Promise<T> {
    let delay = 500;
    const stop = this.pollAbort.signal;
    for (;;) {
      if (stop.aborted) throw new StopRequested();
      try {
        return await work();
      } catch (err) {
        if (err instanceof DroverError && (err.code === "token_revoked" || err.code === "unauthorized")) {
          throw new FatalAgentError(
            err.code === "token_revoked"
              ? `the pool token was revoked; stopping (${err.message})`
              : `the server refused the pool token; stopping (${err.message})`,
          );
        }
        if (stop.aborted) throw new StopRequested();
        if (!(err instanceof NetworkError)) throw err;
        this.metrics.error("register");
        const wait = waitFor(err, delay);
        this.log.warn({ err: err.message, retryInMs: wait }, "server unreachable");
        await pause(wait, stop);
        delay = Math.min(maxRegisterBackoffMs, delay * 2);
      }
    }
  }

  private async pollLoop(): Promise<void> {
    while (this.state === "running" && !this.fatal) {
      if (this.jobs.size >= this.config.concurrency) {
        await new Promise<void>((r) => (this.slotFreed = r));
        continue;
      }
      if (this.config.single && this.jobsTaken > 0) return;
      let job: JobAssignment | null = null;
      try {
        job = await this.client.poll(this.session!, this.config.pollWaitMs, this.pollAbort.signal);
        this.lastActivity = Date.now();
      } catch (err) {
        if (this.pollAbort.signal.aborted) return;
        await this.handleSessionError(err, "poll");
        continue;
      }
      if (job) this.startJob(job);
    }
  }

  /** Decides what a failed session call (`kind`) means: re-register, stop, or retry later. */
  private async handleSessionError(err: unknown, kind: "poll" | "heartbeat"): Promise<void> {
    if (err instanceof DroverError && err.code === "agent_lost") {
      this.metrics.error("session_lost");
      this.log.warn({ err: err.message }, "the server no longer knows this agent; registering again");
      try {
        await this.retrying(() => this.register());
      } catch (e) {
        if (e instanceof StopRequested) return;
        this.fatal = e instanceof Error ? e : new Error(String(e));
      }
      return;
    }
    if (err instanceof DroverError && (err.code === "token_revoked" || err.code === "unauthorized")) {
      this.fatal = new FatalAgentError(
        err.code === "token_revoked"
          ? `the pool token was revoked; stopping (${err.message})`
          : `the server refused this agent; stopping (${err.message})`,
      );
      this.log.error(this.fatal.message);
      this.pollAbort.abort();
      this.slotFreed?.();
      return;
    }
    if (kind === "poll") this.metrics.pollErrors.inc();
    this.metrics.error(kind);
    this.log.warn({ err: messageOf(err) }, `${kind} failed; retrying`);
    await pause(waitFor(err, 1000), this.pollAbort.signal);
  }

  private startJob(assignment: JobAssignment): void {
    this.jobsTaken++;
    const container = this.docker ? this.containerJob(assignment) : undefined;
    // Held until the job's end has killed every process of its run user (JobRun.endProcesses).
    const slot = this.freeSlot();
    const runAs = this.config.runUsers?.[slot];
    const run = container
      ? new JobRun({
          assignment,
          client: this.client,
          settings: { ...container.config, ...this.jobHooks() },
          logger: this.log,
          runner: container.runner,
          engines: this.engines,
        })
      : new JobRun({
          assignment,
          client: this.client,
          settings: { ...this.config, ...this.jobHooks(), runAs, ownsRunUser: runAs !== undefined },
          logger: this.log,
          runner: runAs ? runnerAs(localRunner, runAs) : undefined,
          keptPlans: this.keptPlans,
          providerCache: this.providerCache,
          moduleCache: this.moduleCache,
          engines: this.engines,
        });
    const key = `${assignment.jobId}-${assignment.attempt}`;
    // An older attempt of this job still winding down here (its lease lapsed) ends first: a new
    // attempt never runs beside processes of an older one.
    const older = [...this.jobs.entries()]
      .filter(([k, j]) => k !== key && j.run.id === assignment.jobId)
      .map(([, j]) => j);
    for (const j of older) j.run.kill();
    this.log.info(
      { job: assignment.jobId, run: assignment.runId, phase: assignment.phase, workspace: assignment.workspace.name },
      "job received",
    );
    const ended = Promise.all(older.map((j) => j.ended))
      .then(() => run.execute())
      .then(() => container?.close())
      .finally(() => {
        this.jobs.delete(key);
        for (const line of run.undelivered) this.undelivered.push(line);
        this.metrics.jobsRunning.set(this.jobs.size);
        this.publishStatus();
        this.metrics.jobsFinished.inc({ phase: assignment.phase });
        this.slotFreed?.();
        if (this.config.single && this.jobs.size === 0) void this.stop();
      });
    this.jobs.set(key, { run, ended, slot });
    this.metrics.jobsRunning.set(this.jobs.size);
    this.publishStatus();
  }

  /** The lowest job slot no running job holds (the poll loop takes work only with one free). */
  private freeSlot(): number {
    const held = new Set([...this.jobs.values()].map((j) => j.slot));
    let slot = 0;
    while (held.has(slot)) slot++;
    return slot;
  }

  /** What each job reports back to this agent: spans, log bytes shipped, errors. */
  private jobHooks(): Pick<JobSettings, "tracer" | "onLogBytes" | "onError"> {
    return { tracer: this.telemetry.tracer, onLogBytes: this.metrics.logBytesShipped, onError: this.metrics.error };
  }

  /** Writes the status file the pod-annotator sidecar reads (busy or idle), when one is configured. */
  private publishStatus(): void {
    if (!this.config.statusFile) return;
    try {
      writeAgentStatus(this.config.statusFile, { runningJobs: this.jobs.size, state: this.state });
    } catch (err) {
      this.log.warn({ err: messageOf(err), file: this.config.statusFile }, "cannot write the agent status file");
    }
  }

  /**
   * The docker driver's runner for one job (its own container) and the configuration its JobRun
   * uses: the run directory lives in the job's directory, providers are not shared between
   * runs' containers, and an agent running as root gives the run's files to the container's user.
   */
  private containerJob(assignment: JobAssignment): {
    runner: Runner;
    config: AgentConfig & Pick<JobSettings, "runAs">;
    close(): Promise<void>;
  } {
    const docker = this.config.docker!;
    try {
      const job = new ContainerJob({
        engine: this.docker!,
        settings: docker,
        assignment,
        dataDir: this.config.dataDir,
        serverUrl: this.client.baseUrl,
        agentName: this.config.name,
        agentTag: agentTag(this.config.dataDir),
        execLoopPath,
        taskCaCertPath: this.config.taskCaCertPath,
        hooksDir: this.config.hooksDir,
        log: this.log.child({ job: assignment.jobId }),
      });
      const runAs = process.getuid?.() === 0 ? docker.user : undefined;
      return {
        runner: job,
        config: { ...this.config, dataDir: job.runBase, planReuseMs: 0, runAs },
        close: () => job.close(),
      };
    } catch (err) {
      // The job still ends, errored with the reason, through the usual path.
      const why = `the run's container could not be prepared: ${messageOf(err)}`;
      const failing: Runner = {
        engine: () => Promise.reject(new DroverError("internal", why)),
        start: () => ({ signal: () => {}, done: Promise.resolve({ code: null, signal: null, failure: why }) }),
        capture: () => Promise.reject(new DroverError("internal", why)),
      };
      return { runner: failing, config: { ...this.config, planReuseMs: 0 }, close: async () => {} };
    }
  }

  /** What jobs could not deliver to the server, printed when the agent stops. */
  private readonly undelivered: string[] = [];

  /** Aborted when the agent begins stopping. */
  get stopSignal(): AbortSignal {
    return this.pollAbort.signal;
  }

  private async heartbeatLoop(): Promise<void> {
    while (this.state === "running" || this.state === "starting") {
      await pause(this.heartbeatMs, this.pollAbort.signal);
      if (this.state !== "running" || !this.session) return;
      try {
        const sent = performance.now();
        const drop = await this.client.heartbeat(
          this.session,
          this.jobs.size,
          this.pollAbort.signal,
          this.keptPlans.runIds().slice(0, 100),
        );
        this.metrics.heartbeatSeconds((performance.now() - sent) / 1000);
        for (const runId of drop) this.keptPlans.release(runId);
      } catch (err) {
        if (this.state !== "running") return;
        await this.handleSessionError(err, "heartbeat");
      }
    }
  }

  /**
   * Stops the agent (SPEC §5): take no more jobs, wind running ones down per the stop action,
   * deregister. Idempotent; a second call (second signal) kills running jobs at once.
   */
  stop(): Promise<void> {
    if (this.stopping) {
      for (const job of this.jobs.values()) job.run.kill();
      return this.stopping;
    }
    this.stopping = (async () => {
      const started = Date.now();
      if (this.state !== "stopping") this.transition("stopping");
      this.pollAbort.abort();
      this.slotFreed?.();
      const plan = stopPlan(this.config.stopAction, this.config.gracePeriodMs);
      if (this.jobs.size > 0)
        this.log.info(
          { jobs: this.jobs.size, action: this.config.stopAction, budgetMs: plan.budgetMs },
          "stopping: winding down running jobs",
        );
      for (const job of this.jobs.values()) job.run.stop(plan, this.config.stopAction);
      // Each job delivers within the budget (minus the reserve); this wait is a backstop.
      const jobsEnded = Promise.all([...this.jobs.values()].map((j) => j.ended));
      const backstop = new AbortController();
      await Promise.race([
        jobsEnded,
        pause(Math.max(0, plan.budgetMs - stopReserveMs / 2 - (Date.now() - started)), backstop.signal),
      ]);
      backstop.abort();
      for (const job of this.jobs.values())
        this.undelivered.push(`job ${job.run.id}: did not end within the stop budget`);
      this.keptPlans.clear();
      if (this.session) {
        const left = plan.budgetMs - (Date.now() - started) - 250;
        try {
          await this.client.deregister(this.session, AbortSignal.timeout(Math.max(1, Math.min(5_000, left))));
        } catch (err) {
          this.log.warn({ err: messageOf(err) }, "deregistration failed");
          this.undelivered.push("deregistration undelivered");
        }
      }
      await this.closeHealth();
      await this.docker?.close();
      for (const line of this.undelivered) this.log.warn({ undelivered: line }, `undelivered: ${line}`);
      this.transition("stopped");
      this.log.info("agent stopped");
    })();
    return this.stopping;
  }

  private async closeHealth(): Promise<void> {
    const h = this.health;
    this.health = undefined;
    await closeHealthServer(h);
  }

  /** Why the agent ended, when it ended on its own. */
  get fatalError(): Error | undefined {
    return this.fatal;
  }
}

/**
 * Runs an agent until it stops: on SIGTERM/SIGINT it stops per its stop action; a second
 * signal escalates. Resolves with the exit code (0 normal stop, 1 fatal).
 */
export async function runAgent(
  config: AgentConfig,
  log: Logger,
  options: { handleSignals?: boolean } & AgentOptions = {},
): Promise<{ agent: Agent; done: Promise<number> }> {
  const agent = new Agent(config, log, options);
  if (options.handleSignals !== false) {
    const onSignal = (sig: string) => {
      log.info({ signal: sig }, "stop signal received");
      void agent.stop();
    };
    process.on("SIGTERM", onSignal);
    process.on("SIGINT", onSignal);
  }
  const done = agent.run().catch((err: unknown) => {
    log.error(messageOf(err));
    return 1;
  });
  return { agent, done };
}
