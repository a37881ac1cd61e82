import { CoreV1Api, KubeConfig, type V1Pod } from "@kubernetes/client-node";
import { jobAssignmentSchema, SettingsSource, type JobAssignment, messageOf } from "@drover/protocol";
import { noopTracer, startTelemetryIfSet, type Telemetry } from "@drover/runtime";
import { hostname } from "node:os";
import { mkdirSync, readdirSync, readFileSync } from "node:fs";
import type { Logger } from "pino";
import { agentVersion } from "../../session/version.js";
import { AgentClient } from "../../session/client.js";
import { servingHealth } from "../../health.js";
import { MetricSet } from "../../metrics.js";
import type { LogFormat, StopAction } from "../../config.js";
import { SafeDir } from "../../job/safe-dir.js";
import { apiClientWithDeadline, defaultApiTimeoutMs } from "./api-deadline.js";
import { labels, nodeCacheDir, nodeReadyDir, nodeRunDir } from "./job-spec.js";
import { cacheDispatcher, openCaches, type Caches } from "../../cache/caches.js";
import { podNamespace } from "./settings.js";
import { startInformer, type Informer } from "./informer.js";
import { superviseJob, supervisionSettings, type WorkerSettings } from "./worker.js";
import { cacheSettings, otlpSettings, type CacheSettings } from "../../shared-settings.js";

/** Settings of `drover agent node-worker`, the per-node worker of the agent-k8s design. */
export interface NodeWorkerSettings {
  /** Unset: each job's Secret carries the URL its controller uses. */
  url: string | undefined;
  namespace: string;
  nodeName: string;
  home: string;
  execLoopPath: string;
  stopAction: StopAction;
  gracePeriodMs: number;
  caCertPem: string | undefined;
  runnerStaleMs: number;
  /** A run pod's runner whose exec-loop has written no heartbeat this long after the take never started. */
  runnerStartTimeoutMs: number;
  /** How often cached pods and run directories are re-examined without an event (no API call). */
  pollMs: number;
  /** Name of the controller (DROVER_AGENT_NAME of its release) whose run pods this worker supervises. */
  controllerName: string;
  /** Port of /healthz, /readyz and /metrics; 0 disables them. */
  healthPort: number;
  /** Address of the health port; undefined: every interface of both families. */
  healthAddress: string | undefined;
  logFormat: LogFormat;
  /**
   * The node's engine, provider and module caches, in `<home>/cache` (every run pod of the node mounts it
   * read-only there): this worker fills them for all of the node's runs.
   */
  caches: CacheSettings;
  /** The pods watch's `timeoutSeconds`; see informer.ts for its deadline. */
  watchTimeoutSeconds: number;
  /** OTLP export of this worker's metrics and its runs' spans (DROVER_AGENT_OTLP_*); none without an endpoint. */
  otlp: WorkerSettings["otlp"];
}

/** Reads and validates the node worker's settings; a bad value throws one clear line. */
export function loadNodeWorkerSettings(env: NodeJS.ProcessEnv): NodeWorkerSettings {
  const src = new SettingsSource(env);
  const home = src.require("DROVER_AGENT_NODE_HOME", "the hostPath data home shared with run pods");
  return {
    url: src.get("DROVER_URL"),
    namespace: podNamespace(src),
    nodeName: src.require("DROVER_AGENT_NODE_NAME", "this node's name (the downward API's spec.nodeName)"),
    home,
    execLoopPath: src.get("DROVER_AGENT_EXEC_LOOP_PATH"),
    ...supervisionSettings(src),
    pollMs: src.get("DROVER_AGENT_NODE_POLL_MS"),
    controllerName: src.require(
      "DROVER_AGENT_CONTROLLER_NAME",
      "the name of the controller whose run pods this worker supervises (its DROVER_AGENT_NAME)",
    ),
    healthPort: src.getOr("DROVER_AGENT_HEALTH_PORT", 8080),
    healthAddress: src.get("DROVER_AGENT_HEALTH_ADDRESS"),
    logFormat: src.get("DROVER_AGENT_LOG_FORMAT"),
    caches: { ...cacheSettings(src), cacheDir: nodeCacheDir(home) },
    watchTimeoutSeconds: src.get("DROVER_AGENT_KUBERNETES_WATCH_TIMEOUT_SECONDS"),
    otlp: otlpSettings(src),
  };
}

const live = (pod: V1Pod) => pod.status?.phase === "Pending" || pod.status?.phase === "Running" || !pod.status?.phase;

/**
 * One per node (a DaemonSet): supervises the run pods the controller's Jobs put on this node.
 * For each it reads the job Secret, prepares `<home>/runs/<job>` (the pod's only view of the
 * node), marks it ready in `<home>/ready/<job>` (what the pod's init container waits for),
 * owns the run as a pod's worker would, and removes both once the pod is done. A run found
 * already marked ready belongs to an earlier process of this worker: it cannot be resumed, so
 * it ends errored with that reason and its runner is told to exit.
 *
 * Every run pod can write its own directory, links included. So this process opens `runs`,
 * `ready` and each run's directories once, as handles (SafeDir), and reaches nothing in them by
 * a path a run could redirect: one run cannot make it read or write another run's files or
 * its own (its ServiceAccount token included).
 */
export class NodeWorker {
  private readonly core: CoreV1Api;
  private readonly runs = new Map<string, { done: Promise<void>; stop(): void }>();
  private readonly seen = new Set<string>();
  private stopping = false;
  private readonly kc = new KubeConfig();
  /** This node's run pods of its controller, kept current by a watch (no polling of the API). */
  private pods: Informer<V1Pod> | undefined;
  private readonly halt = new AbortController();
  private wake: (() => void) | undefined;
  /** The runs' spans (each under its job's span through the assignment's traceparent) and this worker's metrics over OTLP. */
  private telemetry: Telemetry = { tracer: noopTracer, shutdown: async () => undefined };
  private readonly metrics = new MetricSet()
    .define("drover_node_worker_runs", "gauge", "Runs this node worker supervises", { read: () => this.runs.size })
    .define(
      "drover_node_worker_watch_errors_total",
      "counter",
      "Failed lists or watches of this node's run pods (each is retried)",
    )
    .define(
      "drover_node_worker_log_bytes_shipped_total",
      "counter",
      "Log bytes of this node's runs the server acknowledged",
    )
    .define("drover_node_worker_errors_total", "counter", "Errors of this node worker by kind (each retried)", {
      labels: ["kind"],
    })
    .define(
      "drover_node_worker_supervisors_started_total",
      "counter",
      "Runs this node worker started driving (one per run pod; more means a run was driven twice)",
    );

  constructor(
    private readonly settings: NodeWorkerSettings,
    private readonly log: Logger,
  ) {
    this.kc.loadFromDefault();
    this.core = apiClientWithDeadline(this.kc, CoreV1Api, defaultApiTimeoutMs);
  }

  private runsDir: SafeDir | undefined;
  private readyDir: SafeDir | undefined;
  /** The caches every run on this node shares. */
  private caches: Caches = { providers: undefined, modules: undefined, engines: undefined };

  /** Runs until `shutdown()`, then waits for its runs to wind down; resolves with the exit code. */
  async run(): Promise<number> {
    const source = {
      // Winding runs down after SIGTERM is still healthy work: liveness never fails on its own.
      health: () => ({
        live: true,
        ready: (this.pods?.synced ?? false) && !this.stopping,
        details: { runs: this.runs.size },
      }),
      metrics: () => this.metrics.render(),
    };
    if (this.settings.otlp) {
      this.telemetry = await startTelemetryIfSet({
        ...this.settings.otlp,
        resource: {
          "service.name": "drover-node-worker",
          "k8s.node.name": this.settings.nodeName,
          "k8s.pod.name": hostname(),
          "drover.controller": this.settings.controllerName,
        },
        registry: this.metrics.registry,
      }).catch((err: unknown) => {
        this.log.warn({ err: messageOf(err) }, "OpenTelemetry export could not start; running without it");
        return this.telemetry;
      });
    }
    try {
      return await servingHealth(this.settings.healthPort, this.settings.healthAddress, source, () => this.work());
    } finally {
      // The last runs' spans and the final counters go out before the process exits.
      await this.telemetry.shutdown().catch(() => undefined);
    }
  }

  private async work(): Promise<number> {
    this.runsDir = SafeDir.open(nodeRunDir(this.settings.home, ""), { create: true });
    this.readyDir = SafeDir.open(nodeReadyDir(this.settings.home), { create: true });
    const unwritable = [this.runsDir, this.readyDir].map(notWritable).find((why) => why !== undefined);
    if (unwritable) {
      this.log.error(
        `${unwritable}: this worker could never prepare or mark a run on this node ready. Create ${this.settings.home}/runs and ${this.settings.home}/ready owned by the worker's user with the data home (README: agent-k8s node preparation), or set workerDaemonSet.prepareDataHome=true`,
      );
      return 1;
    }
    // Made even with both caches off: every run pod mounts it.
    mkdirSync(this.settings.caches.cacheDir, { recursive: true, mode: 0o755 });
    this.caches = openCaches(
      this.settings.caches,
      cacheDispatcher(this.settings.caCertPem),
      this.log,
      this.settings.caCertPem,
    );
    if (this.caches.providers) this.metrics.addCache("providers", this.caches.providers.counters);
    if (this.caches.engines) this.metrics.addCache("engines", this.caches.engines.counters);
    if (this.caches.modules) this.metrics.addCache("modules", this.caches.modules.counters);
    this.log.info({ node: this.settings.nodeName, home: this.settings.home }, "node worker started");
    const { namespace, nodeName, controllerName } = this.settings;
    const labelSelector = `${labels.controller}=${controllerName}`;
    const fieldSelector = `spec.nodeName=${nodeName}`;
    this.pods = startInformer<V1Pod>({
      kc: this.kc,
      name: "pods",
      path: `/api/v1/namespaces/${namespace}/pods`,
      list: (from) => this.core.listNamespacedPod({ namespace, labelSelector, fieldSelector, ...from }),
      labelSelector,
      fieldSelector,
      onEvent: () => this.wake?.(),
      onError: (err, retryInMs) => {
        this.metrics.inc("drover_node_worker_watch_errors_total");
        this.metrics.inc("drover_node_worker_errors_total", { kind: "watch" });
        this.log.warn({ err: messageOf(err), retryInMs }, "watching this node's run pods failed; resuming");
      },
      signal: this.halt.signal,
      watchTimeoutSeconds: this.settings.watchTimeoutSeconds,
    });
    while (!this.stopping) {
      // Only from a current view: an empty cache before the first list would look like
      // "every run directory is orphaned".
      if (this.pods.synced) await this.reconcile();
      // A pod event wakes the loop at once; the interval retries what could not be taken yet
      // and removes directories of pods that are gone (from the cache, no API call).
      await new Promise<void>((r) => {
        const timer = setTimeout(done, this.settings.pollMs);
        function done() {
          clearTimeout(timer);
          r();
        }
        this.wake = done;
      });
    }
    this.halt.abort();
    await Promise.all([...this.runs.values()].map((r) => r.done));
    return 0;
  }

  /** Stops taking runs and winds running ones down per the stop action. */
  shutdown(): void {
    this.stopping = true;
    this.wake?.();
    for (const r of this.runs.values()) r.stop();
  }

  private async reconcile(): Promise<void> {
    const pods = (this.pods?.list(this.settings.namespace) ?? []).filter(
      (p) =>
        !p.spec?.containers.some((c) => c.name === "worker") && p.spec?.volumes?.some((v) => v.name === "drover-home"),
    );
    const liveNames = new Set(pods.filter(live).map((p) => p.metadata?.labels?.[labels.k8sJob] ?? ""));
    for (const pod of pods) {
      const name = pod.metadata?.labels?.[labels.k8sJob];
      if (!name || !live(pod) || this.seen.has(name) || this.runs.has(name) || this.stopping) continue;
      this.seen.add(name);
      await this.take(name).catch((err: unknown) => {
        // The controller creates the Job's Secret just after the Job: try again next round.
        this.seen.delete(name);
        this.log.warn({ k8sJob: name, err: messageOf(err) }, "cannot take the run pod yet");
      });
    }
    // A directory whose pod is gone or finished (its runner cannot write any more), and whose
    // run this process does not hold.
    for (const [dir, names] of [this.runsDir!, this.readyDir!].map((d) => [d, readdirSync(d.procPath)] as const)) {
      for (const name of names) if (!this.runs.has(name) && !liveNames.has(name)) dir.remove(name);
    }
  }

  private async take(name: string): Promise<void> {
    const secret = await this.core.readNamespacedSecret({ name: `${name}-job`, namespace: this.settings.namespace });
    const field = (k: string) => Buffer.from(secret.data?.[k] ?? "", "base64").toString("utf8");
    const assignment: JobAssignment = jobAssignmentSchema.parse({
      ...JSON.parse(field("assignment.json")),
      jobToken: field("token").trim(),
    });
    const url = this.settings.url ?? field("url").replace(/\/+$/, "");
    if (!url) throw new Error(`the Secret ${name}-job holds no server URL and DROVER_URL is not set`);
    const skew = versionSkew(field("version"), agentVersion);
    if (skew) this.log.warn({ k8sJob: name, controllerVersion: field("version"), workerVersion: agentVersion }, skew);
    const runs = this.runsDir!;
    if (this.readyDir!.exists(name)) return this.abandon(name, assignment, url);
    // Not marked ready: its runner never started, so whatever an earlier process left is stale.
    runs.remove(name);
    const root = runs.dir(name, { create: "fresh" });
    let exec: SafeDir | undefined;
    let run: SafeDir | undefined;
    try {
      exec = root.dir("exec", { create: "fresh" });
      run = root.dir("run", { create: "fresh" });
      root.write("bin/exec-loop.sh", readFileSync(this.settings.execLoopPath), 0o755);
      // Marked ready before anything supervises it: a take that fails after a supervisor started
      // would be taken again from a fresh directory, and the run would be driven twice.
      this.readyDir!.write(name, "");
    } catch (err) {
      exec?.close();
      run?.close();
      throw err;
    } finally {
      root.close();
    }
    const dir = nodeRunDir(this.settings.home, name);
    const log = this.log.child({ job: assignment.jobId, k8sJob: name });
    const supervised = superviseJob(
      assignment,
      {
        ...this.settings,
        url,
        execDir: `${dir}/exec`,
        runDir: `${dir}/run`,
        onLogBytes: (n) => this.metrics.add("drover_node_worker_log_bytes_shipped_total", n),
        onError: (kind) => this.metrics.inc("drover_node_worker_errors_total", { kind }),
        ...(skew ? { notes: [skew] } : {}),
        tracer: this.telemetry.tracer,
      },
      log,
      { exec, run },
      this.caches,
    );
    this.metrics.inc("drover_node_worker_supervisors_started_total");
    this.runs.set(name, supervised);
    log.info({ run: assignment.runId, phase: assignment.phase }, "supervising a run pod on this node");
    void supervised.done.finally(() => this.runs.delete(name));
  }

  private async abandon(name: string, a: JobAssignment, url: string): Promise<void> {
    const reason = "the node's drover worker restarted while the run was in progress";
    this.log.warn({ k8sJob: name, job: a.jobId }, reason);
    const job = new AgentClient(url, this.settings.caCertPem).job(a.jobId, a.jobToken);
    await job.finish("errored", reason).catch(() => undefined);
    try {
      const exec = this.runsDir!.dir(`${name}/exec`);
      try {
        exec.write("shutdown", "");
      } finally {
        exec.close();
      }
    } catch (err) {
      this.log.warn(
        { k8sJob: name, err: messageOf(err) },
        "could not tell the abandoned run's runner to exit; the pod ends at its deadline",
      );
    }
  }
}

/**
 * Why this process cannot create entries in `dir`, or undefined when it can. A directory made
 * by someone else (a kubelet creates a missing subPath root-owned for a run pod that reached
 * the node before its worker) would fail every run on the node much later, one by one.
 */
function notWritable(dir: SafeDir): string | undefined {
  const probe = `.writable-${process.pid}`;
  try {
    dir.write(probe, "");
    dir.remove(probe);
    return undefined;
  } catch (err) {
    return `${dir.label} is not writable (${(err as NodeJS.ErrnoException).code ?? String(err)})`;
  }
}

/** Starts a node worker; SIGTERM/SIGINT wind its runs down per the stop action. */
export async function runNodeWorker(settings: NodeWorkerSettings, log: Logger): Promise<number> {
  const worker = new NodeWorker(settings, log);
  const onSignal = () => {
    log.info("stop signal received: winding down this node's runs");
    worker.shutdown();
  };
  process.on("SIGTERM", onSignal);
  process.on("SIGINT", onSignal);
  return worker.run();
}

/**
 * The warning for a node worker serving a controller of another version (the DaemonSet's
 * OnDelete strategy keeps a node's worker until its pod is deleted), or undefined. A warning,
 * not a refusal: what they share (the job Secret's fields, the run directory, the exec-loop)
 * only grows compatibly (charts/agent-k8s README, "Upgrades and drains").
 */
export function versionSkew(controllerVersion: string, workerVersion: string): string | undefined {
  // A controller older than this check writes no version.
  const controller = controllerVersion.trim() || "an older version";
  if (controller === workerVersion) return undefined;
  return (
    `version skew: this node's drover worker is ${workerVersion}, the controller ${controller}; ` +
    "update the worker by deleting its pod (kubectl delete pod) once no run pod is on the node"
  );
}
