import { BatchV1Api, CoreV1Api, CustomObjectsApi, KubeConfig, Watch, type V1Job, type V1JobSpec, type V1Pod } from "@kubernetes/client-node";
import { DroverError, jobAssignmentSchema, type JobAssignment } from "@drover/protocol";
import type { Logger } from "pino";
import { AgentClient, NetworkError } from "../client.js";
import { int, type AgentConfig } from "../config.js";
import { agentVersion } from "../agent.js";
import { buildJob, jobName, labels, type TaskSettings } from "./job-spec.js";
import { describePodFailure, type FailureTimings } from "./pod-failures.js";
import { defaultExecLoopPath, nodeHomeSetting, podNamespace } from "./settings.js";

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
}

const genericReportDelayMs = 2_000;

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
}

/** Reads and validates the controller's own settings; a bad value throws one clear line. */
export function loadControllerSettings(env: NodeJS.ProcessEnv): ControllerSettings {
  const seconds = (name: string, fallback: number, min: number) => int(name, env[name], fallback, min, 7 * 86_400);
  return {
    namespace: podNamespace(env),
    workerImage: env.DROVER_AGENT_KUBERNETES_WORKER_IMAGE || "ghcr.io/drover-dev/drover:0.1.0",
    execLoopPath: env.DROVER_AGENT_EXEC_LOOP_PATH || defaultExecLoopPath,
    timings: {
      imagePullGraceMs: seconds("DROVER_AGENT_IMAGE_PULL_GRACE_SECONDS", 30, 0) * 1000,
      podPendingTimeoutMs: seconds("DROVER_AGENT_POD_PENDING_TIMEOUT_SECONDS", 600, 1) * 1000,
    },
    activeDeadlineSeconds: seconds("DROVER_AGENT_JOB_ACTIVE_DEADLINE_SECONDS", 4 * 3600, 1),
    ttlSecondsAfterFinished: seconds("DROVER_AGENT_JOB_TTL_SECONDS", 3600, 0),
    nodeHome: nodeHomeSetting(env.DROVER_AGENT_NODE_HOME),
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
  private readonly custom: CustomObjectsApi;
  private readonly client: AgentClient;
  private readonly tracked = new Map<string, Tracked>();
  private session = "";
  private heartbeatMs = 10_000;
  private readonly stop = new AbortController();
  private wake: (() => void) | undefined;
  private readonly watches: AbortController[] = [];

  constructor(
    private readonly config: AgentConfig,
    private readonly settings: ControllerSettings,
    private readonly log: Logger,
  ) {
    this.kc.loadFromDefault();
    this.batch = this.kc.makeApiClient(BatchV1Api);
    this.core = this.kc.makeApiClient(CoreV1Api);
    this.custom = this.kc.makeApiClient(CustomObjectsApi);
    this.client = new AgentClient(config.url, config.caCertPem);
  }

  private get selector(): string {
    return `${labels.controller}=${this.config.name}`;
  }

  async run(): Promise<number> {
    const reg = await this.client.register(this.config.token, { name: this.config.name, version: agentVersion, driver: "kubernetes", capacity: this.config.concurrency });
    this.session = reg.sessionToken;
    this.heartbeatMs = reg.heartbeatIntervalMs;
    this.log.info({ agent: reg.agentId, pool: reg.poolName, namespace: this.settings.namespace }, "controller registered");
    await this.rebuildFromCluster();
    this.watch("/apis/batch/v1/namespaces/" + this.settings.namespace + "/jobs", (type, job: V1Job) => this.onJob(type, job));
    this.watch("/api/v1/namespaces/" + this.settings.namespace + "/pods", (type, pod: V1Pod) => this.onPod(type, pod));
    const beats = this.heartbeatLoop();
    try {
      await this.pollLoop();
    } catch (err) {
      if (err instanceof DroverError && (err.code === "token_revoked" || err.code === "unauthorized")) {
        this.log.error(`the pool token was ${err.code === "token_revoked" ? "revoked" : "refused"}; stopping (${err.message})`);
        this.shutdown();
        await beats;
        return 1;
      }
      throw err;
    }
    await beats;
    return 0;
  }

  /** Stops taking work; running Jobs go on (their workers own the runs). */
  shutdown(): void {
    this.stop.abort();
    this.wake?.();
    for (const w of this.watches) w.abort();
  }

  /** In-flight count and tokens from the cluster: unfinished Jobs with this controller's label. */
  private async rebuildFromCluster(): Promise<void> {
    const jobs = await this.batch.listNamespacedJob({ namespace: this.settings.namespace, labelSelector: this.selector });
    for (const job of jobs.items) {
      const name = job.metadata?.name;
      if (!name || finished(job)) continue;
      try {
        const secret = await this.core.readNamespacedSecret({ name: `${name}-job`, namespace: this.settings.namespace });
        const data = secret.data ?? {};
        const token = Buffer.from(data.token ?? "", "base64").toString("utf8");
        const assignment = jobAssignmentSchema.parse({ ...JSON.parse(Buffer.from(data["assignment.json"] ?? "", "base64").toString("utf8")), jobToken: token });
        this.tracked.set(name, { name, assignment, started: false, reported: false, podSeen: false });
      } catch (err) {
        this.log.warn({ job: name, err: errText(err) }, "cannot read the job Secret of a running Job; leaving it to its worker");
      }
    }
    this.log.info({ inFlight: this.tracked.size }, "rebuilt in-flight Jobs from the cluster");
  }

  private async pollLoop(): Promise<void> {
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
          this.session = (await this.client.register(this.config.token, { name: this.config.name, version: agentVersion, driver: "kubernetes", capacity: this.config.concurrency })).sessionToken;
          continue;
        }
        if (err instanceof NetworkError) {
          await new Promise((r) => setTimeout(r, 1000));
          continue;
        }
        throw err;
      }
      if (job) await this.launch(job);
    }
  }

  private async template(): Promise<V1JobSpec | undefined> {
    const name = this.config.kubernetesTaskTemplate;
    if (!name) return undefined;
    const task = (await this.custom.getNamespacedCustomObject({ group: "drover.dev", version: "v1alpha1", namespace: this.settings.namespace, plural: "agenttasks", name })) as {
      spec?: { jobTemplate?: V1JobSpec };
    };
    return task.spec?.jobTemplate;
  }

  /** Creates the Job (deterministic name) and then its token Secret, owned by the Job. */
  private async launch(a: JobAssignment): Promise<void> {
    const settings: TaskSettings = {
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
    };
    const name = jobName(a);
    this.tracked.set(name, { name, assignment: a, started: false, reported: false, podSeen: false });
    try {
      const body = buildJob(a, await this.template(), settings);
      let created: V1Job;
      try {
        created = await this.batch.createNamespacedJob({ namespace: this.settings.namespace, body });
      } catch (err) {
        if (status(err) !== 409) throw err;
        created = await this.batch.readNamespacedJob({ name, namespace: this.settings.namespace });
      }
      const { jobToken, ...rest } = a;
      try {
        await this.core.createNamespacedSecret({
          namespace: this.settings.namespace,
          body: {
            metadata: {
              name: `${name}-job`,
              labels: { [labels.controller]: this.config.name, [labels.k8sJob]: name },
              ownerReferences: [{ apiVersion: "batch/v1", kind: "Job", name, uid: created.metadata?.uid ?? "", controller: true, blockOwnerDeletion: true }],
            },
            type: "Opaque",
            // The server URL rides along for node workers, which hold no pool token to read it from.
            stringData: { token: jobToken, "assignment.json": JSON.stringify(rest), url: this.config.url },
          },
        });
      } catch (err) {
        if (status(err) !== 409) throw err;
      }
      this.log.info({ job: a.jobId, run: a.runId, phase: a.phase, k8sJob: name }, "launched Job");
    } catch (err) {
      this.log.error({ job: a.jobId, err: errText(err) }, "could not create the Job");
      await this.report(name, `could not create the Kubernetes Job: ${errText(err)}`);
    }
  }

  private onJob(type: string, job: V1Job): void {
    const name = job.metadata?.name ?? "";
    const t = this.tracked.get(name);
    if (!t) return;
    if (type === "DELETED" || finished(job)) {
      const failed = job.status?.conditions?.find((c) => c.type === "Failed" && c.status === "True");
      if (failed && !t.reported && !t.started) {
        void this.reportJobWithoutWorker(t, failed.reason ?? "Failed", failed.message ?? "");
        return;
      }
      this.tracked.delete(name);
      this.wake?.();
    }
  }

  private async reportJobWithoutWorker(t: Tracked, reason: string, message: string): Promise<void> {
    let detail = `${reason}${message ? `: ${message}` : ""}`;
    if (!t.podSeen) {
      const events = await this.core.listNamespacedEvent({ namespace: this.settings.namespace, fieldSelector: `involvedObject.name=${t.name}` }).catch(() => ({ items: [] }));
      const lines = events.items.map((e) => `${e.reason ?? ""}: ${e.message ?? ""}`).slice(-5);
      detail = `the Job ended without a pod (${detail})${lines.length ? `; events: ${lines.join("; ")}` : ""}`;
    }
    await this.report(t.name, detail);
  }

  private onPod(_type: string, pod: V1Pod): void {
    const name = pod.metadata?.labels?.[labels.k8sJob] ?? "";
    const t = this.tracked.get(name);
    if (!t) return;
    t.podSeen = true;
    t.lastPod = pod;
    // The worker owns the run once it runs; in node-worker mode, once the runner it prepared does.
    const owner = this.settings.nodeHome ? "runner" : "worker";
    if (pod.status?.containerStatuses?.some((c) => c.name === owner && (c.state?.running || c.state?.terminated))) t.started = true;
    const failure = describePodFailure(pod, Date.now(), this.settings.timings);
    if (!failure) return;
    if (!failure.generic) {
      void this.report(name, failure.message);
      return;
    }
    // Containers die a moment before the kubelet records why (eviction, OOM): look again
    // shortly and report the most specific reason known by then.
    if (t.pendingGeneric) return;
    t.pendingGeneric = true;
    setTimeout(() => {
      const latest = t.lastPod ? describePodFailure(t.lastPod, Date.now(), this.settings.timings) : undefined;
      void this.report(name, (latest ?? failure).message);
    }, genericReportDelayMs).unref();
  }

  /**
   * Reports a pod-level failure into the run's log once and ends the job errored, then deletes
   * the Job so nothing lingers (a worker that already finished the job wins: its outcome stands).
   */
  private async report(name: string, reason: string): Promise<void> {
    const t = this.tracked.get(name);
    if (!t || t.reported) return;
    t.reported = true;
    const job = this.client.job(t.assignment.jobId, t.assignment.jobToken);
    const line = Buffer.from(`\n[drover] ${reason}\n`, "utf8");
    try {
      // Append at the log's end: ask with an offset past it, the server answers where it is.
      let offset = Number.MAX_SAFE_INTEGER;
      for (let i = 0; i < 3; i++) {
        try {
          await job.appendLog(offset, line);
          break;
        } catch (err) {
          if (err instanceof DroverError && err.code === "log_gap") offset = Number(err.details?.expectedOffset);
          else throw err;
        }
      }
      await job.finish("errored", reason);
      this.log.warn({ job: t.assignment.jobId, reason }, "reported a pod failure");
    } catch (err) {
      this.log.info({ job: t.assignment.jobId, err: errText(err) }, "pod failure not reported: the job had already ended");
    }
    await this.deleteJob(name);
  }

  private async deleteJob(name: string): Promise<void> {
    try {
      await this.batch.deleteNamespacedJob({ name, namespace: this.settings.namespace, propagationPolicy: "Background", gracePeriodSeconds: 0 });
    } catch (err) {
      if (status(err) !== 404) this.log.warn({ job: name, err: errText(err) }, "could not delete the Job");
    }
    this.tracked.delete(name);
    this.wake?.();
  }

  /**
   * Keeps the agent registration alive and, for Jobs whose worker has not started, renews
   * their leases and notices cancellation (then deletes the Job before it runs).
   */
  private async heartbeatLoop(): Promise<void> {
    while (!this.stop.signal.aborted) {
      await new Promise((r) => setTimeout(r, Math.min(this.heartbeatMs, 2_000)).unref());
      if (this.stop.signal.aborted) return;
      await this.client.heartbeat(this.session, this.tracked.size).catch(() => undefined);
      for (const t of [...this.tracked.values()]) {
        if (t.started || t.reported) continue;
        try {
          const hb = await this.client.job(t.assignment.jobId, t.assignment.jobToken).heartbeat(0);
          if (hb.cancelRequested) {
            this.log.info({ job: t.assignment.jobId }, "canceled before its worker started: deleting the Job");
            await this.deleteJob(t.name);
          }
        } catch (err) {
          if (err instanceof DroverError && (err.code === "job_finished" || err.code === "stale_attempt")) {
            this.log.info({ job: t.assignment.jobId, reason: err.code }, "the job ended before its worker started: deleting the Job");
            await this.deleteJob(t.name);
          }
        }
      }
    }
  }

  /** List, then watch from the list's resourceVersion; relist on 410 Gone or any break. */
  private watch<T extends { metadata?: { resourceVersion?: string } }>(path: string, handle: (type: string, obj: T) => void): void {
    const loop = async () => {
      while (!this.stop.signal.aborted) {
        try {
          const listed = await this.listRaw(path);
          for (const item of listed.items as T[]) handle("ADDED", item);
          await new Promise<void>((resolve) => {
            void new Watch(this.kc)
              .watch(path, { labelSelector: this.selector, resourceVersion: listed.resourceVersion, allowWatchBookmarks: true }, (type, obj: T) => handle(type, obj), () => resolve())
              .then((ac) => {
                this.watches.push(ac);
                if (this.stop.signal.aborted) ac.abort();
              })
              .catch(() => resolve());
          });
        } catch (err) {
          this.log.warn({ path, err: errText(err) }, "watch failed; relisting");
        }
        await new Promise((r) => setTimeout(r, 500).unref());
      }
    };
    void loop();
  }

  private async listRaw(path: string): Promise<{ items: unknown[]; resourceVersion: string }> {
    if (path.includes("/jobs")) {
      const l = await this.batch.listNamespacedJob({ namespace: this.settings.namespace, labelSelector: this.selector });
      return { items: l.items, resourceVersion: l.metadata?.resourceVersion ?? "" };
    }
    const l = await this.core.listNamespacedPod({ namespace: this.settings.namespace, labelSelector: this.selector });
    return { items: l.items, resourceVersion: l.metadata?.resourceVersion ?? "" };
  }
}

function finished(job: V1Job): boolean {
  return (job.status?.conditions ?? []).some((c) => (c.type === "Complete" || c.type === "Failed") && c.status === "True");
}

function status(err: unknown): number | undefined {
  const e = err as { code?: unknown; statusCode?: unknown; body?: unknown };
  if (typeof e.code === "number") return e.code;
  if (typeof e.statusCode === "number") return e.statusCode;
  return undefined;
}

function errText(err: unknown): string {
  if (err instanceof Error) return err.message.split("\n")[0] ?? err.message;
  return String(err);
}

/** Starts a controller from the agent configuration; resolves with the exit code. */
export async function runController(config: AgentConfig, settings: ControllerSettings, log: Logger): Promise<number> {
  const controller = new Controller(config, settings, log);
  const onSignal = () => {
    log.info("stop signal received: no new Jobs; running ones continue under their workers");
    controller.shutdown();
  };
  process.on("SIGTERM", onSignal);
  process.on("SIGINT", onSignal);
  return controller.run();
}
