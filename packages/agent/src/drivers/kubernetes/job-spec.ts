import type { V1Container, V1Job, V1JobSpec, V1Volume, V1VolumeMount } from "@kubernetes/client-node";
import type { JobAssignment } from "@drover/protocol";
import type { OtlpSettings } from "@drover/runtime";

/** Labels on every Job and pod the controller creates. */
export const labels = {
  runId: "drover.dev/run-id",
  workspaceId: "drover.dev/workspace-id",
  phase: "drover.dev/phase",
  poolId: "drover.dev/pool-id",
  controller: "drover.dev/controller",
  jobId: "drover.dev/job-id",
  k8sJob: "drover.dev/k8s-job",
} as const;

/** Deterministic Job name: a retry of the same attempt gets AlreadyExists, never a duplicate. */
export function jobName(a: Pick<JobAssignment, "runId" | "phase" | "attempt">): string {
  return `drover-${a.runId}-${a.phase}-${a.attempt}`
    .toLowerCase()
    .replace(/[^a-z0-9-]/g, "-")
    .slice(0, 63)
    .replace(/-+$/, "");
}

/** Settings the controller injects into every task pod. */
export interface TaskSettings {
  namespace: string;
  controllerName: string;
  serverUrl: string;
  workerImage: string;
  execLoopPath: string;
  stopAction: string;
  gracePeriodSeconds: number;
  activeDeadlineSeconds: number;
  ttlSecondsAfterFinished: number;
  /**
   * Node-worker mode: the data home every node's worker keeps (a hostPath, at the same path in
   * the worker and in run pods). Unset: each pod carries its own worker container.
   */
  nodeHome?: string | undefined;
  /** The controller's OTLP export, passed to each pod's worker so its spans join the job's trace. */
  otlp?: Pick<OtlpSettings, "endpoint" | "protocol" | "traces" | "metrics"> & Partial<OtlpSettings>;
}

/** A run's own directory under a node's data home (with an empty name: the directory of all runs). */
export function nodeRunDir(nodeHome: string, name: string): string {
  return `${nodeHome.replace(/\/+$/, "")}/runs${name ? `/${name}` : ""}`;
}

/** The node's provider and module caches: filled by its worker, mounted read-only into every run pod of the node. */
export function nodeCacheDir(nodeHome: string): string {
  return `${nodeHome.replace(/\/+$/, "")}/cache`;
}

/**
 * Where a node's worker marks runs ready (an empty file per run). Apart from the run
 * directories, so a run pod's init container waits on it without seeing any run's files.
 */
export function nodeReadyDir(nodeHome: string): string {
  return `${nodeHome.replace(/\/+$/, "")}/ready`;
}

const mounts = {
  exec: { name: "drover-exec", mountPath: "/drover/exec" },
  run: { name: "drover-run", mountPath: "/drover/run" },
  bin: { name: "drover-bin", mountPath: "/drover/bin" },
  secret: { name: "drover-job", mountPath: "/var/run/drover/job", readOnly: true },
};

/**
 * Size limits of the pod's own emptyDirs: the exec-loop's control files, the exec-loop script,
 * and the run directory (configuration, .terraform, providers). A template may declare the
 * `drover-run` emptyDir itself to size it differently.
 */
const emptyDirLimits = { exec: "64Mi", bin: "16Mi", run: "10Gi", cache: "1Gi" };

/**
 * The pod's provider and module cache: the worker fills it, the runner reads it at the same path
 * and can never write it. A template may declare the volume (a claim shared by task pods, or a
 * larger emptyDir) and the worker's mount of it (path, subPath); otherwise a pod-local emptyDir.
 */
const cacheVolume = { name: "drover-cache", mountPath: "/var/lib/drover/cache" };

/** Requests of the init container Drover adds (a copy or a wait loop). */
const initResources = {
  requests: { cpu: "10m", memory: "16Mi", "ephemeral-storage": "16Mi" },
  limits: { memory: "64Mi" },
};

function addMounts(c: V1Container, wanted: V1VolumeMount[]): void {
  c.volumeMounts = [...(c.volumeMounts ?? []).filter((m) => !wanted.some((w) => w.name === m.name)), ...wanted];
}

function setEnv(c: V1Container, values: Record<string, string>): void {
  c.env = [
    ...(c.env ?? []).filter((e) => !(e.name in values)),
    ...Object.entries(values).map(([name, value]) => ({ name, value })),
  ];
}

/**
 * The Job for one claimed job: the AgentTask's jobTemplate plus what Drover needs — labels,
 * anti-eviction annotations, self-limits, the exec-loop copied in by an init container, the
 * shared volumes, and the job Secret mounted into the worker only. No token is in the spec.
 */
export function buildJob(a: JobAssignment, template: V1JobSpec | undefined, s: TaskSettings): V1Job {
  const name = jobName(a);
  const spec: V1JobSpec = structuredClone(template ?? { template: { spec: { containers: [] } } });
  const meta = {
    [labels.runId]: a.runId,
    [labels.workspaceId]: a.workspace.id,
    [labels.phase]: a.phase,
    [labels.controller]: s.controllerName,
    [labels.jobId]: a.jobId,
    [labels.k8sJob]: name,
  };
  const annotations = {
    "cluster-autoscaler.kubernetes.io/safe-to-evict": "false",
    "karpenter.sh/do-not-disrupt": "true",
  };
  spec.backoffLimit = 0;
  spec.activeDeadlineSeconds ??= s.activeDeadlineSeconds;
  spec.ttlSecondsAfterFinished ??= s.ttlSecondsAfterFinished;
  spec.template.metadata = {
    ...spec.template.metadata,
    labels: { ...spec.template.metadata?.labels, ...meta },
    annotations: { ...spec.template.metadata?.annotations, ...annotations },
  };
  const pod = (spec.template.spec ??= { containers: [] });
  pod.restartPolicy = "Never";
  pod.terminationGracePeriodSeconds ??= s.gracePeriodSeconds;
  if (s.nodeHome) return nodeModeJob(name, spec, meta, annotations, s.nodeHome, s);
  const templateRun = pod.volumes?.find((v) => v.name === mounts.run.name && v.emptyDir);
  const volumes: V1Volume[] = [
    { name: mounts.exec.name, emptyDir: { sizeLimit: emptyDirLimits.exec } },
    { name: mounts.run.name, emptyDir: { sizeLimit: emptyDirLimits.run, ...templateRun?.emptyDir } },
    { name: mounts.bin.name, emptyDir: { sizeLimit: emptyDirLimits.bin } },
    { name: mounts.secret.name, secret: { secretName: `${name}-job`, defaultMode: 0o400 } },
  ];
  pod.volumes = [...(pod.volumes ?? []).filter((v) => !volumes.some((w) => w.name === v.name)), ...volumes];

  // A template's drover-init may bring only its image and hardening (securityContext, resources).
  const init: V1Container = pod.initContainers?.find((c) => c.name === "drover-init") ?? { name: "drover-init" };
  init.image ??= s.workerImage;
  init.command ??= [
    "sh",
    "-c",
    `cp "${s.execLoopPath}" /drover/bin/exec-loop.sh && chmod 0755 /drover/bin/exec-loop.sh`,
  ];
  init.resources ??= initResources;
  addMounts(init, [mounts.bin]);
  pod.initContainers = [init, ...(pod.initContainers ?? []).filter((c) => c.name !== "drover-init")];

  let worker = pod.containers.find((c) => c.name === "worker");
  if (!worker) {
    worker = { name: "worker", image: s.workerImage };
    pod.containers.unshift(worker);
  }
  // The image's entrypoint: tini reaps orphaned children, which Node.js as PID 1 would not.
  worker.command ??= ["/usr/bin/tini", "--", "drover"];
  worker.args ??= ["agent", "worker"];
  setEnv(worker, {
    DROVER_URL: s.serverUrl,
    DROVER_EXEC_DIR: mounts.exec.mountPath,
    DROVER_WORKER_RUN_DIR: mounts.run.mountPath,
    DROVER_WORKER_SECRET_DIR: mounts.secret.mountPath,
    DROVER_AGENT_WORKER_ON_STOP_ACTION: s.stopAction,
    DROVER_AGENT_GRACE_PERIOD_SECONDS: String(s.gracePeriodSeconds),
    ...(s.otlp
      ? {
          DROVER_AGENT_OTLP_ENDPOINT: s.otlp.endpoint,
          DROVER_AGENT_OTLP_PROTOCOL: s.otlp.protocol,
          DROVER_AGENT_OTLP_TRACES_ENABLED: String(s.otlp.traces),
          DROVER_AGENT_OTLP_METRICS_ENABLED: String(s.otlp.metrics),
          // The worker exports as the controller does; headers stay out of the Job's spec (they may
          // hold a collector's credentials, which anyone reading Jobs would see).
          ...(s.otlp.metricsIntervalMs === undefined
            ? {}
            : { OTEL_METRIC_EXPORT_INTERVAL: String(s.otlp.metricsIntervalMs) }),
          ...(s.otlp.sampler === undefined
            ? {}
            : { OTEL_TRACES_SAMPLER: s.otlp.sampler, OTEL_TRACES_SAMPLER_ARG: String(s.otlp.samplerRatio ?? 1) }),
          ...(s.otlp.resourceAttributes && Object.keys(s.otlp.resourceAttributes).length > 0
            ? {
                OTEL_RESOURCE_ATTRIBUTES: Object.entries(s.otlp.resourceAttributes)
                  .map(([k, v]) => `${encodeURIComponent(k)}=${encodeURIComponent(v)}`)
                  .join(","),
              }
            : {}),
        }
      : {}),
  });
  if (!pod.volumes.some((v) => v.name === cacheVolume.name))
    pod.volumes.push({ name: cacheVolume.name, emptyDir: { sizeLimit: emptyDirLimits.cache } });
  const cacheMount: V1VolumeMount = {
    ...cacheVolume,
    ...worker.volumeMounts?.find((m) => m.name === cacheVolume.name),
    readOnly: false,
  };
  setEnv(worker, { DROVER_AGENT_CACHE_DIR: cacheMount.mountPath });
  addMounts(worker, [mounts.exec, mounts.run, mounts.secret, cacheMount]);

  let runner = pod.containers.find((c) => c.name === "runner");
  if (!runner) {
    runner = { name: "runner", image: "ghcr.io/drover-dev/drover-runner:latest" };
    pod.containers.push(runner);
  }
  runner.command ??= ["/bin/sh", "/drover/bin/exec-loop.sh"];
  setEnv(runner, { DROVER_EXEC_DIR: mounts.exec.mountPath });
  addMounts(runner, [mounts.exec, mounts.run, { ...mounts.bin, readOnly: true }, { ...cacheMount, readOnly: true }]);

  return {
    apiVersion: "batch/v1",
    kind: "Job",
    metadata: { name, namespace: s.namespace, labels: meta, annotations },
    spec,
  };
}

/**
 * Node-worker mode: the pod holds only the runner. The worker of whichever node it lands on
 * prepares `<home>/runs/<name>` (exec-loop, token-free files) and drives it; the runner sees
 * that one directory — at the same path, so no path is translated — and nothing else of the
 * node. An init container waits until the worker has claimed the directory.
 */
function nodeModeJob(
  name: string,
  spec: V1JobSpec,
  meta: Record<string, string>,
  annotations: Record<string, string>,
  home: string,
  s: TaskSettings,
): V1Job {
  const pod = spec.template.spec!;
  const dir = nodeRunDir(home, name);
  const volume: V1Volume = { name: "drover-home", hostPath: { path: home, type: "Directory" } };
  pod.volumes = [...(pod.volumes ?? []).filter((v) => v.name !== volume.name), volume];
  pod.automountServiceAccountToken = false;
  const init: V1Container = pod.initContainers?.find((c) => c.name === "drover-init") ?? { name: "drover-init" };
  init.image ??= s.workerImage;
  init.resources ??= initResources;
  // The worker marks the run ready once its directory is prepared; a pod no worker picks up
  // fails here. The init container sees only the (empty) ready marks, no run's files.
  const ready = nodeReadyDir(home);
  init.command = [
    "sh",
    "-c",
    `i=0; until [ -f "${ready}/${name}" ]; do i=$((i+1)); [ "$i" -gt 3000 ] && echo "no drover worker on this node prepared ${dir}" >&2 && exit 1; sleep 0.2; done`,
  ];
  addMounts(init, [{ name: volume.name, mountPath: ready, subPath: "ready", readOnly: true }]);
  pod.initContainers = [init, ...(pod.initContainers ?? []).filter((c) => c.name !== "drover-init")];
  pod.containers = pod.containers.filter((c) => c.name !== "worker");
  let runner = pod.containers.find((c) => c.name === "runner");
  if (!runner) {
    runner = { name: "runner", image: "ghcr.io/drover-dev/drover-runner:latest" };
    pod.containers.push(runner);
  }
  runner.command ??= ["/bin/sh", `${dir}/bin/exec-loop.sh`];
  setEnv(runner, { DROVER_EXEC_DIR: `${dir}/exec` });
  // The node's caches, at the path the worker gives runs in their CLI configuration and module links.
  addMounts(runner, [
    { name: volume.name, mountPath: dir, subPath: `runs/${name}` },
    { name: volume.name, mountPath: nodeCacheDir(home), subPath: "cache", readOnly: true },
  ]);
  return {
    apiVersion: "batch/v1",
    kind: "Job",
    metadata: { name, namespace: s.namespace, labels: meta, annotations },
    spec,
  };
}
