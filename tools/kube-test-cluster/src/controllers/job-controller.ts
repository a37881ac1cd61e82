/**
 * batch/v1 Job controller: creates pods from the template (tracked with the
 * `batch.kubernetes.io/job-tracking` finalizer), counts succeeded/failed pods,
 * enforces backoffLimit and activeDeadlineSeconds, sets the Complete/Failed
 * conditions (after a FailureTarget while pods terminate, as Kubernetes >= 1.31 does),
 * counts a deleted pod failed at once or only once it reached Failed (podReplacementPolicy)
 * and deletes finished Jobs after ttlSecondsAfterFinished.
 */
import type { EventRecorder } from "../api/events.js";
import type { ObjectApi } from "../api/object-api.js";
import { matchesLabelSelector } from "../api/selectors.js";
import { StatusError } from "../api/status-error.js";
import type { JsonObject, KObject } from "../api/types.js";
import { isObject, isoNow } from "../api/types.js";
import { WorkQueue } from "./work-queue.js";

export const trackingFinalizer = "batch.kubernetes.io/job-tracking";

export interface JobControllerTimings {
  /** Delay before replacing the first failed pod; doubles per further failure (Kubernetes: 10 s). */
  podBackoffMs: number;
}

interface Condition extends JsonObject {
  type: string;
  status: string;
  reason?: string;
  message?: string;
  lastTransitionTime?: string;
}

function obj(v: unknown): JsonObject {
  return isObject(v) ? v : {};
}

function conditionsOf(status: JsonObject): Condition[] {
  return (Array.isArray(status.conditions) ? status.conditions : []).filter(isObject) as Condition[];
}

function hasCondition(status: JsonObject, type: string): Condition | undefined {
  return conditionsOf(status).find((c) => c.type === type && c.status === "True");
}

function setCondition(status: JsonObject, type: string, reason: string, message: string): void {
  const now = isoNow();
  const conds = conditionsOf(status).filter((c) => c.type !== type);
  conds.push({ type, status: "True", lastProbeTime: now, lastTransitionTime: now, reason, message });
  status.conditions = conds;
}

function podPhase(p: KObject): string {
  return String(obj(p.status).phase ?? "Pending");
}

function isTerminal(p: KObject): boolean {
  return podPhase(p) === "Succeeded" || podPhase(p) === "Failed";
}

export class JobController {
  private readonly queue: WorkQueue;
  private readonly unsubscribe: () => void;
  /** When each Job last saw a pod fail, for the replacement back-off. */
  private readonly lastFailure = new Map<string, number>();
  /** Consecutive refused pod creates per Job: retries back off (doubling, up to 64×) as the real controller's do. */
  private readonly createFailures = new Map<string, { n: number; retryAt: number }>();

  constructor(
    private readonly api: ObjectApi,
    private readonly events: EventRecorder,
    private readonly timings: JobControllerTimings,
    onError: (key: string, e: unknown) => void,
  ) {
    this.queue = new WorkQueue((key) => this.process(key), onError);
    this.unsubscribe = api.store.subscribe((e) => {
      if (e.typeKey === "batch/jobs") {
        if (e.type !== "DELETED")
          this.queue.add(`job|${e.object.metadata.namespace ?? ""}|${e.object.metadata.name ?? ""}`);
        else {
          this.lastFailure.delete(e.object.metadata.uid ?? "");
          this.createFailures.delete(e.object.metadata.uid ?? "");
        }
      } else if (e.typeKey === "/pods") {
        const owner = (e.object.metadata.ownerReferences ?? []).find(
          (r) => r.controller === true && r.kind === "Job" && r.apiVersion === "batch/v1",
        );
        if (owner) this.queue.add(`job|${e.object.metadata.namespace ?? ""}|${owner.name}`);
        if (e.type !== "DELETED" && (e.object.metadata.finalizers ?? []).includes(trackingFinalizer))
          this.queue.add(`pod|${e.object.metadata.namespace ?? ""}|${e.object.metadata.name ?? ""}`);
      }
    });
  }

  private get jobs() {
    return this.api.type("batch", "jobs");
  }

  private get pods() {
    return this.api.type("", "pods");
  }

  private process(key: string): void {
    const [kind, ns = "", name = ""] = key.split("|");
    if (kind === "pod") this.processOrphanPod(ns, name);
    else this.processJob(ns, name);
  }

  /** A tracked pod whose Job is gone (or was orphaned) keeps no finalizer. */
  private processOrphanPod(ns: string, name: string): void {
    const pod = this.api.tryGet(this.pods, ns, name);
    if (!pod || !(pod.metadata.finalizers ?? []).includes(trackingFinalizer)) return;
    const owner = (pod.metadata.ownerReferences ?? []).find((r) => r.controller === true && r.kind === "Job");
    const job = owner && this.api.store.getByUid(owner.uid);
    if (job && !job.object.metadata.deletionTimestamp) return;
    this.dropFinalizer(pod);
  }

  private dropFinalizer(pod: KObject): void {
    this.api.mutate(this.pods, pod.metadata.namespace, pod.metadata.name ?? "", (p) => {
      p.metadata.finalizers = (p.metadata.finalizers ?? []).filter((f) => f !== trackingFinalizer);
    });
  }

  private processJob(ns: string, name: string): void {
    const job = this.api.tryGet(this.jobs, ns, name);
    if (!job) return;
    const uid = job.metadata.uid ?? "";
    const spec = obj(job.spec);
    const status: JsonObject = { ...obj(job.status) };
    const pods = this.api.store.select(
      "/pods",
      ns,
      (p) =>
        (p.metadata.ownerReferences ?? []).some((r) => r.uid === uid && r.controller === true) &&
        matchesLabelSelector(spec.selector, p.metadata.labels ?? {}),
    );
    const now = Date.now();

    // Count finished tracked pods once, releasing their finalizer. As Kubernetes' isPodFailed: a
    // pod being deleted that has not succeeded has failed already (it may never reach Failed: an
    // orphan, a pod on a lost node), unless the Job replaces only pods that reached Failed.
    const onlyFailedPhase = spec.podReplacementPolicy === "Failed" || spec.suspend === true;
    const hasFailed = (p: KObject) =>
      podPhase(p) === "Failed" ||
      (!onlyFailedPhase && Boolean(p.metadata.deletionTimestamp) && podPhase(p) !== "Succeeded");
    let succeeded = Number(status.succeeded ?? 0);
    let failed = Number(status.failed ?? 0);
    for (const p of pods) {
      if (!(p.metadata.finalizers ?? []).includes(trackingFinalizer)) continue;
      if (podPhase(p) === "Succeeded") succeeded++;
      else if (hasFailed(p)) {
        failed++;
        this.lastFailure.set(uid, now);
      } else continue;
      this.dropFinalizer(p);
    }
    if (job.metadata.deletionTimestamp) {
      this.writeStatus(job, { ...status, succeeded, failed });
      return;
    }
    const live = pods.filter((p) => !isTerminal(p));
    const active = live.filter((p) => !p.metadata.deletionTimestamp);
    const terminating = live.filter((p) => p.metadata.deletionTimestamp);
    status.succeeded = succeeded;
    status.failed = failed;

    const finished = hasCondition(status, "Complete") ?? hasCondition(status, "Failed");
    if (finished) {
      this.writeStatus(job, { ...status, active: 0, ready: 0, terminating: terminating.length });
      this.scheduleTtl(job, finished);
      return;
    }
    if (!status.startTime && spec.suspend !== true) status.startTime = isoNow(now);
    const completions = Number(spec.completions ?? 1);
    const parallelism = Number(spec.parallelism ?? 1);
    const backoffLimit = Number(spec.backoffLimit ?? 6);
    const deadline =
      typeof spec.activeDeadlineSeconds === "number" && typeof status.startTime === "string"
        ? Date.parse(status.startTime) + spec.activeDeadlineSeconds * 1000
        : undefined;

    let target = hasCondition(status, "FailureTarget");
    if (!target && failed > backoffLimit) {
      setCondition(status, "FailureTarget", "BackoffLimitExceeded", "Job has reached the specified backoff limit");
      this.events.record(
        "job-controller",
        undefined,
        job,
        "Warning",
        "BackoffLimitExceeded",
        "Job has reached the specified backoff limit",
      );
      target = hasCondition(status, "FailureTarget");
    }
    if (!target && deadline !== undefined && now >= deadline) {
      setCondition(status, "FailureTarget", "DeadlineExceeded", "Job was active longer than specified deadline");
      this.events.record(
        "job-controller",
        undefined,
        job,
        "Warning",
        "DeadlineExceeded",
        "Job was active longer than specified deadline",
      );
      target = hasCondition(status, "FailureTarget");
    }
    if (target) {
      for (const p of active) this.deletePod(job, p);
      if (live.length === 0) setCondition(status, "Failed", target.reason ?? "", target.message ?? "");
      this.writeStatus(job, { ...status, active: 0, ready: 0, terminating: live.length });
      return;
    }
    if (succeeded >= completions) {
      for (const p of active) this.deletePod(job, p);
      setCondition(status, "SuccessCriteriaMet", "CompletionsReached", "Reached expected number of succeeded pods");
      setCondition(status, "Complete", "CompletionsReached", "Reached expected number of succeeded pods");
      status.completionTime = isoNow(now);
      this.events.record("job-controller", undefined, job, "Normal", "Completed", "Job completed");
      this.writeStatus(job, { ...status, active: 0, ready: 0, terminating: terminating.length });
      return;
    }
    if (spec.suspend === true) {
      for (const p of active) this.deletePod(job, p);
      setCondition(status, "Suspended", "JobSuspended", "Job suspended");
      this.writeStatus(job, { ...status, active: 0, ready: 0, terminating: live.length });
      return;
    }
    // podReplacementPolicy Failed: a terminating pod still holds its place until it has failed.
    const holding = spec.podReplacementPolicy === "Failed" ? live.length : active.length;
    const want = Math.min(parallelism, completions - succeeded) - holding;
    let created = 0;
    if (want > 0) {
      const last = this.lastFailure.get(uid);
      const refused = this.createFailures.get(uid);
      const delay = Math.max(
        last === undefined || failed === 0
          ? 0
          : this.timings.podBackoffMs * 2 ** Math.min(failed - 1, 6) - (now - last),
        refused ? refused.retryAt - now : 0,
      );
      if (delay > 0) this.queue.addAfter(`job|${ns}|${name}`, delay);
      else for (let i = 0; i < want; i++) if (this.createPod(job)) created++;
    }
    const ready = active.filter((p) =>
      (Array.isArray(obj(p.status).conditions) ? (obj(p.status).conditions as JsonObject[]) : []).some(
        (c) => c.type === "Ready" && c.status === "True",
      ),
    ).length;
    this.writeStatus(job, { ...status, active: active.length + created, ready, terminating: terminating.length });
    if (deadline !== undefined) this.queue.addAfter(`job|${ns}|${name}`, deadline - now + 5);
  }

  private createPod(job: KObject): boolean {
    const spec = obj(job.spec);
    const template = obj(spec.template);
    const tmeta = obj(template.metadata);
    try {
      const pod = this.api.create(
        this.pods,
        job.metadata.namespace,
        {
          metadata: {
            generateName: `${(job.metadata.name ?? "").slice(0, 57)}-`,
            labels: { ...obj(tmeta.labels) },
            annotations: { ...obj(tmeta.annotations) },
            ownerReferences: [
              {
                apiVersion: "batch/v1",
                kind: "Job",
                name: job.metadata.name ?? "",
                uid: job.metadata.uid ?? "",
                controller: true,
                blockOwnerDeletion: true,
              },
            ],
            finalizers: [trackingFinalizer],
          },
          spec: template.spec,
        },
        { system: true },
      );
      this.events.record(
        "job-controller",
        undefined,
        job,
        "Normal",
        "SuccessfulCreate",
        `Created pod: ${pod.metadata.name ?? ""}`,
      );
      this.createFailures.delete(job.metadata.uid ?? "");
      return true;
    } catch (e) {
      if (!(e instanceof StatusError)) throw e;
      this.events.record("job-controller", undefined, job, "Warning", "FailedCreate", `Error creating: ${e.message}`);
      const n = this.createFailures.get(job.metadata.uid ?? "")?.n ?? 0;
      const delay = this.timings.podBackoffMs * 2 ** Math.min(n, 6);
      this.createFailures.set(job.metadata.uid ?? "", { n: n + 1, retryAt: Date.now() + delay });
      this.queue.addAfter(`job|${job.metadata.namespace ?? ""}|${job.metadata.name ?? ""}`, delay);
      return false;
    }
  }

  private deletePod(job: KObject, pod: KObject): void {
    try {
      this.api.delete(this.pods, pod.metadata.namespace, pod.metadata.name ?? "", { propagationPolicy: "Background" });
      this.events.record(
        "job-controller",
        undefined,
        job,
        "Normal",
        "SuccessfulDelete",
        `Deleted pod: ${pod.metadata.name ?? ""}`,
      );
    } catch (e) {
      if (!(e instanceof StatusError && e.code === 404)) throw e;
    }
  }

  private writeStatus(job: KObject, status: JsonObject): void {
    status.uncountedTerminatedPods = {};
    this.api.mutate(
      this.jobs,
      job.metadata.namespace,
      job.metadata.name ?? "",
      (j) => {
        j.status = status;
      },
      "status",
    );
  }

  /** ttlSecondsAfterFinished: delete (Foreground, like the TTL controller) once it elapses. */
  private scheduleTtl(job: KObject, finished: Condition): void {
    const ttl = obj(job.spec).ttlSecondsAfterFinished;
    if (typeof ttl !== "number" || job.metadata.deletionTimestamp) return;
    const at = Date.parse(finished.lastTransitionTime ?? isoNow()) + ttl * 1000;
    const wait = at - Date.now();
    if (wait > 0) {
      this.queue.addAfter(`job|${job.metadata.namespace ?? ""}|${job.metadata.name ?? ""}`, wait);
      return;
    }
    try {
      this.api.delete(this.jobs, job.metadata.namespace, job.metadata.name ?? "", {
        propagationPolicy: "Foreground",
        preconditions: { uid: job.metadata.uid ?? "" },
      });
    } catch (e) {
      if (!(e instanceof StatusError)) throw e;
    }
  }

  async close(): Promise<void> {
    this.unsubscribe();
    await this.queue.close();
  }
}
