import { SettingsSource, type LogFormat, messageOf } from "@drover/protocol";
import { readFileSync, watch, type FSWatcher } from "node:fs";
import { request } from "node:https";
import { dirname, join } from "node:path";
import type { Logger } from "pino";
import type { AgentStatus } from "./agent-status.js";
import { kubeApiError } from "./api-errors.js";

/*
 * Scale-in that never picks a busy agent. The agent writes how many jobs it runs to a status
 * file on a volume it shares with the `pod-annotator` sidecar; the sidecar holds the pod's
 * ServiceAccount token (the agent container, and so every run, does not) and patches its own
 * pod: a busy pod gets a pod-deletion-cost above idle ones (the ReplicaSet controller deletes
 * the cheapest first) and the cluster-autoscaler / Karpenter annotations that keep its node
 * from being drained; an idle pod gets them removed.
 */

/** Annotations that mark a pod busy; an idle pod has them removed (null in a merge patch). */
export const busyAnnotations = {
  deletionCost: "controller.kubernetes.io/pod-deletion-cost",
  safeToEvict: "cluster-autoscaler.kubernetes.io/safe-to-evict",
  doNotDisrupt: "karpenter.sh/do-not-disrupt",
  busy: "drover.dev/agent-busy",
} as const;

/** The merge patch of a pod whose agent runs `runningJobs` jobs. */
export function annotationPatch(runningJobs: number): { metadata: { annotations: Record<string, string | null> } } {
  const busy = runningJobs > 0;
  return {
    metadata: {
      annotations: {
        // More jobs, dearer to delete: among busy pods the least loaded goes first.
        [busyAnnotations.deletionCost]: busy ? String(1000 * runningJobs) : null,
        [busyAnnotations.safeToEvict]: busy ? "false" : null,
        [busyAnnotations.doNotDisrupt]: busy ? "true" : null,
        [busyAnnotations.busy]: busy ? "true" : "false",
      },
    },
  };
}

/** Settings of `drover agent pod-annotator`; durations in milliseconds. */
export interface PodAnnotatorSettings {
  statusFile: string;
  podName: string;
  namespace: string;
  /** Kubernetes API base URL (https://host:port). */
  apiUrl: string;
  /** Directory holding the ServiceAccount's `token` and `ca.crt`. */
  serviceAccountDir: string;
  /** How often the status is re-read even without a file event (and a failed patch retried). */
  recheckMs: number;
  logFormat: LogFormat;
}

/** Reads the annotator's settings; a missing or bad one throws one clear line. */
export function loadPodAnnotatorSettings(env: NodeJS.ProcessEnv): PodAnnotatorSettings {
  const src = new SettingsSource(env);
  const host = src.require("KUBERNETES_SERVICE_HOST", "the pod annotator runs in a Kubernetes pod only");
  const port = src.get("KUBERNETES_SERVICE_PORT");
  const why = "the chart sets it from the downward API";
  return {
    statusFile: src.require(
      "DROVER_AGENT_STATUS_FILE",
      "the agent's status file, on a volume the agent container shares",
    ),
    podName: src.require("DROVER_AGENT_POD_NAME", why),
    namespace: src.require("DROVER_AGENT_POD_NAMESPACE", why),
    apiUrl: `https://${host.includes(":") ? `[${host}]` : host}:${port}`,
    serviceAccountDir: "/var/run/secrets/kubernetes.io/serviceaccount",
    recheckMs: 5_000,
    logFormat: src.get("DROVER_AGENT_LOG_FORMAT"),
  };
}

function readStatus(path: string): AgentStatus | undefined {
  try {
    const parsed = JSON.parse(readFileSync(path, "utf8")) as Partial<AgentStatus>;
    return typeof parsed.runningJobs === "number"
      ? { runningJobs: parsed.runningJobs, state: String(parsed.state ?? "") }
      : undefined;
  } catch {
    return undefined; // not written yet
  }
}

/** One merge patch of the pod; rejects with the API server's answer on a non-2xx status. */
function patchPod(s: PodAnnotatorSettings, body: unknown, signal: AbortSignal): Promise<void> {
  // Read each time: the kubelet rotates the projected token.
  const token = readFileSync(join(s.serviceAccountDir, "token"), "utf8").trim();
  const ca = readFileSync(join(s.serviceAccountDir, "ca.crt"), "utf8");
  const text = JSON.stringify(body);
  const url = new URL(
    `/api/v1/namespaces/${encodeURIComponent(s.namespace)}/pods/${encodeURIComponent(s.podName)}`,
    s.apiUrl,
  );
  return new Promise((resolve, reject) => {
    const req = request(
      url,
      {
        method: "PATCH",
        ca,
        signal: AbortSignal.any([signal, AbortSignal.timeout(30_000)]),
        headers: {
          authorization: `Bearer ${token}`,
          "content-type": "application/merge-patch+json",
          "content-length": String(Buffer.byteLength(text)),
          accept: "application/json",
        },
      },
      (res) => {
        const chunks: Buffer[] = [];
        res.on("data", (c: Buffer) => chunks.push(c));
        res.on("end", () => {
          const status = res.statusCode ?? 0;
          if (status >= 200 && status < 300) return resolve();
          // The Status body's reason and message, named after the pod (as every Kubernetes API error of Drover's).
          reject(
            kubeApiError(`patch Pod ${JSON.stringify(s.podName)} in namespace ${JSON.stringify(s.namespace)}`, {
              code: status,
              body: Buffer.concat(chunks).toString("utf8"),
            }),
          );
        });
        res.on("error", reject);
      },
    );
    req.on("error", reject);
    req.end(text);
  });
}

/**
 * Keeps the pod's annotations in step with the agent's status file until `signal` aborts.
 * Resolves 0 when stopped.
 */
export async function runPodAnnotator(s: PodAnnotatorSettings, log: Logger, signal: AbortSignal): Promise<number> {
  let applied: number | undefined; // running jobs the pod's annotations show (busy ones by count)
  let wake: (() => void) | undefined;
  // Set by every file event: one arriving while a patch is in flight is not lost.
  let dirty = false;
  const poke = () => {
    dirty = true;
    wake?.();
  };
  let watcher: FSWatcher | undefined;
  try {
    watcher = watch(dirname(s.statusFile), poke);
  } catch (err) {
    log.warn({ err: messageOf(err) }, "cannot watch the status file's directory; re-reading it periodically only");
  }
  signal.addEventListener("abort", poke, { once: true });
  try {
    while (!signal.aborted) {
      dirty = false;
      const status = readStatus(s.statusFile);
      const want = status?.runningJobs ?? 0;
      if (want !== applied) {
        try {
          await patchPod(s, annotationPatch(want), signal);
          log.info({ pod: s.podName, runningJobs: want, busy: want > 0 }, "pod annotations updated");
          applied = want;
        } catch (err) {
          if (signal.aborted) break;
          log.warn({ err: messageOf(err) }, "could not annotate the pod; retrying");
        }
      }
      if (dirty) continue;
      await new Promise<void>((resolve) => {
        // Not unref'd: this timer is what keeps the annotator alive when no watch could start.
        const timer = setTimeout(resolve, s.recheckMs);
        wake = () => {
          clearTimeout(timer);
          resolve();
        };
      });
      wake = undefined;
    }
  } finally {
    watcher?.close();
  }
  return 0;
}
