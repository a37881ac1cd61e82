import { DroverError, type JobAssignment, messageOf, oneLineError } from "@drover/protocol";
import { noopTracer, startTelemetryIfSet, type Telemetry } from "@drover/runtime";
import type { Server } from "node:http";
import type { Logger } from "pino";
import { pause } from "./session/backoff.js";
import { AgentClient, type ClientTimeouts } from "./session/client.js";
import { PoolSession, TokenRefusedError, type Room } from "./session/pool-session.js";
import { stopPlan, stopReserveMs, type AgentConfig } from "./config.js";
import { closeHealthServer, startHealthServer } from "./health.js";
import { AgentMetrics } from "./metrics.js";
import { chmodSync, mkdirSync } from "node:fs";
import { prepareDataDir } from "./data-dir.js";
import { runnerAs } from "./runners/run-user.js";
import { localRunner } from "./runners/runner.js";
import { JobRun, type JobSettings } from "./job/job.js";
import { KeptPlanDirs } from "./job/kept-plans.js";
import { reapOrphans } from "./runners/orphans.js";
import { DockerEngine } from "./drivers/docker/engine-api.js";
import { prepareDocker, runContainer } from "./drivers/docker/run-container.js";
import { ContainerRemovals } from "./drivers/docker/removals.js";
import { writeAgentStatus } from "./drivers/kubernetes/agent-status.js";
import type { ProviderCache } from "./providers/cache.js";
import type { ModuleCache } from "./modules/cache.js";
import { openCaches } from "./cache/caches.js";
import type { EngineCache } from "./engines/cache.js";
import { probeEnginesOnPath } from "./job/engine.js";

/**
 * Agent lifecycle: starting → running → stopping → stopped. Wrong transitions are bugs.
 * `running` polls for work; `stopping` takes none and winds running jobs down per the stop
 * action; `stopped` has deregistered.
 */
export type AgentState = "starting" | "running" | "stopping" | "stopped";

/** Knobs for tests and embedders; the defaults are the production behaviour. */
export interface AgentOptions {
  /** Overrides the heartbeat interval the server hands out at registration. */
  heartbeatMs?: number;
  /** Overrides the HTTP client's deadlines. */
  timeouts?: Partial<ClientTimeouts>;
}

export class Agent {
  state: AgentState = "starting";
  private readonly client: AgentClient;
  private readonly session: PoolSession;
  private readonly metrics = new AgentMetrics();
  /** Running jobs by job id and attempt, with the promise of each one's end. */
  private readonly jobs = new Map<string, { run: JobRun; ended: Promise<void>; slot: number }>();
  private health: Server | undefined;
  private lastActivity: number | null = null;
  private jobsTaken = 0;
  private exitCode = 0;
  private stopping: Promise<void> | undefined;
  private beginStop: () => void = () => undefined;
  private readonly stopBegun = new Promise<void>((resolve) => (this.beginStop = resolve));
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
  /** The docker driver's removals of run containers, retried while the daemon refuses one. */
  private readonly removals: ContainerRemovals | undefined;

  constructor(
    private readonly config: AgentConfig,
    private readonly log: Logger,
    options: AgentOptions = {},
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
    if (config.docker) {
      this.docker = new DockerEngine(config.docker.socketPath);
      this.removals = new ContainerRemovals(this.docker, log);
    }
    this.session = new PoolSession({
      client: this.client,
      poolToken: config.token,
      tokenSource: config.tokenSource,
      name: config.name,
      driver: config.driver,
      capacity: config.concurrency,
      pollWaitMs: config.pollWaitMs,
      log,
      registeredLog: "registered",
      heartbeatMs: options.heartbeatMs,
      room: () => this.room(),
      onPolled: () => (this.lastActivity = Date.now()),
      onJob: (job) => this.startJob(job),
      load: () => ({ runningJobs: this.jobs.size, keptPlanRuns: this.keptPlans.runIds().slice(0, 100) }),
      onDropPlanRuns: (runIds) => runIds.forEach((runId) => this.keptPlans.release(runId)),
      onRegistered: (reg) => this.startTelemetry(reg.poolName),
      onError: (kind) => {
        if (kind === "poll") this.metrics.pollErrors.inc();
        this.metrics.error(kind);
      },
      onHeartbeat: (seconds) => this.metrics.heartbeatSeconds(seconds),
    });
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

  /** Whether the poll loop may take a job now. */
  private room(): Room {
    if (this.state !== "running") return "finished";
    if (this.config.single && this.jobsTaken > 0) return "finished";
    return this.jobs.size >= this.config.concurrency ? "full" : "free";
  }

  private async startTelemetry(pool: string): Promise<void> {
    if (!this.config.otlp || this.telemetryStarted) return;
    this.telemetryStarted = true;
    try {
      this.telemetry = await startTelemetryIfSet({
        ...this.config.otlp,
        resource: {
          "service.name": "drover-agent",
          "drover.pool": pool,
          "drover.agent": this.config.name,
          "k8s.pod.name": this.config.kubernetesPod,
        },
        registry: this.metrics.registry,
      });
    } catch (err) {
      this.log.warn({ err: messageOf(err) }, "OpenTelemetry export could not start; running without it");
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
      this.engines?.warnWithoutPathEngines();
      probeEnginesOnPath(process.env.PATH);
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
    let registered: boolean;
    try {
      // Before any work: processes an earlier run of this agent left behind (it was killed)
      // must not run beside a new attempt.
      await reapOrphans(this.config.dataDir, this.log, this.config.runUsers);
      if (this.docker) await prepareDocker(this.docker, this.config, this.log);
      registered = await this.session.start();
    } catch (err) {
      await this.closeHealth();
      this.removals?.stop();
      await this.docker?.close();
      throw err;
    }
    if (!registered) {
      await this.stopping;
      return this.exitCode;
    }
    if (this.state === "starting") this.transition("running");
    this.publishStatus();
    try {
      await this.session.poll();
    } catch (err) {
      // The pool token was refused or revoked (the session logged it): running jobs wind down
      // per the stop action, and the exit code says it is the token to fix.
      this.exitCode = err instanceof TokenRefusedError ? 2 : 1;
      void this.stop();
    }
    // A single-job agent has stopped polling; it stops once that job has ended.
    await this.stopBegun;
    await this.stopping;
    // The last jobs' spans and the final counters go out before the process exits.
    await this.telemetry
      .shutdown()
      .catch((err: unknown) => this.log.warn({ err: messageOf(err) }, "flushing telemetry failed"));
    return this.exitCode;
  }

  private startJob(assignment: JobAssignment): void {
    this.jobsTaken++;
    // The daemon is likely back by now: a container it would not remove at an earlier job's end goes first.
    void this.removals?.sweep();
    const container =
      this.docker && this.removals
        ? runContainer({ engine: this.docker, config: this.config, assignment, log: this.log, removals: this.removals })
        : undefined;
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
        this.session.roomFreed();
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

  /** What jobs could not deliver to the server, printed when the agent stops. */
  private readonly undelivered: string[] = [];

  /** Aborted when the agent begins stopping. */
  get stopSignal(): AbortSignal {
    return this.session.signal;
  }

  /**
   * Stops the agent: take no more jobs, wind running ones down per the stop action,
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
      this.beginStop();
      await this.session.stop();
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
      const left = plan.budgetMs - (Date.now() - started) - 250;
      // A refused token cannot deregister: trying would only bury its one-line error under warnings.
      if (!(this.session.fatalError instanceof TokenRefusedError))
        try {
          await this.session.deregister(AbortSignal.timeout(Math.max(1, Math.min(5_000, left))));
        } catch (err) {
          this.log.warn({ err: messageOf(err) }, "deregistration failed");
          this.undelivered.push("deregistration undelivered");
        }
      await this.closeHealth();
      this.removals?.stop();
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
    return this.session.fatalError;
  }
}

/**
 * Runs an agent until it stops: on SIGTERM/SIGINT it stops per its stop action; a second
 * signal escalates. Resolves with the exit code (0 normal stop, 1 fatal, 2 the token was refused).
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
    log.error(oneLineError(err));
    // A refused token or a taken port is a setting to fix, like any other bad setting: exit 2.
    const setting = err instanceof TokenRefusedError || (err instanceof DroverError && err.code === "invalid_setting");
    return setting ? 2 : 1;
  });
  return { agent, done };
}
