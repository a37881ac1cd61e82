import type {
  BatchV1Api,
  CoreV1Api,
  CoreV1Event,
  CustomObjectsApi,
  KubernetesObject,
  RbacAuthorizationV1Api,
  V1Job,
  V1JobSpec,
  V1Pod,
} from "@kubernetes/client-node";
import type { JobAssignment } from "@drover/protocol";
import type { RunTracer } from "@drover/runtime";
import type { Logger } from "pino";
import type { AgentClient } from "../../session/client.js";
import type { AgentConfig } from "../../config.js";
import type { ErrorKind, MetricSet } from "../../metrics.js";
import { KubeApiError } from "./api-errors.js";
import type { ControllerSettings } from "./controller-settings.js";
import type { Informer } from "./informer.js";
import type { KeyedWorkQueue } from "./work-queue.js";

/** The part of an AgentTask the controller reads. */
export interface AgentTask extends KubernetesObject {
  spec?: { jobTemplate?: V1JobSpec };
}

/** A Job this controller launched and still watches. */
export interface Tracked {
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

/** Attempts of one Job's event handling (e.g. the server unreachable while reporting) before it waits for the next sweep. */
export const queueMaxAttempts = 5;

/** What the controller's parts (launch, watch, template check, tracing) share. */
export interface ControllerContext {
  config: AgentConfig;
  settings: ControllerSettings;
  log: Logger;
  batch: BatchV1Api;
  core: CoreV1Api;
  rbac: RbacAuthorizationV1Api;
  custom: CustomObjectsApi;
  client: AgentClient;
  /** The Jobs in flight, by name. */
  tracked: Map<string, Tracked>;
  /** Everything done to one Job — launch, its Job and pod events, sweeps, reports, deletion — runs through here, one at a time per Job. */
  queue: KeyedWorkQueue;
  metrics: MetricSet;
  /** Spans of the Kubernetes stages of each job's trace (no-op without an OTLP endpoint). */
  tracer: RunTracer;
  stop: AbortController;
  informers: { name: string; informer: Informer<KubernetesObject> }[];
  /** Launches (and their failure reports) started by the poll loop and not finished yet. */
  launching: Set<Promise<void>>;
  countError(kind: ErrorKind): void;
  /** A Job left the in-flight set: there may be room for another. */
  wake(): void;
}

/** The events about the object `name` (a Job or a pod) in this namespace; none when they cannot be listed. */
export async function eventsAbout(c: ControllerContext, name: string): Promise<CoreV1Event[]> {
  const events = await c.core
    .listNamespacedEvent({ namespace: c.settings.namespace, fieldSelector: `involvedObject.name=${name}` })
    .catch(() => ({ items: [] as CoreV1Event[] }));
  return events.items;
}

/** The Job's latest events as `Reason: message` lines (FailedCreate says why no pod exists). */
export async function jobEvents(c: ControllerContext, name: string): Promise<string[]> {
  return (await eventsAbout(c, name)).map((e) => `${e.reason ?? ""}: ${e.message ?? ""}`).slice(-5);
}

export function finished(job: V1Job): boolean {
  return (job.status?.conditions ?? []).some(
    (c) => (c.type === "Complete" || c.type === "Failed") && c.status === "True",
  );
}

export function status(err: unknown): number | undefined {
  const e = err as { code?: unknown; statusCode?: unknown; body?: unknown };
  if (typeof e.code === "number") return e.code;
  if (typeof e.statusCode === "number") return e.statusCode;
  return undefined;
}

/** An API call that got no answer, or a server-side or throttling one: worth trying again. */
export function transient(err: unknown): boolean {
  return err instanceof KubeApiError && (err.code === undefined || err.code >= 500 || err.code === 429);
}

export function errText(err: unknown): string {
  if (err instanceof Error) return err.message.split("\n")[0] ?? err.message;
  return String(err);
}
