import {
  jobAssignmentSchema,
  settings as settingsTable,
  SettingsSource,
  type JobAssignment,
  messageOf,
} from "@drover/protocol";
import { startTelemetryIfSet, type RunTracer } from "@drover/runtime";
import {
  cacheSettings,
  otlpSettings,
  stopAndTrustSettings,
  type CacheSettings,
  type OtlpSettings,
} from "../../shared-settings.js";
import { readFileSync } from "node:fs";
import { hostname } from "node:os";
import { join } from "node:path";
import type { Logger } from "pino";
import { AgentClient } from "../../session/client.js";
import { stopPlan, type StopAction } from "../../config.js";
import { closeHealthServer, startHealthServer } from "../../health.js";
import { MetricSet } from "../../metrics.js";
import { JobRun, type JobSettings } from "../../job/job.js";
import { ExecLoopRunner } from "../../runners/exec-loop.js";
import { SafeDir } from "../../job/safe-dir.js";
import { cacheDispatcher, openCaches, type Caches } from "../../cache/caches.js";

/** Where the controller's Secret (job token + assignment) is mounted in the worker container. */
export const defaultJobSecretDir = settingsTable.DROVER_WORKER_SECRET_DIR.default;

/** Settings of `drover agent worker`, from its environment (set by the controller's Job). */
export interface WorkerSettings {
  url: string;
  secretDir: string;
  execDir: string;
  runDir: string;
  stopAction: StopAction;
  gracePeriodMs: number;
  caCertPem: string | undefined;
  runnerStaleMs: number;
  /** A runner whose exec-loop has written no heartbeat this long after the job was taken never started. */
  runnerStartTimeoutMs: number;
  /**
   * Port of /healthz, /readyz and /metrics; 0 (the default) disables them. The task template
   * sets it; run pods are not probed (a failed liveness probe would kill the run).
   */
  healthPort: number;
  /** Address of the health port; undefined: every interface of both families. */
  healthAddress: string | undefined;
  /** OTLP export of this pod's spans (set by the controller when it has an endpoint). */
  otlp?: OtlpSettings | undefined;
  /** Spans of the job's stages; runWorker sets it from `otlp`. */
  tracer?: RunTracer | undefined;
  /** The provider and module caches: this worker fills them, the runner container reads them (mounted read-only). */
  caches: CacheSettings;
}

/** Reads the pod worker's settings; a bad value throws one clear line. */
export function loadWorkerSettings(env: NodeJS.ProcessEnv): WorkerSettings {
  const src = new SettingsSource(env);
  return {
    url: src.require("DROVER_URL", "the worker is started by the controller's Job, which sets it"),
    secretDir: src.get("DROVER_WORKER_SECRET_DIR"),
    execDir: src.get("DROVER_EXEC_DIR"),
    runDir: src.get("DROVER_WORKER_RUN_DIR"),
    ...supervisionSettings(src),
    healthPort: src.getOr("DROVER_AGENT_HEALTH_PORT", 0),
    healthAddress: src.get("DROVER_AGENT_HEALTH_ADDRESS"),
    caches: cacheSettings(src),
    otlp: otlpSettings(src),
  };
}

/** The settings every worker (a pod's or a node's) reads the same way: stop behaviour, trust, runner staleness. */
export function supervisionSettings(
  src: SettingsSource,
): Pick<WorkerSettings, "stopAction" | "gracePeriodMs" | "caCertPem" | "runnerStaleMs" | "runnerStartTimeoutMs"> {
  return {
    ...stopAndTrustSettings(src),
    runnerStaleMs: src.get("DROVER_WORKER_RUNNER_STALE_SECONDS") * 1000,
    runnerStartTimeoutMs: src.get("DROVER_WORKER_RUNNER_START_TIMEOUT_SECONDS") * 1000,
  };
}

/**
 * Runs the one job of this pod: reads the job token the controller left in a Secret, owns the
 * run (heartbeats, logs, status straight to the server) and executes its steps in the runner
 * container through the exec-loop. Resolves with the exit code.
 */
export async function runWorker(settings: WorkerSettings, log: Logger): Promise<number> {
  const token = readFileSync(join(settings.secretDir, "token"), "utf8").trim();
  const assignment = jobAssignmentSchema.parse({
    ...JSON.parse(readFileSync(join(settings.secretDir, "assignment.json"), "utf8")),
    jobToken: token,
  });
  let running = true;
  const metrics = new MetricSet()
    .define("drover_worker_job_running", "gauge", "1 while this pod's job runs", { read: () => (running ? 1 : 0) })
    .define("drover_worker_log_bytes_shipped_total", "counter", "Log bytes of this pod's job the server acknowledged")
    .define("drover_worker_errors_total", "counter", "Errors of this pod's worker by kind (each retried)", {
      labels: ["kind"],
    });
  const telemetry = await startTelemetryIfSet(
    settings.otlp && {
      ...settings.otlp,
      resource: { "service.name": "drover-worker", "k8s.pod.name": hostname(), "drover.phase": assignment.phase },
      registry: metrics.registry,
    },
  ).catch((err: unknown) => {
    log.warn({ err: messageOf(err) }, "OpenTelemetry export could not start; running without it");
    return undefined;
  });
  const caches = openCaches(settings.caches, cacheDispatcher(settings.caCertPem), log, settings.caCertPem);
  if (caches.providers) metrics.addCache("providers", caches.providers.counters);
  if (caches.modules) metrics.addCache("modules", caches.modules.counters);
  if (caches.engines) metrics.addCache("engines", caches.engines.counters);
  const supervised = superviseJob(
    assignment,
    {
      ...settings,
      tracer: telemetry?.tracer,
      onLogBytes: (n) => metrics.add("drover_worker_log_bytes_shipped_total", n),
      onError: (kind) => metrics.inc("drover_worker_errors_total", { kind }),
    },
    log,
    undefined,
    caches,
  );
  // The run matters more than its health port: a port already taken costs the probe, not the run.
  const health =
    settings.healthPort > 0
      ? await startHealthServer(
          settings.healthPort,
          {
            health: () => ({ live: true, ready: running, details: { job: assignment.jobId, phase: assignment.phase } }),
            metrics: () => metrics.render(),
          },
          settings.healthAddress,
        ).catch((err: unknown) => {
          log.warn(
            { port: settings.healthPort, err: messageOf(err) },
            "cannot serve the health port; running the job without it",
          );
          return undefined;
        })
      : undefined;
  const onStop = () => {
    log.info("stop signal received; stopping the run");
    supervised.stop();
  };
  process.on("SIGTERM", onStop);
  process.on("SIGINT", onStop);
  await supervised.done;
  running = false;
  await closeHealthServer(health);
  await telemetry?.shutdown().catch(() => undefined);
  return 0;
}

/** Where and how one job runs under a worker: its exec-loop directory and its files. */
export type SupervisionSettings = Pick<
  WorkerSettings,
  | "url"
  | "execDir"
  | "runDir"
  | "stopAction"
  | "gracePeriodMs"
  | "caCertPem"
  | "runnerStaleMs"
  | "runnerStartTimeoutMs"
  | "tracer"
> &
  Pick<JobSettings, "onLogBytes" | "onError" | "notes">;

/**
 * Owns one job whose steps execute in a runner container through the exec-loop in
 * `execDir`: heartbeats, logs and status go straight to the server. `done` resolves when the
 * job has ended and the runner was told to exit; `stop()` winds it down per the stop action.
 */
export function superviseJob(
  assignment: JobAssignment,
  settings: SupervisionSettings,
  log: Logger,
  handles?: { exec: SafeDir; run: SafeDir },
  caches?: Caches,
): { done: Promise<void>; stop(): void } {
  // The runner container shares both directories: reach them only through handles opened now.
  const exec = handles?.exec ?? SafeDir.open(settings.execDir, { create: true });
  const run = handles?.run ?? SafeDir.open(settings.runDir, { create: true });
  const runner = new ExecLoopRunner(
    settings.execDir,
    exec,
    { path: settings.runDir, handle: run },
    settings.runnerStaleMs,
    undefined,
    undefined,
    settings.runnerStartTimeoutMs,
  );
  runner.touchWorkerHeartbeat();
  const beat = setInterval(() => runner.touchWorkerHeartbeat(), 5_000);
  const jobSettings: JobSettings = {
    // The pod holds no pool token: only the job token, which the run redacts anyway.
    token: undefined,
    name: hostname(),
    ...(settings.tracer ? { tracer: settings.tracer } : {}),
    onLogBytes: settings.onLogBytes,
    onError: settings.onError,
    ...(settings.notes ? { notes: settings.notes } : {}),
    dataDir: settings.runDir,
    cacheDir: join(settings.runDir, ".cache"),
    stopAction: settings.stopAction,
    taskCaCertPath: undefined,
    // Hooks are the runner image's business in a pod.
    hooksDir: undefined,
    hookTimeoutMs: settingsTable.DROVER_AGENT_HOOK_TIMEOUT_SECONDS.default * 1000,
  };
  // No kept plan directories: each phase runs in a new pod (or a new directory on the node).
  const job = new JobRun({
    assignment,
    client: new AgentClient(settings.url, settings.caCertPem),
    settings: jobSettings,
    logger: log,
    runner,
    providerCache: caches?.providers,
    moduleCache: caches?.modules,
    engines: caches?.engines,
  });
  const done = job.execute().finally(() => {
    clearInterval(beat);
    if (!runner.shutdown())
      log.warn("could not tell the runner to exit: the run blocked its shutdown file; the pod ends at its deadline");
    runner.close();
    exec.close();
    run.close();
  });
  return { done, stop: () => job.stop(stopPlan(settings.stopAction, settings.gracePeriodMs), settings.stopAction) };
}
