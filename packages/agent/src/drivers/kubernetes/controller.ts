import {
  BatchV1Api,
  CoordinationV1Api,
  CoreV1Api,
  CustomObjectsApi,
  KubeConfig,
  RbacAuthorizationV1Api,
  type KubernetesListObject,
  type KubernetesObject,
  type V1Job,
  type V1Pod,
} from "@kubernetes/client-node";
import { jobTakenAway, type JobAssignment, messageOf } from "@drover/protocol";
import { noopTracer, startTelemetryIfSet, type RunTracer } from "@drover/runtime";
import type { Logger } from "pino";
import { Backoff, pause } from "../../session/backoff.js";
import { AgentClient } from "../../session/client.js";
import { FatalAgentError, PoolSession } from "../../session/pool-session.js";
import type { AgentConfig } from "../../config.js";
import { servingHealth } from "../../health.js";
import type { ErrorKind, MetricSet } from "../../metrics.js";
import { controllerMetrics } from "./controller-metrics.js";
import { apiClientWithDeadline } from "./api-deadline.js";
import { errText, queueMaxAttempts, type AgentTask, type ControllerContext } from "./controller-context.js";
import type { ControllerSettings } from "./controller-settings.js";
import { startInformer, type Informer, type ListFrom } from "./informer.js";
import { JobWatch } from "./job-watch.js";
import { jobName, labels } from "./job-spec.js";
import { Launcher } from "./launch.js";
import { LeaderLease, leaseTimings } from "./leader-lease.js";
import { TemplateCheck } from "./template-check.js";
import { exponentialBackoff, KeyedWorkQueue } from "./work-queue.js";

/** Jobs whose events are handled at the same time (one event at a time per Job). */
const queueParallelism = 4;
/**
 * How long a stopping controller waits for its launches (queued or running) to end: a claimed job
 * must end with its Job and Secret, or reported. Within the charts' 30 s controller grace period.
 */
const launchStopBudgetMs = 20_000;

/**
 * `drover agent controller`: claims jobs for its pool and launches one Kubernetes Job per run
 * phase. The worker in the pod owns the run; the controller only schedules, watches, reports
 * pod-level failures, and cancels runs whose worker has not started. Restarting it never
 * disturbs running runs: it rebuilds its state from the cluster.
 */
export class Controller {
  private readonly kc = new KubeConfig();
  private readonly c: ControllerContext;
  private readonly session: PoolSession;
  private readonly watch: JobWatch;
  private readonly launcher: Launcher;
  private readonly templates: TemplateCheck;

  constructor(
    private readonly config: AgentConfig,
    private readonly settings: ControllerSettings,
    private readonly log: Logger,
  ) {
    this.kc.loadFromDefault();
    const stop = new AbortController();
    const client = new AgentClient(config.url, config.caCertPem);
    this.c = {
      config,
      settings,
      log,
      batch: apiClientWithDeadline(this.kc, BatchV1Api, settings.apiTimeoutMs),
      core: apiClientWithDeadline(this.kc, CoreV1Api, settings.apiTimeoutMs),
      rbac: apiClientWithDeadline(this.kc, RbacAuthorizationV1Api, settings.apiTimeoutMs),
      custom: apiClientWithDeadline(this.kc, CustomObjectsApi, settings.apiTimeoutMs),
      client,
      tracked: new Map(),
      queue: new KeyedWorkQueue({
        parallelism: queueParallelism,
        maxAttempts: queueMaxAttempts,
        backoffMs: exponentialBackoff(500, 30_000),
        sleep: pause,
        signal: stop.signal,
        onError: (key, err, attempt, retryInMs) =>
          retryInMs === undefined
            ? log.warn({ k8sJob: key, err: errText(err), attempt }, "handling a Job failed; the next sweep tries again")
            : log.warn({ k8sJob: key, err: errText(err), attempt, retryInMs }, "handling a Job failed; retrying"),
      }),
      metrics: controllerMetrics(() => this.c.tracked.size),
      tracer: noopTracer,
      stop,
      informers: [],
      launching: new Set(),
      countError: (kind: ErrorKind) => {
        if (!stop.signal.aborted) this.c.metrics.inc("drover_controller_errors_total", { kind });
      },
      wake: () => this.session.roomFreed(),
    };
    this.watch = new JobWatch(this.c);
    this.launcher = new Launcher(this.c, this.watch);
    this.templates = new TemplateCheck(this.c);
    this.session = new PoolSession({
      client,
      poolToken: config.token,
      tokenSource: config.tokenSource,
      name: config.name,
      driver: "kubernetes",
      capacity: config.concurrency,
      pollWaitMs: config.pollWaitMs,
      log,
      registeredLog: "controller registered",
      room: () => (stop.signal.aborted ? "finished" : this.c.tracked.size >= config.concurrency ? "full" : "free"),
      onJob: (job) => this.claim(job),
      load: () => ({ runningJobs: this.c.tracked.size }),
      // A lost session, a failed registration or poll: the server's trouble; a heartbeat's is counted apart.
      onError: (kind) => this.c.countError(kind === "heartbeat" ? "heartbeat" : "server"),
      onHeartbeat: (seconds) => this.c.metrics.observe("drover_controller_heartbeat_duration_seconds", seconds),
    });
  }

  /** Spans of the Kubernetes stages of each job's trace (no-op without an OTLP endpoint). */
  get tracer(): RunTracer {
    return this.c.tracer;
  }
  set tracer(tracer: RunTracer) {
    this.c.tracer = tracer;
  }

  private get selector(): string {
    return `${labels.controller}=${this.config.name}`;
  }

  /** Registered with the server and every watch (Jobs, pods, the task template) listed: the readiness of `/readyz`. */
  get ready(): boolean {
    const expected = this.config.kubernetesTaskTemplate ? 3 : 2;
    return (
      this.session.registered &&
      this.c.informers.length === expected &&
      this.c.informers.every((i) => i.informer.synced) &&
      !this.c.stop.signal.aborted
    );
  }

  async run(): Promise<number> {
    const source = {
      health: () => ({
        live: !this.c.stop.signal.aborted,
        ready: this.ready,
        details: { registered: this.session.registered, inFlight: this.c.tracked.size },
      }),
      metrics: () => this.c.metrics.render(),
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
      await lease.acquire(this.c.stop.signal);
    } catch (err) {
      if (this.c.stop.signal.aborted) return 0;
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
      if (!(await this.session.start())) return 0;
      await this.retrying("listing this controller's Jobs", () => this.watch.adopt(this.selector));
    } catch (err) {
      if (this.c.stop.signal.aborted) return 0;
      if (err instanceof FatalAgentError) {
        this.log.error(err.message);
        return 1;
      }
      throw err;
    }
    const ns = this.settings.namespace;
    this.inform(
      "jobs",
      `/apis/batch/v1/namespaces/${ns}/jobs`,
      (from) => this.c.batch.listNamespacedJob({ namespace: ns, labelSelector: this.selector, ...from }),
      (type, job: V1Job) => void this.c.queue.add(job.metadata?.name ?? "", () => this.watch.onJob(type, job)),
    );
    this.inform(
      "pods",
      `/api/v1/namespaces/${ns}/pods`,
      (from) => this.c.core.listNamespacedPod({ namespace: ns, labelSelector: this.selector, ...from }),
      (type, pod: V1Pod) =>
        void this.c.queue.add(pod.metadata?.labels?.[labels.k8sJob] ?? "", () => this.watch.onPod(type, pod)),
    );
    const task = this.config.kubernetesTaskTemplate;
    if (task) {
      // The template of every Job, kept current by a watch of that one object (RBAC grants list/watch by its name):
      // no API round trip between a job offered and its Job's create.
      const field = `metadata.name=${task}`;
      const list = (from: ListFrom) =>
        this.c.custom.listNamespacedCustomObject({
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
        if (type !== "DELETED") this.templates.check(t);
      };
      this.inform("agenttasks", `/apis/drover.dev/v1alpha1/namespaces/${ns}/agenttasks`, list, seen, {
        fieldSelector: field,
      });
    }
    const sweeps = this.watch.sweepLoop();
    const pending = this.pendingJobsLoop();
    let code = 0;
    try {
      await this.session.poll();
    } catch {
      // The pool token was refused (the session said so): no more work for this process.
      code = 1;
    } finally {
      // The launches of jobs already claimed still run (queued ones too, see keepOnStop) so that
      // none is left without its Job, or its Job without its Secret.
      await this.launchesEnded();
    }
    this.shutdown();
    await Promise.all([this.session.stop(), sweeps, pending]);
    return code;
  }

  /**
   * Retries the cluster listing at start with exponential backoff (0.5 s doubling to 30 s) so an
   * API server that is down at start does not crash-loop the pod.
   */
  private async retrying(what: string, work: () => Promise<void>): Promise<void> {
    const backoff = new Backoff({ initialMs: 500, maxMs: 30_000 });
    for (;;) {
      try {
        return await work();
      } catch (err) {
        if (this.c.stop.signal.aborted) throw err;
        this.c.countError("server");
        const wait = backoff.next(err);
        this.log.warn({ err: errText(err), retryInMs: wait }, `${what} failed; retrying`);
        await pause(wait, this.c.stop.signal);
      }
    }
  }

  /** Stops taking work; running Jobs go on (their workers own the runs). */
  shutdown(): void {
    this.c.stop.abort();
    void this.session.stop();
  }

  /** Waits, up to the stop budget, for every launch to end (created, or its failure reported). */
  private async launchesEnded(): Promise<void> {
    if (this.c.launching.size === 0) return;
    this.log.info({ launches: this.c.launching.size }, "waiting for the launches of claimed jobs to end");
    let timer: NodeJS.Timeout | undefined;
    const budget = new Promise<"timeout">((r) => (timer = setTimeout(() => r("timeout"), launchStopBudgetMs)));
    let ended: "ended" | "timeout" = "ended";
    // A failed launch adds its report while it ends: wait for what was added meanwhile too.
    while (this.c.launching.size > 0 && ended === "ended")
      ended = await Promise.race([Promise.allSettled([...this.c.launching]).then(() => "ended" as const), budget]);
    clearTimeout(timer);
    if (ended === "timeout")
      this.log.error(
        { launches: this.c.launching.size },
        `launches still running after ${launchStopBudgetMs / 1000} s; stopping without them (their jobs' leases expire on the server)`,
      );
  }

  /** Counts a claimed job in flight at once and queues its launch; the next poll does not wait for it. */
  private claim(a: JobAssignment): void {
    const name = jobName(a);
    this.c.tracked.set(name, {
      name,
      assignment: a,
      started: false,
      reported: false,
      podSeen: false,
      since: Date.now(),
    });
    // Kept past a stop: the job is claimed, and dropping its launch would leave it with no Job.
    let attempt = 0;
    const launching = this.c.queue.add(name, () => this.launcher.launch(a, ++attempt), { keepOnStop: true });
    this.c.launching.add(launching);
    void launching.finally(() => this.c.launching.delete(launching));
  }

  /**
   * For Jobs whose worker has not started, renews their leases and notices cancellation (then
   * deletes the Job before it runs): until then the job is this controller's to hold.
   */
  private async pendingJobsLoop(): Promise<void> {
    while (!this.c.stop.signal.aborted) {
      await pause(Math.min(this.session.heartbeatMs, 2_000), this.c.stop.signal);
      if (this.c.stop.signal.aborted) return;
      for (const t of [...this.c.tracked.values()]) {
        if (t.started || t.reported || t.deleting) continue;
        try {
          const hb = await this.c.client.job(t.assignment.jobId, t.assignment.jobToken).heartbeat(0);
          if (hb.cancelRequested) {
            this.log.info({ job: t.assignment.jobId }, "canceled before its worker started: deleting the Job");
            await this.c.queue.add(t.name, () => this.watch.deleteJob(t.name));
          }
        } catch (err) {
          const gone = jobTakenAway(err);
          if (gone) {
            this.log.info(
              { job: t.assignment.jobId, ...gone },
              "the job ended before its worker started: deleting the Job",
            );
            await this.c.queue.add(t.name, () => this.watch.deleteJob(t.name));
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
        this.c.metrics.inc("drover_controller_watch_errors_total");
        this.c.countError("watch");
        this.log.warn({ resource: name, err: errText(err), retryInMs }, "watch failed; resuming");
      },
      signal: this.c.stop.signal,
      watchTimeoutSeconds: this.settings.watchTimeoutSeconds,
    });
    this.c.informers.push({ name, informer: informer as unknown as Informer<KubernetesObject> });
  }

  /** The controller's series (/metrics, and OTLP's source). */
  get metrics(): MetricSet {
    return this.c.metrics;
  }
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
          registry: controller.metrics.registry,
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
