import { SettingsSource } from "@drover/protocol";
import type { FailureTimings } from "./pod-failures.js";
import { podNamespace } from "./settings.js";

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
