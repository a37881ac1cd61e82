import {
  BatchV1Api,
  CoordinationV1Api,
  CoreV1Api,
  CustomObjectsApi,
  KubeConfig,
  RbacAuthorizationV1Api,
  type CoreV1Event,
  type KubernetesListObject,
  type KubernetesObject,
  type V1Job,
  type V1JobSpec,
  type V1Pod,
} from "@kubernetes/client-node";
import {
  DroverError,
  jobAssignmentSchema,
  jobTakenAway,
  noopTracer,
  SettingsSource,
  startTelemetryIfSet,
  type JobAssignment,
  type RunTracer,
  messageOf,
} from "@drover/protocol";
import type { Logger } from "pino";
import { waitFor } from "../../session/backoff.js";
import { AgentClient, NetworkError } from "../../session/client.js";
import type { AgentConfig } from "../../config.js";
import { agentVersion } from "../../agent.js";
import { MetricSet, requestSecondsBuckets, servingHealth, type ErrorKind } from "../../health.js";
import { apiClientWithDeadline } from "./api-deadline.js";
import { KubeApiError } from "./api-errors.js";
import { startInformer, type Informer, type ListFrom } from "./informer.js";
import { exponentialBackoff, KeyedWorkQueue } from "./work-queue.js";
import { buildJob, jobName, labels, type TaskSettings } from "./job-spec.js";
import { LeaderLease, leaseTimings } from "./leader-lease.js";
import { describePodFailure, type FailureTimings, type PodFailureReason } from "./pod-failures.js";
import { grantJobSecret } from "./run-access.js";
import { podNamespace } from "./settings.js";

/** The part of an AgentTask the controller reads. */
interface AgentTask extends KubernetesObject {
  spec?: { jobTemplate?: V1JobSpec };
}

/** A Job this controller launched and still watches. */
interface Tracked {
  name: string;
  assignment: JobAssignment;
  /** The worker container has started: it owns the run from here on. */
  started: boolean;
  /** A failure was reported for it (reported once). */
  reported: boolean;
  podSeen: boolean;
  /** The latest state of its pod, for a second look before a generic report. */
  lastPod?: V1Pod;
  pendingGeneric?: boolean;
  /** When this controller launched or adopted it; a Job missing from the cache is only suspect after a while. */
  since: number;
  /** This controller is deleting the Job itself: its DELETED event is expected. */
  deleting?: boolean;
  /** Trace marks of the Kubernetes stages (launched by this process only): Job created, pod scheduled, container started. */
  jobCreatedAt?: number;
  scheduledAt?: number;
  containerTraced?: boolean;
  /** Its startup latency (Job created → worker running) is recorded. */
  startupMeasured?: boolean;
  /** The failure line is in the run's log (a retried report does not write it twice). */
  logged?: boolean;
}

const genericReportDelayMs = 2_000;
/** Bucket bounds (seconds) of Job startup: scheduling, image pulls and container start. */
const startupSecondsBuckets = [0.5, 1, 2, 5, 10, 20, 30, 60, 120, 300, 600];
/** Jobs whose events are handled at the same time (one event at a time per Job). */
const queueParallelism = 4;
/** Attempts of one Job's event handling (e.g. the server unreachable while reporting) before it waits for the next sweep. */
const queueMaxAttempts = 5;
/**
 * How long a stopping controller waits for its launches (queued or running) to end: a claimed job
 * must end with its Job and Secret, or reported. Within the charts' 30 s controller grace period.
 */
const launchStopBudgetMs = 20_000;

/** Controller settings beyond the agent's. */
export interface ControllerSettings {
  namespace: string;
  workerImage: string;
  execLoopPath: string;
  timings: FailureTimings;
  activeDeadlineSeconds: number;
  ttlSecondsAfterFinished: number;
  /** Node-worker mode (agent-k8s): run pods hold only the runner; each node's worker drives them. */
  nodeHome: string | undefined;
  /** How often every in-flight Job is checked against the timeouts, whether or not an event arrived. */
  sweepIntervalMs: number;
  /** Node-worker mode: the node workers' ServiceAccount, granted `get` on each run's job Secret only. */
  nodeWorkerServiceAccount: string | undefined;
  /** Deadline of one Kubernetes API call (lists, creates, reads, deletes; not watches). */
  apiTimeoutMs: number;
  /** Each watch's `timeoutSeconds`; see informer.ts for its deadline. */
  watchTimeoutSeconds: number;
  /** Take work only while holding the release's leader Lease (leader-lease.ts). */
  leaderElection: boolean;
  leaseDurationMs: number;
}

/** Reads and validates the controller's own settings; a bad value throws one clear line. */
export function loadControllerSettings(env: NodeJS.ProcessEnv): ControllerSettings {
  const src = new SettingsSource(env);
  return {
    namespace: podNamespace(src),
    workerImage: src.get("DROVER_AGENT_KUBERNETES_WORKER_IMAGE"),
    execLoopPath: src.get("DROVER_AGENT_EXEC_LOOP_PATH"),
    timings: {
      imagePullGraceMs: src.get("DROVER_AGENT_IMAGE_PULL_GRACE_SECONDS") * 1000,
      podPendingTimeoutMs: src.get("DROVER_AGENT_POD_PENDING_TIMEOUT_SECONDS") * 1000,
    },
    activeDeadlineSeconds: src.get("DROVER_AGENT_JOB_ACTIVE_DEADLINE_SECONDS"),
    ttlSecondsAfterFinished: src.get("DROVER_AGENT_JOB_TTL_SECONDS"),
    nodeHome: src.get("DROVER_AGENT_NODE_HOME"),
    sweepIntervalMs: src.get("DROVER_AGENT_SWEEP_INTERVAL_SECONDS") * 1000,
    nodeWorkerServiceAccount: src.get("DROVER_AGENT_NODE_WORKER_SERVICE_ACCOUNT"),
    apiTimeoutMs: src.get("DROVER_AGENT_KUBERNETES_API_TIMEOUT_SECONDS") * 1000,
    watchTimeoutSeconds: src.get("DROVER_AGENT_KUBERNETES_WATCH_TIMEOUT_SECONDS"),
    leaderElection: src.get("DROVER_AGENT_KUBERNETES_LEADER_ELECTION"),
    leaseDurationMs: src.get("DROVER_AGENT_KUBERNETES_LEASE_DURATION_MS"),
  };
}

/**
 * `drover agent controller`: claims jobs for its pool and launches one Kubernetes Job per run
 * phase. The worker in the pod owns the run; the controller only schedules, watches, reports
 * pod-level failures, and cancels runs whose worker has not started. Restarting it never
 * disturbs running runs: it rebuilds its state from the cluster.
 */
export class Controller {
  private readonly kc = new KubeConfig();
  private readonly batch: BatchV1Api;
  private readonly core: CoreV1Api;
  private readonly rbac: RbacAuthorizationV1Api;
  private readonly custom: CustomObjectsApi;
  private readonly client: AgentClient;
  private readonly tracked = new Map<string, Tracked>();
  /** Spans of the Kubernetes stages of each job's trace (no-op without an OTLP endpoint). */
  tracer: RunTracer = noopTracer;
  private session = "";
  private registered = false;
  private heartbeatMs = 10_000;
  private readonly stop = new AbortController();
  private wake: (() => void) | undefined;
  private readonly informers: { name: string; informer: Informer<KubernetesObject> }[] = [];
  /** Launches started by the poll loop and not finished yet. */
  private readonly launching = new Set<Promise<void>>();
  /** The task template's checks in order, and the generation whose Valid condition is written. */
  private templateChecking: Promise<void> = Promise.resolve();
  private templateChecked: number | undefined;
  /** Everything done to one Job — launch, its Job and pod events, sweeps, reports, deletion — runs through here, one at a time per Job. */
  private readonly queue: KeyedWorkQueue;
  private readonly metrics = new MetricSet()
    .define("drover_controller_jobs_in_flight", "gauge", "Kubernetes Jobs of this controller that have not finished")
    .define("drover_controller_jobs_launched_total", "counter", "Kubernetes Jobs this controller created")
    .define(
      "drover_controller_pod_failures_total",
      "counter",
      "Runs this controller ended errored for a pod-level reason, by reason",
      { initial: false },
    )
    .define(
      "drover_controller_watch_errors_total",
      "counter",
      "Failed lists or watches of Jobs and pods (each is retried)",
    )
    .define(
      "drover_controller_errors_total",
      "counter",
      "Errors of this controller by kind (each retried or reported)",
      { initial: false },
    )
    .define(
      "drover_controller_heartbeat_duration_seconds",
      "histogram",
      "Round trip of the controller's heartbeats to the server",
      { buckets: requestSecondsBuckets },
    )
    .define(
      "drover_controller_job_startup_latency_seconds",
      "histogram",
      "From the controller creating a Kubernetes Job to it seeing the run's worker container running",
      { buckets: startupSecondsBuckets },
    );

  constructor(
    private readonly config: AgentConfig,
    private readonly settings: ControllerSettings,
    private readonly log: Logger,
  ) {
    this.kc.loadFromDefault();
    this.batch = apiClientWithDeadline(this.kc, BatchV1Api, settings.apiTimeoutMs);
    this.core = apiClientWithDeadline(this.kc, CoreV1Api, settings.apiTimeoutMs);
    this.rbac = apiClientWithDeadline(this.kc, RbacAuthorizationV1Api, settings.apiTimeoutMs);
    this.custom = apiClientWithDeadline(this.kc, CustomObjectsApi, settings.apiTimeoutMs);
    this.client = new AgentClient(config.url, config.caCertPem);
    this.queue = new KeyedWorkQueue({
      parallelism: queueParallelism,
      maxAttempts: queueMaxAttempts,
      backoffMs: exponentialBackoff(500, 30_000),
      sleep,
      signal: this.stop.signal,
      onError: (key, err, attempt, retryInMs) =>
        retryInMs === undefined
          ? this.log.warn(
              { k8sJob: key, err: errText(err), attempt },
              "handling a Job failed; the next sweep tries again",
            )
          : this.log.warn({ k8sJob: key, err: errText(err), attempt, retryInMs }, "handling a Job failed; retrying"),
    });
  }

  private get selector(): string {
    return `${labels.controller}=${this.config.name}`;
  }

  /** Registered with the server and every watch (Jobs, pods, the task template) listed: the readiness of `/readyz`. */
  get ready(): boolean {
    const expected = this.config.kubernetesTaskTemplate ? 3 : 2;
    return (
      this.registered &&
      this.informers.length === expected &&
      this.informers.every((i) => i.informer.synced) &&
      !this.stop.signal.aborted
    );
  }

  async run(): Promise<number> {
    const source = {
      health: () => ({
        live: !this.stop.signal.aborted,
        ready: this.ready,
        details: { registered: this.registered, inFlight: this.tracked.size },
      }),
      metrics: () => this.exposition(),
    };
    return servingHealth(this.config.healthPort, this.config.healthAddress, source, () => this.work());
  }

  /**
   * Leads, or stands by until it may: only the holder of the leader Lease registers and claims
   * work. A lost lease stops this process (exit 1, so its pod restarts as a standby) before
   * anyone else may take the lease over; a clean stop releases it once launches have ended.
   */
  private async work(): Promise<number> {
    if (!this.settings.leaderElection) return this.lead();
    const api = apiClientWithDeadline(this.kc, CoordinationV1Api, this.settings.apiTimeoutMs);
    const lease = new LeaderLease(
      api,
      this.settings.namespace,
      `${this.config.name}-leader`,
      leaseTimings(this.settings.leaseDurationMs),
      this.log,
    );
    try {
      await lease.acquire(this.stop.signal);
    } catch (err) {
      if (this.stop.signal.aborted) return 0;
      throw err;
    }
    const release = new AbortController();
    let lost = false;
    const holding = lease.hold(release.signal).then((reason) => {
      if (reason === undefined) return;
      lost = true;
      this.log.error({ reason }, "lost the leader lease; stopping so that only one controller takes work");
      this.shutdown();
    });
    try {
      const code = await this.lead();
      return lost ? 1 : code;
    } finally {
      release.abort();
      await holding;
    }
  }

  private async lead(): Promise<number> {
    try {
      await this.retrying("registering with the Drover server", () => this.register());
      await this.retrying("listing this controller's Jobs", () => this.rebuildFromCluster());
    } catch (err) {
      if (this.stop.signal.aborted) return 0;
      if (err instanceof DroverError && (err.code === "token_revoked" || err.code === "unauthorized")) {
        this.log.error(
          `the pool token was ${err.code === "token_revoked" ? "revoked" : "refused"}; stopping (${err.message})`,
        );
        return 1;
      }
      throw err;
    }
    const ns = this.settings.namespace;
    this.inform(
      "jobs",
      `/apis/batch/v1/namespaces/${ns}/jobs`,
      (from) => this.batch.listNamespacedJob({ namespace: ns, labelSelector: this.selector, ...from }),
      (type, job: V1Job) => void this.queue.add(job.metadata?.name ?? "", () => this.onJob(type, job)),
    );
    this.inform(
      "pods",
      `/api/v1/namespaces/${ns}/pods`,
      (from) => this.core.listNamespacedPod({ namespace: ns, labelSelector: this.selector, ...from }),
      (type, pod: V1Pod) =>
        void this.queue.add(pod.metadata?.labels?.[labels.k8sJob] ?? "", () => this.onPod(type, pod)),
    );
    const task = this.config.kubernetesTaskTemplate;
    if (task) {
      // The template of every Job, kept current by a watch of that one object (RBAC grants list/watch by its name):
      // no API round trip between a job offered and its Job's create.
      const field = `metadata.name=${task}`;
      const list = (from: ListFrom) =>
        this.custom.listNamespacedCustomObject({
          group: "drover.dev",
          version: "v1alpha1",
          namespace: ns,
          plural: "agenttasks",
          fieldSelector: field,
          ...from,
        }) as Promise<KubernetesListObject<AgentTask>>;
      const seen = (type: string, t: AgentTask) => {
        this.log.info(
          { task, resourceVersion: t.metadata?.resourceVersion, event: type },
          "task template watched: new Jobs use this version",
        );
        if (type !== "DELETED") this.checkTemplate(t);
      };
      this.inform("agenttasks", `/apis/drover.dev/v1alpha1/namespaces/${ns}/agenttasks`, list, seen, {
        fieldSelector: field,
      });
    }
    const beats = this.heartbeatLoop();
    const sweeps = this.sweepLoop();
    try {
      await this.pollLoop();
    } catch (err) {
      if (err instanceof DroverError && (err.code === "token_revoked" || err.code === "unauthorized")) {
        this.log.error(
          `the pool token was ${err.code === "token_revoked" ? "revoked" : "refused"}; stopping (${err.message})`,
        );
        this.shutdown();
        await Promise.all([beats, sweeps]);
        return 1;
      }
      throw err;
    }
    await Promise.all([beats, sweeps]);
    return 0;
  }

  private async register(): Promise<void> {
    const reg = await this.client.register(
      this.config.token,
      {
        name: this.config.name,
        version: agentVersion,
        driver: "kubernetes",
        capacity: this.config.concurrency,
      },
      this.stop.signal,
    );
    this.session = reg.sessionToken;
    this.heartbeatMs = reg.heartbeatIntervalMs;
    this.registered = true;
    this.log.info(
      { agent: reg.agentId, pool: reg.poolName, namespace: this.settings.namespace },
      "controller registered",
    );
  }

  /**
   * Retries start-up work with exponential backoff (0.5 s doubling to 30 s) so a server or
   * API server that is down at start does not crash-loop the pod. A coded answer from the server
   * (a refused token, a bad request: 4xx) is final; the client turns 5xx into NetworkError.
   */
  private async retrying(what: string, work: () => Promise<void>): Promise<void> {
    let delay = 500;
    for (;;) {
      try {
        return await work();
      } catch (err) {
        if (this.stop.signal.aborted) throw err;
        if (err instanceof DroverError) throw err;
        this.countError("server");
        const wait = waitFor(err, delay);
        this.log.warn({ err: errText(err), retryInMs: wait }, `${what} failed; retrying`);
        await sleep(wait, this.stop.signal);
        delay = Math.min(30_000, delay * 2);
      }
    }
  }

  /** Stops taking work; running Jobs go on (their workers own the runs). */
  shutdown(): void {
    this.stop.abort();
    this.wake?.();
  }

  /** In-flight count and tokens from the cluster: unfinished Jobs with this controller's label. */
  private async rebuildFromCluster(): Promise<void> {
    const jobs = await this.batch.listNamespacedJob({
      namespace: this.settings.namespace,
      labelSelector: this.selector,
    });
    for (const job of jobs.items) {
      const name = job.metadata?.name;
      if (!name || finished(job) || this.tracked.has(name)) continue;
      try {
        const secret = await this.core.readNamespacedSecret({
          name: `${name}-job`,
          namespace: this.settings.namespace,
        });
        const data = secret.data ?? {};
        const token = Buffer.from(data.token ?? "", "base64").toString("utf8");
        const assignment = jobAssignmentSchema.parse({
          ...JSON.parse(Buffer.from(data["assignment.json"] ?? "", "base64").toString("utf8")),
          jobToken: token,
        });
        this.tracked.set(name, {
          name,
          assignment,
          started: false,
          reported: false,
          podSeen: false,
          since: Date.now(),
        });
      } catch (err) {
        this.log.warn(
          { job: name, err: errText(err) },
          "cannot read the job Secret of a running Job; leaving it to its worker",
        );
      }
    }
    this.log.info({ inFlight: this.tracked.size }, "rebuilt in-flight Jobs from the cluster");
  }

  private async pollLoop(): Promise<void> {
    try {
      await this.polling();
    } finally {
      // On a stop the long-poll throws: the launches of jobs already claimed still run (queued ones
      // too, see keepOnStop) so that none is left without its Job, or its Job without its Secret.
      await this.launchesEnded();
    }
  }

  /** Waits, up to the stop budget, for every launch to end (created, or its failure reported). */
  private async launchesEnded(): Promise<void> {
    if (this.launching.size === 0) return;
    this.log.info({ launches: this.launching.size }, "waiting for the launches of claimed jobs to end");
    let timer: NodeJS.Timeout | undefined;
    const budget = new Promise<"timeout">((r) => (timer = setTimeout(() => r("timeout"), launchStopBudgetMs)));
    let ended: "ended" | "timeout" = "ended";
    // A failed launch adds its report while it ends: wait for what was added meanwhile too.
    while (this.launching.size > 0 && ended === "ended")
      ended = await Promise.race([Promise.allSettled([...this.launching]).then(() => "ended" as const), budget]);
    clearTimeout(timer);
    if (ended === "timeout")
      this.log.error(
        { launches: this.launching.size },
        `launches still running after ${launchStopBudgetMs / 1000} s; stopping without them (their jobs' leases expire on the server)`,
      );
  }

  private async polling(): Promise<void> {
    while (!this.stop.signal.aborted) {
      if (this.tracked.size >= this.config.concurrency) {
        await new Promise<void>((r) => {
          this.wake = r;
          setTimeout(r, 1000).unref();
        });
        continue;
      }
      let job: JobAssignment | null;
      try {
        job = await this.client.poll(this.session, this.config.pollWaitMs, this.stop.signal);
      } catch (err) {
        if (this.stop.signal.aborted) return;
        if (err instanceof DroverError && err.code === "agent_lost") {
          this.countError("server");
          this.registered = false;
          await this.retrying("registering again with the Drover server", () => this.register()).catch((e: unknown) => {
            if (!this.stop.signal.aborted) throw e;
          });
          continue;
        }
        if (err instanceof NetworkError) {
          this.countError("server");
          await sleep(waitFor(err, 1000), this.stop.signal);
          continue;
        }
        throw err;
      }
      if (job) {
        const a = job;
        const name = jobName(a);
        // Counted in flight at once; the next poll does not wait for this launch (its Secret and grants).
        this.tracked.set(name, {
          name,
          assignment: a,
          started: false,
          reported: false,
          podSeen: false,
          since: Date.now(),
        });
        // Kept past a stop: the job is claimed, and dropping its launch would leave it with no Job.
        let attempt = 0;
        const launching = this.queue.add(name, () => this.launch(a, ++attempt), { keepOnStop: true });
        this.launching.add(launching);
        void launching.finally(() => this.launching.delete(launching));
      }
    }
  }

  /**
   * The AgentTask's Job template: from the watch's cache when it is current and holds it,
   * else read from the API (before the first list, while a watch resumes, or an AgentTask
   * created a moment ago).
   */
  private async template(): Promise<V1JobSpec | undefined> {
    const name = this.config.kubernetesTaskTemplate;
    if (!name) return undefined;
    const cache = this.informers.find((i) => i.name === "agenttasks")?.informer;
    const cached = cache?.synced ? (cache.get(name, this.settings.namespace) as AgentTask | undefined) : undefined;
    if (cached) return cached.spec?.jobTemplate;
    const task = (await this.custom.getNamespacedCustomObject({
      group: "drover.dev",
      version: "v1alpha1",
      namespace: this.settings.namespace,
      plural: "agenttasks",
      name,
    })) as AgentTask;
    return task.spec?.jobTemplate;
  }

  private taskSettings(): TaskSettings {
    return {
      namespace: this.settings.namespace,
      controllerName: this.config.name,
      serverUrl: this.config.url,
      workerImage: this.settings.workerImage,
      execLoopPath: this.settings.execLoopPath,
      stopAction: this.config.stopAction,
      gracePeriodSeconds: this.config.gracePeriodMs / 1000,
      activeDeadlineSeconds: this.settings.activeDeadlineSeconds,
      ttlSecondsAfterFinished: this.settings.ttlSecondsAfterFinished,
      nodeHome: this.settings.nodeHome,
      otlp: this.config.otlp,
    };
  }

  /**
   * Sets the AgentTask's `Valid` condition (its VALID column) once per generation of its spec: a bad
   * template shows in `kubectl get agenttasks` when it is applied, not only at each run's Job create.
   * The Job it makes for a placeholder job is created with `dryRun=All`, so the API server's own
   * validation and admission judge it. Checks run one at a time, the latest template last.
   */
  private checkTemplate(task: AgentTask): void {
    const generation = task.metadata?.generation;
    if (generation !== undefined && generation === this.templateChecked) return;
    this.templateChecking = this.templateChecking
      .then(() => this.validateTemplate(task))
      .catch((err: unknown) => {
        this.countError("template_check");
        this.log.warn(
          { task: task.metadata?.name, err: errText(err) },
          "could not set the task template's Valid condition",
        );
      });
  }

  private async validateTemplate(task: AgentTask): Promise<void> {
    const generation = task.metadata?.generation;
    const name = task.metadata?.name ?? "";
    if (this.stop.signal.aborted || (generation !== undefined && generation === this.templateChecked)) return;
    let condition: { status: "True" | "False"; reason: string; message: string };
    const problem = templateProblem(task.spec?.jobTemplate);
    if (problem) {
      condition = { status: "False", reason: "TemplateUnusable", message: problem };
    } else {
      try {
        const body = buildJob(templateCheckJob, task.spec?.jobTemplate, this.taskSettings());
        await this.batch.createNamespacedJob({ namespace: this.settings.namespace, body, dryRun: "All" });
        condition = {
          status: "True",
          reason: "DryRunAccepted",
          message: "the API server accepts the Job this template makes (server-side dry run)",
        };
      } catch (err) {
        // No answer, or the server's own trouble, says nothing about the template: the next change or restart checks again.
        if (!(err instanceof KubeApiError) || transient(err)) throw err;
        condition = {
          status: "False",
          reason: "DryRunRefused",
          message: `the API server refuses the Job this template makes: ${err.apiMessage}`,
        };
      }
    }
    const value = {
      observedGeneration: generation,
      conditions: [
        { type: "Valid", ...condition, lastTransitionTime: new Date().toISOString().replace(/\.\d+Z$/, "Z") },
      ],
    };
    await this.custom.patchNamespacedCustomObjectStatus({
      group: "drover.dev",
      version: "v1alpha1",
      namespace: this.settings.namespace,
      plural: "agenttasks",
      name,
      body: [{ op: "add", path: "/status", value }],
    });
    this.templateChecked = generation;
    const log = { task: name, generation, valid: condition.status, reason: condition.reason };
    if (condition.status === "True") this.log.info(log, "task template valid");
    else
      this.log.error(
        { ...log, message: condition.message },
        "task template invalid: runs will fail at Job create until it is fixed",
      );
  }

  /**
   * Creates the Job (deterministic name) and then its token Secret, owned by the Job. Both tolerate
   * "already exists", so a launch whose API call went unanswered (a deadline, a 5xx) is thrown back to
   * the queue to run again (`attempt` counts from 1); other failures, or the last attempt's, are reported.
   */
  private async launch(a: JobAssignment, attempt: number): Promise<void> {
    const settings = this.taskSettings();
    const name = jobName(a);
    try {
      const body = buildJob(a, await this.template(), settings);
      let created: V1Job;
      let createdNow = true;
      try {
        created = await this.batch.createNamespacedJob({ namespace: this.settings.namespace, body });
      } catch (err) {
        createdNow = false;
        // An earlier attempt's create went through and only its answer was lost: that create
        // launched the Job, so it is counted and traced here as one.
        if (status(err) !== 409) throw err;
        created = await this.batch.readNamespacedJob({ name, namespace: this.settings.namespace });
      }
      // Once per Job: a launch retried after its Secret's answer was lost meets its own Job here again.
      const t = this.tracked.get(name);
      if (!t || t.jobCreatedAt === undefined) {
        this.metrics.inc("drover_controller_jobs_launched_total");
        if (t) {
          // A create answered now, or one whose answer was lost: then the Job's own creation time (whole seconds).
          const stamp = created.metadata?.creationTimestamp;
          t.jobCreatedAt = Math.max(t.since, stamp && !createdNow ? new Date(stamp).getTime() : Date.now());
          this.tracer
            .start("kubernetes job created", a.traceparent, {
              startTime: t.since,
              attributes: { "k8s.job.name": name },
            })
            .end(undefined, undefined, t.jobCreatedAt);
        }
      }
      const { jobToken, ...rest } = a;
      try {
        await this.core.createNamespacedSecret({
          namespace: this.settings.namespace,
          body: {
            metadata: {
              name: `${name}-job`,
              labels: { [labels.controller]: this.config.name, [labels.k8sJob]: name },
              // No blockOwnerDeletion: setting it needs `update` on jobs/finalizers under the
              // OwnerReferencesPermissionEnforcement admission plugin, and nothing waits on the Secret.
              ownerReferences: [
                { apiVersion: "batch/v1", kind: "Job", name, uid: created.metadata?.uid ?? "", controller: true },
              ],
            },
            type: "Opaque",
            // The server URL rides along for node workers, which hold no pool token to read it from.
            // So is this controller's version, which a node worker compares with its own (versionSkew).
            stringData: {
              token: jobToken,
              "assignment.json": JSON.stringify(rest),
              url: this.config.url,
              version: agentVersion,
            },
          },
        });
      } catch (err) {
        if (status(err) !== 409) throw err;
      }
      if (this.settings.nodeHome && this.settings.nodeWorkerServiceAccount) {
        await grantJobSecret(this.rbac, {
          namespace: this.settings.namespace,
          jobName: name,
          secretName: `${name}-job`,
          serviceAccount: this.settings.nodeWorkerServiceAccount,
          owner: { apiVersion: "batch/v1", kind: "Job", name, uid: created.metadata?.uid ?? "", controller: true },
          labels: { [labels.controller]: this.config.name, [labels.k8sJob]: name },
        });
      }
      this.log.info({ job: a.jobId, run: a.runId, phase: a.phase, k8sJob: name }, "launched Job");
    } catch (err) {
      if (transient(err) && attempt < queueMaxAttempts) throw err;
      this.log.error({ job: a.jobId, err: errText(err) }, "could not create the Job");
      this.countError("job_create");
      // Queued behind this launch (same key), so a server that cannot be told is retried without launching again.
      // errText names the object refused (the Job, its Secret, the Role granting it) and the API's reason.
      const reason = `could not launch the Kubernetes Job ${name}: ${errText(err)}`;
      const reporting = this.queue.add(name, () => this.report(name, reason, "job_create_failed"), {
        keepOnStop: true,
      });
      this.launching.add(reporting);
      void reporting.finally(() => this.launching.delete(reporting));
    }
  }

  private async onJob(type: string, job: V1Job): Promise<void> {
    const name = job.metadata?.name ?? "";
    const t = this.tracked.get(name);
    if (!t) return;
    if (type === "DELETED" && !t.deleting && !t.started && !t.reported) {
      await this.report(name, `the Kubernetes Job ${name} was deleted before its worker started`, "job_deleted");
      return;
    }
    if (type === "DELETED" || finished(job)) {
      const failed = job.status?.conditions?.find((c) => c.type === "Failed" && c.status === "True");
      if (failed && !t.reported && !t.started) {
        await this.reportJobWithoutWorker(t, failed.reason ?? "Failed", failed.message ?? "");
        return;
      }
      this.untrack(name);
    }
  }

  private untrack(name: string): void {
    if (this.tracked.delete(name)) this.wake?.();
  }

  private async reportJobWithoutWorker(t: Tracked, reason: string, message: string): Promise<void> {
    let detail = `${reason}${message ? `: ${message}` : ""}`;
    if (!t.podSeen) {
      const lines = await this.jobEvents(t.name);
      detail = `the Job ended without a pod (${detail})${lines.length ? `; events: ${lines.join("; ")}` : ""}`;
    }
    await this.report(t.name, detail, t.podSeen ? "job_failed" : "no_pod");
  }

  /** The events about the object `name` (a Job or a pod) in this namespace; none when they cannot be listed. */
  private async eventsAbout(name: string): Promise<CoreV1Event[]> {
    const events = await this.core
      .listNamespacedEvent({ namespace: this.settings.namespace, fieldSelector: `involvedObject.name=${name}` })
      .catch(() => ({ items: [] as CoreV1Event[] }));
    return events.items;
  }

  /** The Job's latest events as `Reason: message` lines (FailedCreate says why no pod exists). */
  private async jobEvents(name: string): Promise<string[]> {
    return (await this.eventsAbout(name)).map((e) => `${e.reason ?? ""}: ${e.message ?? ""}`).slice(-5);
  }

  private async onPod(type: string, pod: V1Pod): Promise<void> {
    if (type === "DELETED") return;
    const name = pod.metadata?.labels?.[labels.k8sJob] ?? "";
    const t = this.tracked.get(name);
    if (!t) return;
    t.podSeen = true;
    t.lastPod = pod;
    // The worker owns the run once it runs; in node-worker mode, once the runner it prepared does.
    const owner = this.settings.nodeHome ? "runner" : "worker";
    if (pod.status?.containerStatuses?.some((c) => c.name === owner && (c.state?.running || c.state?.terminated)))
      t.started = true;
    if (
      t.jobCreatedAt !== undefined &&
      !t.startupMeasured &&
      pod.status?.containerStatuses?.some((c) => c.name === owner && c.state?.running)
    ) {
      t.startupMeasured = true;
      this.metrics.observe(
        "drover_controller_job_startup_latency_seconds",
        Math.max(0, Date.now() - t.jobCreatedAt) / 1000,
      );
    }
    await this.check(t, Date.now());
    // Tracing reads events (an API call): it must not hold up this Job's failure reports or later events.
    void this.traceStages(t, pod, owner).catch((err: unknown) =>
      this.log.debug({ k8sJob: name, err: errText(err) }, "tracing the Kubernetes stages failed"),
    );
  }

  private countError(kind: ErrorKind): void {
    if (!this.stop.signal.aborted) this.metrics.inc("drover_controller_errors_total", { kind });
  }

  /** The controller's series in Prometheus' text format (/metrics, and OTLP's source). */
  exposition(): string {
    this.metrics.set("drover_controller_jobs_in_flight", this.tracked.size);
    return this.metrics.render();
  }

  /**
   * Spans `pod scheduled`, `image pulled` and `container started` of a Job this process
   * created, each once. The pull ends at the kubelet's `Pulled` event for the container (an
   * image already present is pulled at once); without that event, at the container's start.
   */
  private async traceStages(t: Tracked, pod: V1Pod, owner: string): Promise<void> {
    if (t.jobCreatedAt === undefined || this.tracer === noopTracer) return;
    const parent = t.assignment.traceparent;
    const attributes = { "k8s.pod.name": pod.metadata?.name ?? "", "k8s.node.name": pod.spec?.nodeName ?? "" };
    const scheduled = pod.status?.conditions?.find((c) => c.type === "PodScheduled" && c.status === "True");
    if (t.scheduledAt === undefined && scheduled) {
      // The API server's times have whole seconds: never before the Job existed.
      t.scheduledAt = Math.max(
        t.jobCreatedAt,
        scheduled.lastTransitionTime ? new Date(scheduled.lastTransitionTime).getTime() : Date.now(),
      );
      this.tracer
        .start("pod scheduled", parent, { startTime: t.jobCreatedAt, attributes })
        .end(undefined, undefined, t.scheduledAt);
    }
    const status = pod.status?.containerStatuses?.find((c) => c.name === owner);
    const running = status?.state?.running;
    if (!t.containerTraced && t.scheduledAt !== undefined && running) {
      t.containerTraced = true;
      const at = Math.max(t.scheduledAt, running.startedAt ? new Date(running.startedAt).getTime() : Date.now());
      const pulled = await this.imagePulledAt(pod, owner);
      const pulledAt = Math.min(at, Math.max(t.scheduledAt, pulled ?? at));
      const container = { ...attributes, "k8s.container.name": owner, "container.image.name": status?.image ?? "" };
      this.tracer
        .start("image pulled", parent, {
          startTime: t.scheduledAt,
          attributes: { ...container, "drover.k8s.pulled_event": pulled !== undefined },
        })
        .end(undefined, undefined, pulledAt);
      this.tracer
        .start("container started", parent, { startTime: pulledAt, attributes: container })
        .end(undefined, undefined, at);
    }
  }

  /** When the kubelet reported `container`'s image pulled (its `Pulled` event), if it did. */
  private async imagePulledAt(pod: V1Pod, container: string): Promise<number | undefined> {
    const name = pod.metadata?.name;
    if (!name) return undefined;
    const times = (await this.eventsAbout(name))
      .filter((e) => e.reason === "Pulled" && e.involvedObject.fieldPath === `spec.containers{${container}}`)
      .map((e) => new Date(e.eventTime ?? e.firstTimestamp ?? e.lastTimestamp ?? NaN).getTime())
      .filter((ms) => Number.isFinite(ms));
    return times.length ? Math.min(...times) : undefined;
  }

  /** Reports the pod's failure, if it has one by `now`; a generic one after a second look. */
  private async check(t: Tracked, now: number): Promise<void> {
    const pod = t.lastPod;
    if (!pod || t.reported) return;
    const failure = describePodFailure(pod, now, this.settings.timings);
    if (!failure) return;
    if (!failure.generic) {
      await this.report(t.name, failure.message, failure.reason);
      return;
    }
    // Containers die a moment before the kubelet records why (eviction, OOM): look again
    // shortly and report the most specific reason known by then.
    if (t.pendingGeneric) return;
    t.pendingGeneric = true;
    setTimeout(() => {
      void this.queue.add(t.name, async () => {
        t.pendingGeneric = false;
        const latest = t.lastPod ? describePodFailure(t.lastPod, Date.now(), this.settings.timings) : undefined;
        await this.report(t.name, (latest ?? failure).message, (latest ?? failure).reason);
      });
    }, genericReportDelayMs).unref();
  }

  /**
   * Time-driven failures: every sweep interval, each in-flight Job is checked again without
   * waiting for an event — a pod pending past the timeout (Unschedulable), an image pull past
   * its grace, a Job that never got a pod (refused by admission: FailedCreate), and a Job that
   * vanished while no watch was looking.
   */
  private async sweepLoop(): Promise<void> {
    while (!this.stop.signal.aborted) {
      await sleep(this.settings.sweepIntervalMs, this.stop.signal);
      if (this.stop.signal.aborted) return;
      await this.sweep(Date.now()).catch((err: unknown) => this.log.warn({ err: errText(err) }, "sweep failed"));
    }
  }

  private async sweep(now: number): Promise<void> {
    await Promise.all([...this.tracked.values()].map((t) => this.queue.add(t.name, () => this.sweepOne(t, now))));
  }

  private async sweepOne(t: Tracked, now: number): Promise<void> {
    if (t.reported || t.deleting || this.tracked.get(t.name) !== t) return;
    const jobs = this.informers.find((i) => i.name === "jobs");
    if (
      jobs?.informer.synced &&
      !jobs.informer.get(t.name, this.settings.namespace) &&
      now - t.since > 2 * this.settings.sweepIntervalMs
    ) {
      // Not in the cache long after launch: ask once; a 404 means it was deleted unseen.
      const gone = await this.batch.readNamespacedJob({ name: t.name, namespace: this.settings.namespace }).then(
        () => false,
        (err: unknown) => status(err) === 404,
      );
      if (gone) {
        if (t.started) this.untrack(t.name);
        else
          await this.report(
            t.name,
            `the Kubernetes Job ${t.name} was deleted before its worker started`,
            "job_deleted",
          );
        return;
      }
    }
    if (t.started) return;
    if (t.lastPod) {
      await this.check(t, now);
      return;
    }
    if (now - t.since > this.settings.timings.podPendingTimeoutMs) {
      const lines = await this.jobEvents(t.name);
      const refused = lines.filter((l) => l.startsWith("FailedCreate"));
      const why = refused.length ? refused.slice(-1)[0]! : lines.length ? `events: ${lines.join("; ")}` : "no events";
      await this.report(
        t.name,
        `the Kubernetes Job ${t.name} created no pod within ${Math.round(this.settings.timings.podPendingTimeoutMs / 1000)} s (${why})`,
        "no_pod",
      );
    }
  }

  /**
   * Reports a pod-level failure into the run's log once and ends the job errored, then deletes
   * the Job so nothing lingers (a worker that already finished the job wins: its outcome stands).
   */
  private async report(name: string, reason: string, kind: PodFailureReason): Promise<void> {
    const t = this.tracked.get(name);
    if (!t || t.reported) return;
    t.reported = true;
    const job = this.client.job(t.assignment.jobId, t.assignment.jobToken);
    const line = Buffer.from(`\n[drover] ${reason}\n`, "utf8");
    try {
      // Append at the log's end: ask with an offset past it, the server answers where it is.
      let offset = Number.MAX_SAFE_INTEGER;
      for (let i = 0; i < 3 && !t.logged; i++) {
        try {
          await job.appendLog(offset, line);
          t.logged = true;
        } catch (err) {
          if (err instanceof DroverError && err.code === "log_gap") offset = Number(err.details?.expectedOffset);
          else throw err;
        }
      }
      await job.finish("errored", reason);
      this.log.warn({ job: t.assignment.jobId, reason }, "reported a pod failure");
    } catch (err) {
      // The server unreachable: not reported yet. The Job stays so the work queue (then the next sweep,
      // or the next controller's) tries again — also while stopping, where the queue still runs kept work.
      if (err instanceof NetworkError) {
        t.reported = false;
        this.countError("pod_failure_report");
        throw err;
      }
      this.log.info(
        { job: t.assignment.jobId, err: errText(err) },
        "pod failure not reported: the job had already ended",
      );
    }
    this.metrics.inc("drover_controller_pod_failures_total", { reason: kind });
    await this.deleteJob(name);
  }

  private async deleteJob(name: string): Promise<void> {
    const t = this.tracked.get(name);
    if (t) t.deleting = true;
    try {
      await this.batch.deleteNamespacedJob({
        name,
        namespace: this.settings.namespace,
        propagationPolicy: "Background",
        gracePeriodSeconds: 0,
      });
    } catch (err) {
      if (status(err) !== 404) this.log.warn({ job: name, err: errText(err) }, "could not delete the Job");
    }
    this.untrack(name);
  }

  /**
   * Keeps the agent registration alive and, for Jobs whose worker has not started, renews
   * their leases and notices cancellation (then deletes the Job before it runs).
   */
  private async heartbeatLoop(): Promise<void> {
    while (!this.stop.signal.aborted) {
      await sleep(Math.min(this.heartbeatMs, 2_000), this.stop.signal);
      if (this.stop.signal.aborted) return;
      const sent = performance.now();
      await this.client.heartbeat(this.session, this.tracked.size, this.stop.signal).then(
        () => this.metrics.observe("drover_controller_heartbeat_duration_seconds", (performance.now() - sent) / 1000),
        () => this.countError("heartbeat"),
      );
      for (const t of [...this.tracked.values()]) {
        if (t.started || t.reported || t.deleting) continue;
        try {
          const hb = await this.client.job(t.assignment.jobId, t.assignment.jobToken).heartbeat(0);
          if (hb.cancelRequested) {
            this.log.info({ job: t.assignment.jobId }, "canceled before its worker started: deleting the Job");
            await this.queue.add(t.name, () => this.deleteJob(t.name));
          }
        } catch (err) {
          const gone = jobTakenAway(err);
          if (gone) {
            this.log.info(
              { job: t.assignment.jobId, ...gone },
              "the job ended before its worker started: deleting the Job",
            );
            await this.queue.add(t.name, () => this.deleteJob(t.name));
          }
        }
      }
    }
  }

  /** Watches `path` (this controller's objects only) through an informer; see informer.ts. */
  private inform<T extends KubernetesObject>(
    name: string,
    path: string,
    list: (from: ListFrom) => Promise<KubernetesListObject<T>>,
    handle: (type: string, obj: T) => void,
    selectors: { labelSelector?: string; fieldSelector?: string } = { labelSelector: this.selector },
  ): void {
    const informer = startInformer<T>({
      kc: this.kc,
      name,
      path,
      list,
      ...selectors,
      onEvent: handle,
      onError: (err, retryInMs) => {
        this.metrics.inc("drover_controller_watch_errors_total");
        this.countError("watch");
        this.log.warn({ resource: name, err: errText(err), retryInMs }, "watch failed; resuming");
      },
      signal: this.stop.signal,
      watchTimeoutSeconds: this.settings.watchTimeoutSeconds,
    });
    this.informers.push({ name, informer: informer as unknown as Informer<KubernetesObject> });
  }
}

/** Resolves after `ms`, or at once when `signal` aborts (which clears the timer). */
function sleep(ms: number, signal: AbortSignal): Promise<void> {
  if (signal.aborted) return Promise.resolve();
  return new Promise((resolve) => {
    const timer = setTimeout(done, ms);
    function done() {
      clearTimeout(timer);
      signal.removeEventListener("abort", done);
      resolve();
    }
    signal.addEventListener("abort", done, { once: true });
  });
}

function finished(job: V1Job): boolean {
  return (job.status?.conditions ?? []).some(
    (c) => (c.type === "Complete" || c.type === "Failed") && c.status === "True",
  );
}

function status(err: unknown): number | undefined {
  const e = err as { code?: unknown; statusCode?: unknown; body?: unknown };
  if (typeof e.code === "number") return e.code;
  if (typeof e.statusCode === "number") return e.statusCode;
  return undefined;
}

/** The placeholder job a task template's dry-run Job is made for (never created for real). */
const templateCheckJob: JobAssignment = {
  jobId: "template-check",
  attempt: 1,
  jobToken: "",
  phase: "plan",
  runId: "template-check",
  planOnly: true,
  isDestroy: false,
  workspace: {
    id: "template-check",
    name: "template-check",
    engine: "terraform",
    engineVersion: null,
    workingDirectory: "",
    runnerImage: null,
  },
  configurationVersionId: "template-check",
  statePath: "",
  leaseTtlMs: 0,
};

/** Why a jobTemplate cannot be made into a Job at all (the CRD's schema leaves it open), if it cannot. */
function templateProblem(spec: unknown): string | undefined {
  if (spec === undefined) return undefined; // no template: Drover's defaults alone
  if (!isRecord(spec)) return "spec.jobTemplate must be a Job spec (an object)";
  if (!isRecord(spec.template)) return "spec.jobTemplate.template must be a pod template (an object)";
  const pod = spec.template.spec;
  if (pod !== undefined && !isRecord(pod)) return "spec.jobTemplate.template.spec must be a pod spec (an object)";
  for (const list of ["containers", "initContainers", "volumes"]) {
    const v = isRecord(pod) ? pod[list] : undefined;
    if (v !== undefined && (!Array.isArray(v) || !v.every(isRecord)))
      return `spec.jobTemplate.template.spec.${list} must be a list of objects`;
  }
  return undefined;
}

function isRecord(v: unknown): v is Record<string, unknown> {
  return typeof v === "object" && v !== null && !Array.isArray(v);
}

/** An API call that got no answer, or a server-side or throttling one: worth trying again. */
function transient(err: unknown): boolean {
  return err instanceof KubeApiError && (err.code === undefined || err.code >= 500 || err.code === 429);
}

function errText(err: unknown): string {
  if (err instanceof Error) return err.message.split("\n")[0] ?? err.message;
  return String(err);
}

/** Starts a controller from the agent configuration; resolves with the exit code. */
export async function runController(config: AgentConfig, settings: ControllerSettings, log: Logger): Promise<number> {
  const controller = new Controller(config, settings, log);
  const telemetry = await startTelemetryIfSet(
    config.otlp
      ? {
          ...config.otlp,
          resource: {
            "service.name": "drover-controller",
            "drover.agent": config.name,
            "k8s.pod.name": config.kubernetesPod,
          },
          exposition: () => controller.exposition(),
        }
      : undefined,
  ).catch((err: unknown) => {
    log.warn({ err: messageOf(err) }, "OpenTelemetry export could not start; running without it");
    return undefined;
  });
  if (telemetry) controller.tracer = telemetry.tracer;
  const onSignal = () => {
    log.info("stop signal received: no new Jobs; running ones continue under their workers");
    controller.shutdown();
  };
  process.on("SIGTERM", onSignal);
  process.on("SIGINT", onSignal);
  try {
    return await controller.run();
  } finally {
    await telemetry?.shutdown().catch(() => undefined);
  }
}
