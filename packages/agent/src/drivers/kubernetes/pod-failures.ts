import type { V1Pod } from "@kubernetes/client-node";

/** How long some pod conditions may last before they count as failures. */
export interface FailureTimings {
  imagePullGraceMs: number;
  podPendingTimeoutMs: number;
}

const pullReasons = new Set([
  "ErrImagePull",
  "ImagePullBackOff",
  "CreateContainerError",
  "CreateContainerConfigError",
  "RunContainerError",
]);

/**
 * Categories of run failures the controller reports (the `reason` label of
 * drover_controller_pod_failures_total): a closed set, so the label stays low-cardinality.
 */
export type PodFailureReason =
  | "evicted"
  | "invalid_image"
  | "image_pull"
  | "create_container"
  | "oom_killed"
  | "init_failed"
  | "crash_loop"
  | "worker_exited"
  | "pending_timeout"
  | "job_failed"
  | "no_pod"
  | "job_deleted"
  | "job_create_failed";

/** Why a task pod failed; `generic` when a more specific reason may still be recorded. */
export interface PodFailure {
  message: string;
  reason: PodFailureReason;
  generic: boolean;
}

/**
 * A one-line description of why a task pod failed, or undefined while it is healthy (or
 * still within a grace period). Specific reasons first; the caller reports it once.
 */
export function describePodFailure(pod: V1Pod, now: number, t: FailureTimings): PodFailure | undefined {
  const failure = podFailureReason(pod, now, t);
  if (!failure) return undefined;
  return { message: failure[1], reason: failure[0], generic: failure[0] === "worker_exited" };
}

function podFailureReason(pod: V1Pod, now: number, t: FailureTimings): [PodFailureReason, string] | undefined {
  const status = pod.status;
  if (!status) return undefined;
  const name = pod.metadata?.name ?? "?";
  const created = pod.metadata?.creationTimestamp ? new Date(pod.metadata.creationTimestamp).getTime() : now;
  const age = now - created;
  const disruption = status.conditions?.find((c) => c.type === "DisruptionTarget" && c.status === "True");
  if (status.reason === "Evicted" || disruption) {
    return [
      "evicted",
      `pod ${name} was evicted${status.message ? `: ${status.message}` : disruption?.message ? `: ${disruption.message}` : ""}`,
    ];
  }
  // A native sidecar (restartPolicy Always) is stopped when the pod's containers end: its exit code is no failure.
  const sidecars = new Set(
    (pod.spec?.initContainers ?? []).filter((c) => c.restartPolicy === "Always").map((c) => c.name),
  );
  const all = [
    ...(status.initContainerStatuses ?? []).map((c) => ({ ...c, init: !sidecars.has(c.name) })),
    ...(status.containerStatuses ?? []).map((c) => ({ ...c, init: false })),
  ];
  for (const c of all) {
    const waiting = c.state?.waiting;
    if (waiting?.reason === "InvalidImageName")
      return [
        "invalid_image",
        `container ${c.name}: invalid image name ${JSON.stringify(c.image)}${waiting.message ? ` (${waiting.message})` : ""}`,
      ];
    if (waiting?.reason && pullReasons.has(waiting.reason) && age > t.imagePullGraceMs) {
      return [
        waiting.reason.startsWith("Create") || waiting.reason === "RunContainerError"
          ? "create_container"
          : "image_pull",
        `container ${c.name}: ${waiting.reason} for image ${JSON.stringify(c.image)}${waiting.message ? `: ${waiting.message}` : ""}`,
      ];
    }
    const term = c.state?.terminated;
    if (term?.reason === "OOMKilled")
      return ["oom_killed", `container ${c.name} was OOMKilled (exit code ${term.exitCode}): raise its memory limit`];
    if (c.init && term && term.exitCode !== 0)
      return [
        "init_failed",
        `init container ${c.name} failed with exit code ${term.exitCode}${term.message ? `: ${term.message}` : ""}`,
      ];
    if (waiting?.reason === "CrashLoopBackOff") return ["crash_loop", `container ${c.name} is crash-looping`];
    if (!c.init && c.name === "worker" && term && term.exitCode !== 0)
      return [
        "worker_exited",
        `the worker container exited with code ${term.exitCode}${term.reason ? ` (${term.reason})` : ""}`,
      ];
  }
  if (status.phase === "Pending" && age > t.podPendingTimeoutMs) {
    const why = status.conditions
      ?.filter((c) => c.status !== "True")
      .map((c) => `${c.type}: ${c.reason ?? ""} ${c.message ?? ""}`.trim());
    return [
      "pending_timeout",
      `pod ${name} was pending for more than ${Math.round(t.podPendingTimeoutMs / 1000)} s${why?.length ? ` (${why.join("; ")})` : ""}`,
    ];
  }
  return undefined;
}
