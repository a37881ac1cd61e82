import {
  DroverError,
  firstSentence,
  jobTakenAway,
  type JobAssignment,
  type JobTakenAway,
  type JobOutcome,
  messageOf,
} from "@drover/protocol";
import { noopTracer, redactText, type SpanHandle } from "@drover/runtime";
import { randomUUID } from "node:crypto";
import { join } from "node:path";
import type { Logger } from "pino";
import { pause } from "../session/backoff.js";
import { NetworkError, withRetry } from "../session/client.js";
import { stopReserveMs, type StopPlan } from "../config.js";
import type { KeptPlanDirs } from "./kept-plans.js";
import { LogStream } from "./log-stream.js";
import { chownTree } from "../runners/run-user.js";
import { localRunner, type Runner } from "../runners/runner.js";
import { localRunFiles } from "./local-files.js";
import {
  Interrupted,
  StepFailed,
  type JobApi,
  type JobCaches,
  type JobContext,
  type JobServer,
  type JobSettings,
} from "./context.js";
import { runPipeline, StageError, type Stage } from "./pipeline.js";
import { stagesOf } from "./stages/index.js";
import { planDirKey, processTag } from "./stages/prepare.js";
import { Steps } from "./steps.js";

export type { JobSettings, JobServer, JobApi } from "./context.js";
export { errorExcerpt } from "./steps.js";

/** Job states as the agent tracks them. */
export type JobRunState = "starting" | "running" | "finishing" | "done";

const cancelTermAfterMs = 10_000;
const cancelKillAfterMs = 20_000;
const heartbeatWaitMs = 10_000;
/** What a heartbeat's deadline allows past its wait for a busy server's late answer. */
const heartbeatSlackMs = 5_000;

/** What one job run is given. */
export interface JobRunOptions extends JobCaches {
  assignment: JobAssignment;
  /** The server the job's calls go to (an AgentClient). */
  client: JobServer;
  settings: JobSettings;
  logger: Logger;
  /** Where its steps run; unset: local processes. */
  runner?: Runner | undefined;
  /** This agent's kept plan directories (the local driver's only). */
  keptPlans?: KeptPlanDirs | undefined;
  /** The stages to run; unset: those of the assignment's phase (see stagesOf). */
  stages?: readonly Stage[];
}

/**
 * One job executing on this agent: started on the server, its stages run in order while a
 * held heartbeat renews its lease and carries cancels, then its outcome reported.
 */
export class JobRun {
  state: JobRunState = "starting";
  private readonly assignment: JobAssignment;
  private readonly config: JobSettings;
  private readonly logger: Logger;
  private readonly job: JobApi;
  private readonly log: LogStream;
  private readonly steps: Steps;
  private readonly context: JobContext;
  /** Aborted when the job is over: ends its heartbeats. */
  private readonly abort = new AbortController();
  /**
   * Aborted when the job's work must end (canceled, stopped, killed, lease lost, or over): ends
   * its retries and the transfers in flight.
   */
  private readonly work = new AbortController();
  /** Aborted when a stop's budget leaves no more time to deliver the log and the outcome. */
  private readonly delivery = new AbortController();
  private readonly undeliveredItems: string[] = [];
  private canceled = false;
  private stopSignalled = false;
  private lost = false;
  private readonly timers: NodeJS.Timeout[] = [];
  /** This process's span of the job; stage spans are its children. */
  private trace: SpanHandle | undefined;
  private readonly stages: readonly Stage[];

  constructor(o: JobRunOptions) {
    const a = o.assignment;
    this.assignment = a;
    this.config = o.settings;
    this.logger = o.logger;
    this.job = o.client.job(a.jobId, a.jobToken);
    this.log = new LogStream(this.job, {
      onAcknowledged: o.settings.onLogBytes,
      onRetry: o.settings.onError && (() => o.settings.onError?.("log_upload")),
      onRefused: (err) => this.takenAway(err),
    });
    const runner = o.runner ?? localRunner;
    const runDir = join(o.settings.dataDir, `${a.jobId}-${a.attempt}`);
    this.steps = new Steps({
      runner,
      log: this.log,
      logger: o.logger,
      engine: a.workspace.engine,
      dataDir: o.settings.dataDir,
      key: `${a.jobId}-${a.attempt}`,
      processTag: processTag({ settings: o.settings, assignment: a }),
      ownedUser: o.settings.ownsRunUser ? o.settings.runAs : undefined,
      hookTimeoutMs: o.settings.hookTimeoutMs,
      interruption: () => this.interruption(),
      secrets: () => this.context.secrets,
      signal: this.work.signal,
    });
    this.context = {
      assignment: a,
      settings: o.settings,
      runner,
      // Through the runner when it shares them with a runner container.
      files: runner.files ?? localRunFiles(o.settings.dataDir),
      job: this.job,
      serverUrl: o.client.baseUrl,
      log: this.log,
      logger: o.logger,
      steps: this.steps,
      keptPlans: o.keptPlans,
      providerCache: o.providerCache,
      moduleCache: o.moduleCache,
      engines: o.engines,
      signal: this.work.signal,
      runDir,
      configDir: join(runDir, "config"),
      planPath: join(runDir, "plan.tfplan"),
      reused: false,
      variables: [],
      secrets: [],
      workDir: join(runDir, "config"),
      writeDir: join(runDir, "config"),
      env: {},
    };
    this.stages = o.stages ?? stagesOf(a.phase);
  }

  get id(): string {
    return this.assignment.jobId;
  }

  /** The user asked to cancel: interrupt terraform, then escalate. */
  cancel(): void {
    if (this.canceled) return;
    this.canceled = true;
    this.log.line("\n[drover] cancel requested: interrupting");
    // A transfer in flight would otherwise go on for as long as its deadline allows.
    this.work.abort();
    this.steps.signal("SIGINT");
    this.later(cancelTermAfterMs, () => this.steps.signal("SIGTERM"));
    this.later(cancelKillAfterMs, () => this.steps.signal("SIGKILL"));
  }

  /**
   * The agent is stopping: let the job go on for `continueMs`, then signal, then kill; its log
   * and outcome are delivered within the stop budget or reported undelivered.
   */
  stop(plan: StopPlan, action: string): void {
    this.later(Math.max(0, plan.budgetMs - stopReserveMs), () => this.delivery.abort());
    this.later(plan.continueMs, () => {
      if (this.state === "done" || this.state === "finishing") return;
      this.stopSignalled = true;
      this.work.abort();
      this.log.line(
        `\n[drover] agent stopped (${action} stop): ${plan.firstSignal === "SIGKILL" ? "killing" : "interrupting"} ${this.assignment.workspace.engine}`,
      );
      if (plan.firstSignal === "SIGKILL") this.steps.kill();
      else {
        this.steps.signal(plan.firstSignal);
        this.later(plan.killAfterMs, () => this.steps.kill());
      }
    });
  }

  /** Second signal to the agent: kill now. */
  kill(): void {
    this.stopSignalled = true;
    this.work.abort();
    this.steps.kill();
  }

  /** What could not reach the server when the job ended (one line each); empty when all did. */
  get undelivered(): readonly string[] {
    return this.undeliveredItems;
  }

  private later(ms: number, fn: () => void): void {
    const t = setTimeout(fn, ms);
    t.unref();
    this.timers.push(t);
  }

  /**
   * The one answer to "must the job end now?": asked between stages and before each step. A
   * stop, a kill or a lost lease also abort `work`, which ends the server calls of a stage.
   */
  private interruption(): Interrupted | undefined {
    if (this.stopSignalled) return new Interrupted("agent stopped");
    if (this.canceled) return new Interrupted("canceled by request");
    if (this.lost) return new Interrupted("lease lost");
    return undefined;
  }

  /**
   * Whether a refused job call says the job is no longer this agent's (superseded, ended, or its
   * token forgotten); the first to say so stops it at once: nothing more is written or retried.
   */
  private takenAway(err: unknown): boolean {
    const gone = jobTakenAway(err);
    if (!gone) return false;
    if (this.lost) return true;
    this.lost = true;
    this.logger.warn({ job: this.id, err: messageOf(err), ...gone }, takenAwayMessage(gone));
    this.log.abandon();
    this.kill();
    return true;
  }

  /** Executes the job to the end and reports its outcome; never throws. */
  async execute(): Promise<void> {
    const a = this.assignment;
    const started = Date.now();
    const tracer = this.config.tracer ?? noopTracer;
    this.trace = tracer.start(`agent ${a.phase}`, a.traceparent, {
      attributes: { "drover.phase": a.phase, "drover.agent": this.config.name, "drover.run.id": a.runId },
    });
    if (!(await this.start())) return;
    this.state = "running";
    const heartbeats = this.heartbeatLoop();
    let outcome: JobOutcome = "succeeded";
    let message: string | null = null;
    let where = "";
    // Terraform's error block is in the log already: the outcome line quotes its first sentence only.
    let inLog = false;
    try {
      await runPipeline(this.stages, this.context, {
        interruption: () => this.interruption(),
        tracer,
        parent: this.trace,
      });
    } catch (err) {
      const cause = err instanceof StageError ? err.cause : err;
      this.takenAway(cause);
      if (err instanceof StageError) where = ` ${err.before ? "before" : "in"} stage ${err.stage}`;
      [outcome, message] = outcomeOf(cause);
      inLog = cause instanceof StepFailed && cause.output !== "";
    }
    await this.steps.end();
    if (this.stopSignalled)
      [outcome, message] = ["errored", `agent stopped (${this.config.stopAction} stop) while the ${a.phase} ran`];
    else if (this.canceled && outcome !== "succeeded") [outcome, message] = ["canceled", "canceled by request"];
    // The outcome message quotes terraform's output, which may echo a secret like the log does;
    // redacted whole, before any part of it (its first line) is logged or traced.
    if (message !== null) message = redactText(message, this.context.secrets);
    this.state = "finishing";
    this.keepPlanDir(outcome);
    const seconds = ((Date.now() - started) / 1000).toFixed(1);
    // The duration before the message, which ends the line: whole, or terraform's first sentence.
    const quoted = message === null || this.stopSignalled || this.canceled || !inLog ? message : firstSentence(message);
    this.log.line(`\n[drover] ${a.phase} ${outcome}${where} after ${seconds} s${quoted ? `: ${quoted}` : ""}`);
    await this.finish(outcome, message);
    this.trace.end(
      { "drover.outcome": outcome, ...(where ? { "drover.stage": where.trim() } : {}) },
      outcome === "succeeded" ? undefined : (message ?? outcome).split("\n")[0],
    );
    this.work.abort();
    this.abort.abort();
    await heartbeats;
    for (const t of this.timers) clearTimeout(t);
    this.context.files.discard(this.context.runDir);
    this.context.providerLease?.release();
    this.context.moduleLease?.release();
    this.context.engineLease?.release();
    this.state = "done";
    this.logger.info({ job: a.jobId, run: a.runId, phase: a.phase, outcome, stage: where.trim() }, "job finished");
  }

  /** Starts the job on the server; false when it is not this process's to run. */
  private async start(): Promise<boolean> {
    const a = this.assignment;
    const tracer = this.config.tracer ?? noopTracer;
    const claimed = tracer.start("claimed", this.trace);
    try {
      // One id for every try: the server takes a retried start as this one, and refuses any
      // other process (a second pod for the same job) with job_already_started.
      const starter = randomUUID();
      await withRetry(() => this.job.start(starter, this.work.signal), this.work.signal);
      claimed.end();
      return true;
    } catch (err) {
      const elsewhere = err instanceof DroverError && err.code === "job_already_started";
      if (elsewhere)
        this.logger.error({ job: a.jobId, attempt: a.attempt, code: err.code }, `${err.message}; no step ran here`);
      // Else canceled before it started, or reassigned: nothing to do.
      else this.logger.info({ job: a.jobId, err: messageOf(err) }, "job not started");
      const why = elsewhere ? "already started elsewhere" : "not started";
      claimed.end(undefined, why);
      this.trace?.end(undefined, why);
      this.state = "done";
      return false;
    }
  }

  /** Before the outcome is reported: the apply may be handed to this agent right after. */
  private keepPlanDir(outcome: JobOutcome): void {
    const a = this.assignment;
    const keptPlans = this.context.keptPlans;
    if (outcome !== "succeeded" || a.phase !== "plan" || a.planOnly || this.lost || !keptPlans) return;
    try {
      // Back to the agent while it waits: the next job of this slot's user is another run's.
      if (this.config.ownsRunUser)
        chownTree(this.context.runDir, { uid: process.getuid?.() ?? 0, gid: process.getgid?.() ?? 0 });
      keptPlans.keep(planDirKey(this.context), this.context.runDir);
    } catch (err) {
      this.logger.warn({ job: a.jobId, err: messageOf(err) }, "could not keep the plan directory for the apply");
    }
  }

  /** Delivers the log and the outcome within the stop budget; a job whose lease was lost reports nothing. */
  private async finish(outcome: JobOutcome, message: string | null): Promise<void> {
    const a = this.assignment;
    const deliver = this.delivery.signal;
    const finishing = (this.config.tracer ?? noopTracer).start("finish", this.trace);
    try {
      await this.log.close(deliver);
    } catch (err) {
      this.logger.warn({ job: a.jobId, err: messageOf(err) }, "could not deliver the whole log");
    }
    if (this.log.unsent > 0) this.undeliveredItems.push(`job ${a.jobId}: ${this.log.unsent} log bytes undelivered`);
    if (!this.lost) {
      try {
        const planSummary = outcome === "succeeded" ? this.context.planSummary : undefined;
        await withRetry(() => this.job.finish(outcome, message, deliver, planSummary), deliver);
      } catch (err) {
        this.logger.warn({ job: a.jobId, err: messageOf(err) }, "could not report the job's outcome");
        if (err instanceof NetworkError || deliver.aborted)
          this.undeliveredItems.push(`job ${a.jobId} finish undelivered (outcome ${outcome})`);
      }
    }
    finishing.end();
  }

  /**
   * Renews the lease; a held heartbeat returns as soon as the user cancels. The lease runs from the
   * last heartbeat the server received, so a call lost on the way (a NAT that forgot the flow) must
   * be given up, and sent again, well within the lease: each takes at most half of it.
   */
  private async heartbeatLoop(): Promise<void> {
    const lease = this.assignment.leaseTtlMs;
    const waitMs = Math.min(heartbeatWaitMs, Math.floor(lease / 4));
    const timeoutMs = waitMs + Math.min(heartbeatSlackMs, Math.floor(lease / 4));
    let delay = 500;
    while (!this.abort.signal.aborted) {
      try {
        const hb = await this.job.heartbeat(waitMs, this.abort.signal, timeoutMs);
        delay = 500;
        if (hb.cancelRequested) this.cancel();
      } catch (err) {
        if (this.abort.signal.aborted) return;
        if (this.takenAway(err)) return;
        await pause(delay, this.abort.signal);
        delay = Math.min(5_000, delay * 2);
      }
    }
  }
}

/** What the agent logs when the job it holds is no longer its own. */
function takenAwayMessage(gone: JobTakenAway): string {
  if (gone.why !== "forgotten") return "lost the job's lease; killing it";
  return (
    "the server no longer knows this job's token (its tokens were purged: the job stopped being leased " +
    "longer ago than the server's DROVER_JOB_TOKEN_RETENTION_SECONDS, or was deleted); stopping the job"
  );
}

function outcomeOf(err: unknown): [JobOutcome, string] {
  if (err instanceof StepFailed) return ["failed", err.message];
  if (err instanceof Interrupted) return ["canceled", err.message];
  if (err instanceof DroverError) return ["errored", err.message];
  return ["errored", `agent error: ${messageOf(err)}`];
}

export { NetworkError };
