import {
  containsSecret,
  DroverError,
  jobTakenAway,
  noopTracer,
  redactText,
  secretForms,
  versionSatisfies,
  type JobAssignment,
  type JobOutcome,
  type Output,
  type PlanSummary,
  type RunTracer,
  type SpanHandle,
  messageOf,
} from "@drover/protocol";
import { randomUUID } from "node:crypto";
import { existsSync, readFileSync, realpathSync } from "node:fs";
import { join, relative, resolve } from "node:path";
import type { Logger } from "pino";
import { pause } from "../session/backoff.js";
import { NetworkError, withRetry, type AgentClient, type JobClient } from "../session/client.js";
import { stopReserveMs, type AgentConfig, type StopPlan } from "../config.js";
import type { EngineBinary } from "./engine.js";
import { extractConfiguration } from "./extract.js";
import type { KeptPlanDirs, PlanDirKey } from "./kept-plans.js";
import { LogStream } from "./log-stream.js";
import {
  agentTag,
  killTagged,
  killUser,
  ProcessGroupRecord,
  processStartTicks,
  processTagVariable,
} from "../runners/orphans.js";
import { outputsOfState } from "./state-outputs.js";
import type { RunningProcess } from "../runners/process.js";
import { chownTree, type RunUser } from "../runners/run-user.js";
import { localRunner, type RunFiles, type Runner } from "../runners/runner.js";
import { localRunFiles } from "./local-files.js";
import type { ProviderCache, ProviderLease } from "../providers/cache.js";
import type { ModuleCache, ModuleLease } from "../modules/cache.js";
import type { EngineCache, EngineLease } from "../engines/cache.js";
import { EngineError } from "../engines/errors.js";
import { lockFileName } from "../providers/config-scan.js";
import { PlanLineScanner, planSucceededCodes, summaryOfPlanOutput } from "./plan-summary.js";

/** Job states as the agent tracks them. */
export type JobRunState = "starting" | "running" | "finishing" | "done";

/** A step that exited non-zero: the run failed (terraform's error is in the message). */
class StepFailed extends Error {}

/** The run must end now: canceled by the user or stopped by the agent. */
class Interrupted extends Error {}

const cancelTermAfterMs = 10_000;
const cancelKillAfterMs = 20_000;
const heartbeatWaitMs = 10_000;

/**
 * The settings one job run uses, and no more: the local agent passes its own; a Kubernetes
 * worker passes what its pod has.
 */
type SharedSettings = "name" | "dataDir" | "cacheDir" | "stopAction" | "taskCaCertPath" | "hooksDir" | "hookTimeoutMs";
export type JobSettings = Pick<AgentConfig, SharedSettings> & {
  /** The user terraform and hooks run as, who is given the run's files; the agent's own when unset. */
  runAs?: RunUser | undefined;
  /**
   * The run user is this job's alone while it runs (a job slot's DROVER_AGENT_RUN_AS_USER uid):
   * the job's end kills every process of that user, not only those carrying its process tag.
   */
  ownsRunUser?: boolean;
  /** The pool token, redacted from everything the run sends; a pod worker holds none. */
  token: string | undefined;
  /** Spans of the job's stages (none without an OTLP endpoint). */
  tracer?: RunTracer;
  /** Told the log bytes the server acknowledged (the process's log-bytes counter). */
  onLogBytes?: (n: number) => void;
  /** Told each error the job retries past (the process's errors counter). */
  onError?: (kind: "log_upload") => void;
  /** Lines for the run's log after its header (a node worker's version skew with its controller). */
  notes?: string[];
};

/** One job executing on this agent with the local driver. */
export class JobRun {
  state: JobRunState = "starting";
  private readonly job: JobClient;
  private readonly log: LogStream;
  /** Aborted when the job is over: ends its heartbeats. */
  private readonly abort = new AbortController();
  /** Aborted when the job's work must end (stopped, killed, lease lost, or over): ends its retries. */
  private readonly work = new AbortController();
  /** Aborted when a stop's budget leaves no more time to deliver the log and the outcome. */
  private readonly delivery = new AbortController();
  private readonly undeliveredItems: string[] = [];
  /** Process groups this job started, recorded in the data directory while it runs. */
  private readonly groups: number[] = [];
  private groupRecord: ProcessGroupRecord | undefined;
  /** When the job's first process started (clock ticks since boot); unknown when it could not be read. */
  private firstStart: number | undefined;
  private process: RunningProcess | undefined;
  private canceled = false;
  private stopSignalled = false;
  private lost = false;
  private readonly timers: NodeJS.Timeout[] = [];
  /** The latest output of the running step (≤ 64 KiB kept), for the error excerpt. */
  private tail: Buffer[] = [];
  private tailBytes = 0;
  /** Values hidden from everything this job sends: log, outcome message. */
  private secrets: string[] = [];
  /** A plan job's summary from terraform's exit code and `Plan:` line, reported with its outcome. */
  private planSummary: PlanSummary | undefined;
  /** Provider cache entries this job holds until it ends. */
  private providerLease: ProviderLease | undefined;
  /** This process's span of the job; stage spans are its children. */
  private trace: SpanHandle | undefined;
  /** Module cache entries this job holds until it ends. */
  private moduleLease: ModuleLease | undefined;
  /** The engine binary this job holds until it ends. */
  private engineLease: EngineLease | undefined;

  constructor(
    private readonly assignment: JobAssignment,
    private readonly client: AgentClient,
    private readonly config: JobSettings,
    private readonly logger: Logger,
    private readonly runner: Runner = localRunner,
    private readonly keptPlans?: KeptPlanDirs,
    private readonly providerCache?: ProviderCache,
    private readonly moduleCache?: ModuleCache,
    private readonly engines?: EngineCache,
  ) {
    this.job = client.job(assignment.jobId, assignment.jobToken);
    this.log = new LogStream(this.job, {
      onAcknowledged: config.onLogBytes,
      onRetry: config.onError && (() => config.onError?.("log_upload")),
    });
  }

  /** The job's own files, through the runner when it shares them with a runner container. */
  private get files(): RunFiles {
    return this.runner.files ?? (this.localFiles ??= localRunFiles(this.config.dataDir));
  }

  private localFiles: RunFiles | undefined;

  get id(): string {
    return this.assignment.jobId;
  }

  /** The user asked to cancel: interrupt terraform, then escalate. */
  cancel(): void {
    if (this.canceled) return;
    this.canceled = true;
    this.log.line("\n[drover] cancel requested: interrupting");
    this.signal("SIGINT");
    this.later(cancelTermAfterMs, () => this.signal("SIGTERM"));
    this.later(cancelKillAfterMs, () => this.signal("SIGKILL"));
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
      this.signal(plan.firstSignal);
      if (plan.firstSignal !== "SIGKILL") this.later(plan.killAfterMs, () => this.signal("SIGKILL"));
    });
  }

  /** Second signal to the agent: kill now. */
  kill(): void {
    this.stopSignalled = true;
    this.work.abort();
    this.signal("SIGKILL");
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

  private signal(sig: NodeJS.Signals): void {
    this.process?.signal(sig);
  }

  /** Executes the job to the end and reports its outcome; never throws. */
  async execute(): Promise<void> {
    const a = this.assignment;
    const runDir = join(this.config.dataDir, `${a.jobId}-${a.attempt}`);
    const started = Date.now();
    const tracer = this.config.tracer ?? noopTracer;
    this.trace = tracer.start(`agent ${a.phase}`, a.traceparent, {
      attributes: { "drover.phase": a.phase, "drover.agent": this.config.name, "drover.run.id": a.runId },
    });
    const claimed = tracer.start("claimed", this.trace);
    try {
      // One id for every try: the server takes a retried start as this one, and refuses any
      // other process (a second pod for the same job) with job_already_started.
      const starter = randomUUID();
      await withRetry(() => this.job.start(starter, this.work.signal), this.work.signal);
      claimed.end();
    } catch (err) {
      if (err instanceof DroverError && err.code === "job_already_started") {
        this.logger.error({ job: a.jobId, attempt: a.attempt, code: err.code }, `${err.message}; no step ran here`);
        claimed.end(undefined, "already started elsewhere");
        this.trace.end(undefined, "already started elsewhere");
        this.state = "done";
        return;
      }
      // Canceled before it started, or reassigned: nothing to do.
      this.logger.info({ job: a.jobId, err: messageOf(err) }, "job not started");
      claimed.end(undefined, "not started");
      this.trace.end(undefined, "not started");
      this.state = "done";
      return;
    }
    this.state = "running";
    const heartbeats = this.heartbeatLoop();
    let outcome: JobOutcome = "succeeded";
    let message: string | null = null;
    try {
      await this.run(runDir);
    } catch (err) {
      [outcome, message] = this.outcomeOf(err);
    }
    await this.endProcesses();
    if (this.stopSignalled)
      [outcome, message] = ["errored", `agent stopped (${this.config.stopAction} stop) while the ${a.phase} ran`];
    else if (this.canceled && outcome !== "succeeded") [outcome, message] = ["canceled", "canceled by request"];
    // The outcome message quotes terraform's output, which may echo a secret like the log does;
    // redacted whole, before any part of it (its first line) is logged or traced.
    if (message !== null) message = redactText(message, this.secrets);
    this.state = "finishing";
    // Before the outcome is reported: the apply may be handed to this agent right after.
    if (outcome === "succeeded" && a.phase === "plan" && !a.planOnly && !this.lost && this.keptPlans) {
      try {
        // Back to the agent while it waits: the next job of this slot's user is another run's.
        if (this.config.ownsRunUser) chownTree(runDir, { uid: process.getuid?.() ?? 0, gid: process.getgid?.() ?? 0 });
        this.keptPlans.keep(this.planDirKey(), runDir);
      } catch (err) {
        this.logger.warn({ job: a.jobId, err: messageOf(err) }, "could not keep the plan directory for the apply");
      }
    }
    const seconds = ((Date.now() - started) / 1000).toFixed(1);
    this.log.line(
      `\n[drover] ${a.phase} ${outcome === "succeeded" ? "succeeded" : outcome}${message ? `: ${message.split("\n")[0]}` : ""} after ${seconds} s`,
    );
    const deliver = this.delivery.signal;
    const finishing = tracer.start("finish", this.trace);
    try {
      await this.log.close(deliver);
    } catch (err) {
      this.logger.warn({ job: a.jobId, err: messageOf(err) }, "could not deliver the whole log");
    }
    if (this.log.unsent > 0) this.undeliveredItems.push(`job ${a.jobId}: ${this.log.unsent} log bytes undelivered`);
    if (!this.lost) {
      try {
        const planSummary = outcome === "succeeded" ? this.planSummary : undefined;
        await withRetry(() => this.job.finish(outcome, message, deliver, planSummary), deliver);
      } catch (err) {
        this.logger.warn({ job: a.jobId, err: messageOf(err) }, "could not report the job's outcome");
        if (err instanceof NetworkError || deliver.aborted)
          this.undeliveredItems.push(`job ${a.jobId} finish undelivered (outcome ${outcome})`);
      }
    }
    finishing.end();
    this.trace.end(
      { "drover.outcome": outcome },
      outcome === "succeeded" ? undefined : (message ?? outcome).split("\n")[0],
    );
    this.work.abort();
    this.abort.abort();
    await heartbeats;
    for (const t of this.timers) clearTimeout(t);
    this.files.discard(runDir);
    this.providerLease?.release();
    this.moduleLease?.release();
    this.engineLease?.release();
    this.state = "done";
    this.logger.info({ job: a.jobId, run: a.runId, phase: a.phase, outcome }, "job finished");
  }

  /** This job's value of the process tag every process it starts carries. */
  private get processTag(): string {
    return `${agentTag(this.config.dataDir)}:${this.assignment.jobId}-${this.assignment.attempt}`;
  }

  private recordGroup(pgid: number): void {
    // Every process of this job descends from its first one: none started before it.
    if (this.groups.length === 0) this.firstStart = processStartTicks(pgid);
    this.groups.push(pgid);
    try {
      this.groupRecord ??= new ProcessGroupRecord(
        this.config.dataDir,
        `${this.assignment.jobId}-${this.assignment.attempt}`,
      );
      this.groupRecord.add(pgid);
    } catch (err) {
      this.logger.warn({ job: this.id, err: messageOf(err) }, "could not record the job's process group");
    }
  }

  /**
   * The job's steps are over: whatever of its processes still lives (a provisioner's child
   * that left its group) is killed before the outcome is reported, so that nothing of this
   * attempt runs beside a later one.
   */
  private async endProcesses(): Promise<void> {
    if (this.groups.length === 0) return;
    try {
      // A run can shed its tag (`env -i setsid …`), never its uid.
      const owned = this.config.ownsRunUser ? this.config.runAs : undefined;
      const killed = owned
        ? await killUser(owned, 10_000)
        : await killTagged(this.processTag, this.groups, 10_000, this.firstStart);
      if (killed > 0) this.logger.warn({ job: this.id, killed }, "killed processes the job left behind");
      this.groupRecord?.remove();
    } catch (err) {
      this.logger.warn({ job: this.id, err: messageOf(err) }, "could not check for processes the job left behind");
    }
  }

  private outcomeOf(err: unknown): [JobOutcome, string] {
    if (err instanceof StepFailed) return ["failed", err.message];
    if (err instanceof Interrupted) return ["canceled", err.message];
    if (err instanceof DroverError) return ["errored", err.message];
    return ["errored", `agent error: ${messageOf(err)}`];
  }

  /** Renews the lease; a held heartbeat returns as soon as the user cancels. */
  private async heartbeatLoop(): Promise<void> {
    let delay = 500;
    while (!this.abort.signal.aborted) {
      try {
        const hb = await this.job.heartbeat(heartbeatWaitMs, this.abort.signal);
        delay = 500;
        if (hb.cancelRequested) this.cancel();
      } catch (err) {
        if (this.abort.signal.aborted) return;
        const gone = jobTakenAway(err);
        if (gone) {
          // The server gave this job to someone else (our lease lapsed) or ended it: stop writing at once.
          this.lost = true;
          this.work.abort();
          this.logger.warn({ job: this.id, err: messageOf(err), ...gone }, "lost the job's lease; killing it");
          this.kill();
          return;
        }
        await pause(delay, this.abort.signal);
        delay = Math.min(5_000, delay * 2);
      }
    }
  }

  private checkInterrupted(): void {
    if (this.stopSignalled) throw new Interrupted("agent stopped");
    if (this.canceled) throw new Interrupted("canceled by request");
    if (this.lost) throw new Interrupted("lease lost");
  }

  private async run(runDir: string): Promise<void> {
    const a = this.assignment;
    const configDir = join(runDir, "config");
    // A pre-init hook may prepare more than the directory, so it gets its init every time.
    const reused =
      a.phase === "apply" && !this.hookPath("pre-init") && this.keptPlans?.take(this.planDirKey(), runDir) === true;
    if (!reused) this.files.prepare(runDir, configDir);
    const download = this.stage("configuration download");
    // The configuration travels while the variables are read and the engine is found; if one of
    // those fails, the job's end aborts it (`work`).
    const configuration = reused
      ? undefined
      : withRetry(() => this.job.configuration(this.work.signal), this.work.signal);
    configuration?.catch(() => undefined);
    const variables = await withRetry(() => this.job.variables(this.work.signal), this.work.signal);
    this.secrets = secretForms([
      ...variables.filter((v) => v.sensitive).map((v) => v.value),
      a.jobToken,
      ...(this.config.token === undefined ? [] : [this.config.token]),
    ]);
    this.log.setSecrets(this.secrets);

    // The agent provides the asked version itself (a runner container gets it mounted read-only);
    // the engine on PATH, or a runner image's own, stands in only as the cache allows.
    let binary: EngineBinary;
    if (this.engines) {
      const lease = await this.engines.acquire(
        a.workspace.engine,
        a.workspace.engineVersion,
        this.work.signal,
        this.runner.ownEngines,
      );
      this.engineLease = lease;
      binary =
        lease.downloaded && this.runner.useEngine
          ? { path: this.runner.useEngine(lease.path), version: lease.version }
          : lease;
    } else binary = await this.runner.engine(a.workspace.engine, a.workspace.engineVersion, this.config.cacheDir);
    // Without the agent's cache a runner brings its own engine: it runs only if it is a version the workspace asks for.
    if (
      !this.engineLease &&
      a.workspace.engineVersion !== null &&
      !versionSatisfies(binary.version, a.workspace.engineVersion)
    ) {
      throw new EngineError(
        "engine_unavailable",
        `the runner's ${a.workspace.engine} is ${binary.version}, but the workspace asks for ${a.workspace.engineVersion}; nothing was run: use a runner image with that version, or change the workspace's engineVersion`,
      );
    }
    const workDir = resolve(configDir, a.workspace.workingDirectory || ".");
    if (relative(configDir, workDir).startsWith(".."))
      throw new DroverError("bad_request", "the workspace's working directory is outside the configuration");
    this.log.line(
      `[drover] ${a.phase}${a.isDestroy ? " (destroy)" : ""} of run ${a.runId} on agent ${this.config.name}\n` +
        `[drover] ${a.workspace.engine} ${binary.version} (${binary.path}); workspace ${a.workspace.name}; working directory ${a.workspace.workingDirectory || "."}`,
    );
    for (const note of [...(this.config.notes ?? []), ...(this.engineLease?.notes ?? [])])
      this.log.line(`[drover] ${note}`);

    // Where the agent writes into the working directory: locally its real path (it may be reached
    // through the archive's own links, checked below to stay inside); a runner's files refuse every link.
    let writeDir = workDir;
    if (reused) {
      this.log.line(
        "[drover] reusing this run's initialized plan directory on this agent: configuration download, init and plan download skipped",
      );
    } else {
      const archive = await (configuration ??
        withRetry(() => this.job.configuration(this.work.signal), this.work.signal));
      await this.files.withDir(configDir, (dir) => extractConfiguration(archive, dir));
      if (!existsSync(workDir))
        throw new DroverError(
          "not_found",
          `the working directory ${a.workspace.workingDirectory} is not in the configuration`,
        );
      // The working directory may be reached through the archive's own links: it must still be inside.
      const realConfig = realpathSync(configDir);
      const realWork = realpathSync(workDir);
      if (realWork !== realConfig && !realWork.startsWith(realConfig + "/")) {
        throw new DroverError(
          "invalid_archive",
          `the working directory ${a.workspace.workingDirectory} leads outside the configuration through a link`,
        );
      }
      const tfvars = Object.fromEntries(variables.filter((v) => v.kind === "terraform").map((v) => [v.key, v.value]));
      if (!this.runner.files) writeDir = realWork;
      if (Object.keys(tfvars).length > 0)
        this.files.write(join(writeDir, "drover.auto.tfvars.json"), JSON.stringify(tfvars, null, 2));
      // terraform merges *_override.tf files into the configuration: this selects the http
      // backend, which the TF_HTTP_* variables configure.
      this.files.write(join(writeDir, "drover_backend_override.tf"), 'terraform {\n  backend "http" {}\n}\n');
    }
    download.end({ "drover.reused": reused });
    const env = this.environment(variables.filter((v) => v.kind === "env").map((v) => [v.key, v.value]));
    // Modules first: the providers their modules require are prepared with the root module's.
    if (this.moduleCache) {
      this.moduleLease = await this.moduleCache.prepare(writeDir, this.work.signal, this.files);
      for (const note of this.moduleLease.notes) this.log.line(`[drover] module cache: ${note}`);
      if (this.moduleLease.installed.length > 0)
        this.log.line(`[drover] modules from the agent's cache: ${this.moduleLease.installed.join(", ")}`);
    }
    await this.useProviderCache(
      runDir,
      workDir,
      env,
      variables.some((v) => v.kind === "env" && v.key === "TF_CLI_CONFIG_FILE"),
    );
    if (this.config.runAs) {
      // Runs are another user (DROVER_AGENT_RUN_AS_USER): the run directory is theirs, and so
      // is HOME, since the agent's is not readable to them.
      chownTree(runDir, this.config.runAs);
      env.HOME = runDir;
    }

    this.checkInterrupted();
    if (!reused) {
      const init = this.stage("init");
      await this.hook("pre-init", workDir, env);
      await this.step(binary, ["init", "-input=false", "-no-color"], workDir, env);
      init.end();
    }
    if (a.phase === "plan") {
      const plan = this.stage("plan");
      await this.hook("pre-plan", workDir, env);
      const planPath = join(runDir, "plan.tfplan");
      const planLine = new PlanLineScanner();
      // Exit 2 is a plan with changes: terraform's own verdict, which the server decides from.
      const code = await this.step(
        binary,
        [
          "plan",
          "-input=false",
          "-no-color",
          "-detailed-exitcode",
          `-out=${planPath}`,
          ...(a.isDestroy ? ["-destroy"] : []),
        ],
        workDir,
        env,
        planSucceededCodes,
        (chunk) => planLine.push(chunk),
      );
      // A cancel or stop that arrived as terraform exited with a plan: the job is interrupted, not a plan to apply.
      this.checkInterrupted();
      const summary = summaryOfPlanOutput(code, planLine.end());
      await this.hook("post-plan", workDir, env);
      const uploads = this.stage("uploads");
      // The plan file travels while terraform renders the plan as JSON.
      // If `show` fails, the job's end aborts the upload (`work`); its failure is not the run's.
      const planFile = withRetry(
        () => this.job.uploadPlan(this.files.read(planPath), this.work.signal),
        this.work.signal,
      );
      planFile.catch(() => undefined);
      // Stored before the job finishes, every time: the run is read (its changes shown, its
      // policy checked) before anyone applies it.
      const json = await this.capture(binary, ["show", "-json", planPath], workDir, env);
      plan.end();
      await planFile;
      await this.uploadPlanJson(json);
      this.planSummary = summary;
      uploads.end();
    } else {
      const apply = this.stage("apply");
      const planPath = join(runDir, "plan.tfplan");
      // A kept plan directory holds the very plan file this agent uploaded: no need to fetch it back.
      if (!reused) {
        this.files.write(planPath, await withRetry(() => this.job.downloadPlan(this.work.signal), this.work.signal));
        if (this.config.runAs) chownTree(planPath, this.config.runAs);
      }
      await this.hook("pre-apply", workDir, env);
      await this.step(binary, ["apply", "-input=false", "-no-color", planPath], workDir, env);
      await this.hook("post-apply", workDir, env);
      apply.end();
      const uploads = this.stage("uploads");
      // The state the apply just wrote holds the outputs; reading it spares starting terraform.
      const state = await withRetry(() => this.job.state(a.statePath, this.work.signal), this.work.signal);
      const outputs = outputsOfState(state) ?? (await this.engineOutputs(binary, workDir, env));
      // An output built from a sensitive value is sensitive, whatever the configuration declares.
      const masked = outputs.map((o) =>
        !o.sensitive && containsSecret(o.value, this.secrets) ? { ...o, sensitive: true } : o,
      );
      await withRetry(() => this.job.uploadOutputs(masked, this.work.signal), this.work.signal);
      uploads.end();
    }
  }

  /**
   * Uploads the plan's JSON. One larger than the server stores (DROVER_MAX_PLAN_JSON_MB) leaves
   * the run without it, its counts from terraform's summary line: a plan too large to show is
   * still a plan to apply.
   */
  private async uploadPlanJson(json: Buffer): Promise<void> {
    try {
      await withRetry(() => this.job.uploadPlanJson(json, this.work.signal), this.work.signal);
    } catch (err) {
      if (!(err instanceof DroverError && err.code === "payload_too_large")) throw err;
      this.log.line(`[drover] the plan's JSON is not stored: ${err.message}`);
    }
  }

  /** A span of one stage of the job, child of the job's span. A stage that throws is ended by the job's end (left open, its span is not sent). */
  private stage(name: string): SpanHandle {
    return (this.config.tracer ?? noopTracer).start(name, this.trace);
  }

  /** `terraform output -json`, for states the agent cannot read itself. */
  private async engineOutputs(binary: EngineBinary, workDir: string, env: NodeJS.ProcessEnv): Promise<Output[]> {
    const out = await this.capture(binary, ["output", "-json"], workDir, env);
    const parsed = JSON.parse(out.toString("utf8") || "{}") as Record<
      string,
      { sensitive?: boolean; type?: unknown; value?: unknown }
    >;
    return Object.entries(parsed).map(([name, o]) => ({
      name,
      sensitive: o.sensitive === true,
      type: o.type ?? null,
      value: o.value ?? null,
    }));
  }

  /** The environment terraform and hooks see: never the agent's own tokens. */
  private environment(envVars: Array<[string, string]>): NodeJS.ProcessEnv {
    const a = this.assignment;
    const env: NodeJS.ProcessEnv = {};
    for (const [k, v] of Object.entries(process.env)) if (!k.startsWith("DROVER_")) env[k] = v;
    const stateUrl = this.client.baseUrl + a.statePath;
    Object.assign(env, {
      TF_IN_AUTOMATION: "1",
      TF_INPUT: "0",
      CHECKPOINT_DISABLE: "1",
      TF_HTTP_ADDRESS: stateUrl,
      TF_HTTP_LOCK_ADDRESS: stateUrl,
      TF_HTTP_UNLOCK_ADDRESS: stateUrl,
      TF_HTTP_USERNAME: "drover",
      TF_HTTP_PASSWORD: a.jobToken,
      DROVER_RUN_ID: a.runId,
      DROVER_WORKSPACE_NAME: a.workspace.name,
      DROVER_WORKSPACE_ID: a.workspace.id,
      DROVER_RUN_PHASE: a.phase,
      DROVER_RUN_IS_DESTROY: String(a.isDestroy),
      [processTagVariable]: this.processTag,
    });
    if (this.config.taskCaCertPath) env.SSL_CERT_FILE = this.config.taskCaCertPath;
    for (const [k, v] of envVars) env[k] = v;
    return env;
  }

  /**
   * Prepares the providers the configuration names in the agent's cache and points the run's
   * own CLI configuration at it (the agent's CLI configuration, if any, plus the cache's
   * provider_installation). The run reads the cache and never writes it.
   */
  private async useProviderCache(
    runDir: string,
    workDir: string,
    env: NodeJS.ProcessEnv,
    workspaceCliConfig: boolean,
  ): Promise<void> {
    if (!this.providerCache) return;
    if (workspaceCliConfig) {
      // The agent never reads a file a workspace names: it may be one only the agent can read.
      this.log.line("[drover] provider cache not used: the workspace sets TF_CLI_CONFIG_FILE");
      return;
    }
    // Not the workspace's (returned above): the agent's own, passed on by environment().
    const baseFile = env.TF_CLI_CONFIG_FILE;
    const base = baseFile && existsSync(baseFile) ? readFileSync(baseFile, "utf8") : "";
    if (/\bprovider_installation\b/.test(base)) {
      this.log.line(
        "[drover] provider cache not used: the agent's TF_CLI_CONFIG_FILE has its own provider_installation",
      );
      return;
    }
    const lease = await this.providerCache.prepare(workDir, this.work.signal, this.moduleLease?.dirs);
    this.providerLease = lease;
    for (const note of lease.notes) this.log.line(`[drover] provider cache: ${note}`);
    if (lease.prepared.length > 0)
      this.log.line(`[drover] providers from the agent's cache: ${lease.prepared.join(", ")}`);
    if (lease.lockFile !== undefined) this.files.write(join(workDir, lockFileName), lease.lockFile);
    const configPath = join(runDir, "drover-cli.tfrc");
    this.files.write(configPath, `${base}\n${lease.installation}`);
    env.TF_CLI_CONFIG_FILE = configPath;
  }

  /** Runs a step whose output is the run log; an exit code not in `okCodes` fails the run. Resolves with the exit code. */
  private async step(
    binary: EngineBinary,
    args: string[],
    cwd: string,
    env: NodeJS.ProcessEnv,
    okCodes: readonly number[] = [0],
    observe?: (chunk: Buffer) => void,
  ): Promise<number> {
    this.checkInterrupted();
    this.log.line(`\n[drover] $ ${this.assignment.workspace.engine} ${args.join(" ")}`);
    this.tail = [];
    this.tailBytes = 0;
    const code = await this.spawn(binary.path, args, cwd, env, (chunk) => {
      this.log.write(chunk);
      observe?.(chunk);
      this.tail.push(chunk);
      this.tailBytes += chunk.length;
      while (this.tailBytes - (this.tail[0]?.length ?? 0) > 64 * 1024) this.tailBytes -= this.tail.shift()?.length ?? 0;
    });
    if (!okCodes.includes(code)) {
      this.checkInterrupted();
      // Redacted before it is cut to an excerpt: a cut through a secret would leave a part of it.
      const output = redactText(Buffer.concat(this.tail).toString("utf8"), this.secrets);
      throw new StepFailed(
        errorExcerpt(output) ?? `${this.assignment.workspace.engine} ${args[0]} exited with code ${code}`,
      );
    }
    return code;
  }

  /** Runs a step whose stdout is data (show -json, output -json); stderr goes to the log. */
  private async capture(binary: EngineBinary, args: string[], cwd: string, env: NodeJS.ProcessEnv): Promise<Buffer> {
    this.checkInterrupted();
    const { code, stdout } = await this.runner.capture(binary.path, args, {
      cwd,
      env,
      onStderr: (d) => this.log.write(d),
      onSpawn: (g) => this.recordGroup(g),
    });
    if (code !== 0)
      throw new StepFailed(`${this.assignment.workspace.engine} ${args.join(" ")} exited with code ${code}`);
    return stdout;
  }

  private async spawn(
    command: string,
    args: string[],
    cwd: string,
    env: NodeJS.ProcessEnv,
    onOutput: (b: Buffer) => void,
  ): Promise<number> {
    const proc = this.runner.start(command, args, { cwd, env, onOutput, onSpawn: (g) => this.recordGroup(g) });
    this.process = proc;
    // A signal that arrived between steps applies to this one too.
    if (this.stopSignalled) proc.signal("SIGKILL");
    const { code, signal, failure } = await proc.done;
    this.process = undefined;
    if (failure) throw new DroverError("internal", failure);
    return code ?? (signal ? 128 : 1);
  }

  /** The hook's file in DROVER_AGENT_HOOKS_DIR, when there is one. */
  private hookPath(name: string): string | undefined {
    if (!this.config.hooksDir) return undefined;
    const path = join(this.config.hooksDir, name);
    return existsSync(path) ? path : undefined;
  }

  /** What this job's directory holds, for reusing a plan's directory in its apply. */
  private planDirKey(): PlanDirKey {
    const a = this.assignment;
    return {
      runId: a.runId,
      configurationVersionId: a.configurationVersionId,
      engine: a.workspace.engine,
      engineVersion: a.workspace.engineVersion,
      workingDirectory: a.workspace.workingDirectory,
    };
  }

  /** Runs a hook from DROVER_AGENT_HOOKS_DIR when present; non-zero or timeout fails the run. */
  private async hook(name: string, cwd: string, env: NodeJS.ProcessEnv): Promise<void> {
    const path = this.hookPath(name);
    if (!path) return;
    this.checkInterrupted();
    this.log.line(`\n[drover] hook ${name}`);
    let timedOut = false;
    const timer = setTimeout(() => {
      timedOut = true;
      this.signal("SIGKILL");
    }, this.config.hookTimeoutMs);
    const code = await this.spawn(path, [], cwd, env, (chunk) => this.log.write(chunk));
    clearTimeout(timer);
    if (timedOut) throw new StepFailed(`hook ${name} timed out after ${this.config.hookTimeoutMs / 1000} s`);
    if (code !== 0) throw new StepFailed(`hook ${name} exited with code ${code}`);
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

export { NetworkError };
