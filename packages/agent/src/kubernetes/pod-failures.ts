import type { V1Pod } from "@kubernetes/client-node";

/** How long some pod conditions may last before they count as failures. */
export interface FailureTimings {
  imagePullGraceMs: number;
  podPendingTimeoutMs: number;
}

const pullReasons = new Set(["ErrImagePull", "ImagePullBackOff", "CreateContainerError", "CreateContainerConfigError", "RunContainerError"]);

/** Why a task pod failed; `generic` when a more specific reason may still be recorded. */
export interface PodFailure {
  message: string;
  generic: boolean;
}

/**
 * A one-line description of why a task pod failed, or undefined while it is healthy (or
 * still within a grace period). Specific reasons first; the caller reports it once.
 */
export function describePodFailure(pod: V1Pod, now: number, t: FailureTimings): PodFailure | undefined {
  const reason = podFailureReason(pod, now, t);
  if (!reason) return undefined;
  return { message: reason, generic: reason.startsWith("the worker container exited") };
}

function podFailureReason(pod: V1Pod, now: number, t: FailureTimings): string | undefined {
  const status = pod.status;
  if (!status) return undefined;
  const name = pod.metadata?.name ?? "?";
  const created = pod.metadata?.creationTimestamp ? new Date(pod.metadata.creationTimestamp).getTime() : now;
  const age = now - created;
  const disruption = status.conditions?.find((c) => c.type === "DisruptionTarget" && c.status === "True");
  if (status.reason === "Evicted" || disruption) {
    return `pod ${name} was evicted${status.message ? `: ${status.message}` : disruption?.message ? `: ${disruption.message}` : ""}`;
  }
  const all = [...(status.initContainerStatuses ?? []).map((c) => ({ ...c, init: true })), ...(status.containerStatuses ?? []).map((c) => ({ ...c, init: false }))];
  for (const c of all) {
    const waiting = c.state?.waiting;
    if (waiting?.reason === "InvalidImageName") return `container ${c.name}: invalid image name ${JSON.stringify(c.image)}${waiting.message ? ` (${waiting.message})` : ""}`;
    if (waiting?.reason && pullReasons.has(waiting.reason) && age > t.imagePullGraceMs) {
      return `container ${c.name}: ${waiting.reason} for image ${JSON.stringify(c.image)}${waiting.message ? `: ${waiting.message}` : ""}`;
    }
    const term = c.state?.terminated;
    if (term?.reason === "OOMKilled") return `container ${c.name} was OOMKilled (exit code ${term.exitCode}): raise its memory limit`;
    if (c.init && term && term.exitCode !== 0) return `init container ${c.name} failed with exit code ${term.exitCode}${term.message ? `: ${term.message}` : ""}`;
    if (waiting?.reason === "CrashLoopBackOff") return `container ${c.name} is crash-looping`;
    if (!c.init && c.name === "worker" && term && term.exitCode !== 0) return `the worker container exited with code ${term.exitCode}${term.reason ? ` (${term.reason})` : ""}`;
  }
  if (status.phase === "Pending" && age > t.podPendingTimeoutMs) {
    const why = status.conditions?.filter((c) => c.status !== "True").map((c) => `${c.type}: ${c.reason ?? ""} ${c.message ?? ""}`.trim());
    return `pod ${name} was pending for more than ${Math.round(t.podPendingTimeoutMs / 1000)} s${why?.length ? ` (${why.join("; ")})` : ""}`;
  }
  return undefined;
}
