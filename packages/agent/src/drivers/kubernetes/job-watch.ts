import { DroverError, jobAssignmentSchema } from "@drover/protocol";
import type { V1Job, V1Pod } from "@kubernetes/client-node";
import { pause } from "../../session/backoff.js";
import { NetworkError } from "../../session/client.js";
import { errText, finished, jobEvents, status, type ControllerContext, type Tracked } from "./controller-context.js";
import { labels } from "./job-spec.js";
import { describePodFailure, type PodFailureReason } from "./pod-failures.js";
import { StageTrace } from "./stage-trace.js";

const genericReportDelayMs = 2_000;

/**
 * What happens to a launched Job until it is done: its Job and pod events, the sweeps that
 * catch what no event says (a pod pending too long, a Job deleted unseen), and the report of a
 * pod-level failure into the run, after which the Job is deleted.
 */
export class JobWatch {
  private readonly trace: StageTrace;

  constructor(private readonly c: ControllerContext) {
    this.trace = new StageTrace(c);
  }

  async onJob(type: string, job: V1Job): Promise<void> {
    const name = job.metadata?.name ?? "";
    const t = this.c.tracked.get(name);
    if (!t) return;
    if (type === "DELETED" && !t.deleting && !t.started && !t.reported) {
      await this.report(name, `the Kubernetes Job ${name} was deleted before its worker started`, "job_deleted");
      return;
    }
    if (type === "DELETED" || finished(job)) {
      const failed = job.status?.conditions?.find((c) => c.type === "Failed" && c.status === "True");
      if (failed && !t.reported && !t.started) {
        await this.reportJobWithoutWorker(t, failed.reason ?? "Failed", failed.message ?? "");
        return;
      }
      this.untrack(name);
    }
  }

  untrack(name: string): void {
    if (this.c.tracked.delete(name)) this.c.wake();
  }

  private async reportJobWithoutWorker(t: Tracked, reason: string, message: string): Promise<void> {
    let detail = `${reason}${message ? `: ${message}` : ""}`;
    if (!t.podSeen) {
      const lines = await jobEvents(this.c, t.name);
      detail = `the Job ended without a pod (${detail})${lines.length ? `; events: ${lines.join("; ")}` : ""}`;
    }
    await this.report(t.name, detail, t.podSeen ? "job_failed" : "no_pod");
  }

  async onPod(type: string, pod: V1Pod): Promise<void> {
    if (type === "DELETED") return;
    const name = pod.metadata?.labels?.[labels.k8sJob] ?? "";
    const t = this.c.tracked.get(name);
    if (!t) return;
    t.podSeen = true;
    t.lastPod = pod;
    // The worker owns the run once it runs; in node-worker mode, once the runner it prepared does.
    const owner = this.c.settings.nodeHome ? "runner" : "worker";
    if (pod.status?.containerStatuses?.some((c) => c.name === owner && (c.state?.running || c.state?.terminated)))
      t.started = true;
    if (
      t.jobCreatedAt !== undefined &&
      !t.startupMeasured &&
      pod.status?.containerStatuses?.some((c) => c.name === owner && c.state?.running)
    ) {
      t.startupMeasured = true;
      this.c.metrics.observe(
        "drover_controller_job_startup_latency_seconds",
        Math.max(0, Date.now() - t.jobCreatedAt) / 1000,
      );
    }
    await this.check(t, Date.now());
    // Tracing reads events (an API call): it must not hold up this Job's failure reports or later events.
    void this.trace
      .stages(t, pod, owner)
      .catch((err: unknown) =>
        this.c.log.debug({ k8sJob: name, err: errText(err) }, "tracing the Kubernetes stages failed"),
      );
  }

  /** Reports the pod's failure, if it has one by `now`; a generic one after a second look. */
  private async check(t: Tracked, now: number): Promise<void> {
    const pod = t.lastPod;
    if (!pod || t.reported) return;
    const failure = describePodFailure(pod, now, this.c.settings.timings);
    if (!failure) return;
    if (!failure.generic) {
      await this.report(t.name, failure.message, failure.reason);
      return;
    }
    // Containers die a moment before the kubelet records why (eviction, OOM): look again
    // shortly and report the most specific reason known by then.
    if (t.pendingGeneric) return;
    t.pendingGeneric = true;
    setTimeout(() => {
      void this.c.queue.add(t.name, async () => {
        t.pendingGeneric = false;
        const latest = t.lastPod ? describePodFailure(t.lastPod, Date.now(), this.c.settings.timings) : undefined;
        await this.report(t.name, (latest ?? failure).message, (latest ?? failure).reason);
      });
    }, genericReportDelayMs).unref();
  }

  /**
   * Time-driven failures: every sweep interval, each in-flight Job is checked again without
   * waiting for an event — a pod pending past the timeout (Unschedulable), an image pull past
   * its grace, a Job that never got a pod (refused by admission: FailedCreate), and a Job that
   * vanished while no watch was looking.
   */
  async sweepLoop(): Promise<void> {
    while (!this.c.stop.signal.aborted) {
      await pause(this.c.settings.sweepIntervalMs, this.c.stop.signal);
      if (this.c.stop.signal.aborted) return;
      await this.sweep(Date.now()).catch((err: unknown) => this.c.log.warn({ err: errText(err) }, "sweep failed"));
    }
  }

  private async sweep(now: number): Promise<void> {
    await Promise.all([...this.c.tracked.values()].map((t) => this.c.queue.add(t.name, () => this.sweepOne(t, now))));
  }

  private async sweepOne(t: Tracked, now: number): Promise<void> {
    if (t.reported || t.deleting || this.c.tracked.get(t.name) !== t) return;
    const jobs = this.c.informers.find((i) => i.name === "jobs");
    if (
      jobs?.informer.synced &&
      !jobs.informer.get(t.name, this.c.settings.namespace) &&
      now - t.since > 2 * this.c.settings.sweepIntervalMs
    ) {
      // Not in the cache long after launch: ask once; a 404 means it was deleted unseen.
      const gone = await this.c.batch.readNamespacedJob({ name: t.name, namespace: this.c.settings.namespace }).then(
        () => false,
        (err: unknown) => status(err) === 404,
      );
      if (gone) {
        if (t.started) this.untrack(t.name);
        else
          await this.report(
            t.name,
            `the Kubernetes Job ${t.name} was deleted before its worker started`,
            "job_deleted",
          );
        return;
      }
    }
    if (t.started) return;
    if (t.lastPod) {
      await this.check(t, now);
      return;
    }
    if (now - t.since > this.c.settings.timings.podPendingTimeoutMs) {
      const lines = await jobEvents(this.c, t.name);
      const refused = lines.filter((l) => l.startsWith("FailedCreate"));
      const why = refused.length ? refused.slice(-1)[0]! : lines.length ? `events: ${lines.join("; ")}` : "no events";
      await this.report(
        t.name,
        `the Kubernetes Job ${t.name} created no pod within ${Math.round(this.c.settings.timings.podPendingTimeoutMs / 1000)} s (${why})`,
        "no_pod",
      );
    }
  }

  /**
   * Reports a pod-level failure into the run's log once and ends the job errored, then deletes
   * the Job so nothing lingers (a worker that already finished the job wins: its outcome stands).
   */
  async report(name: string, reason: string, kind: PodFailureReason): Promise<void> {
    const t = this.c.tracked.get(name);
    if (!t || t.reported) return;
    t.reported = true;
    const job = this.c.client.job(t.assignment.jobId, t.assignment.jobToken);
    const line = Buffer.from(`\n[drover] ${reason}\n`, "utf8");
    try {
      // Append at the log's end: ask with an offset past it, the server answers where it is.
      let offset = Number.MAX_SAFE_INTEGER;
      for (let i = 0; i < 3 && !t.logged; i++) {
        try {
          await job.appendLog(offset, line);
          t.logged = true;
        } catch (err) {
          // A conflict is the worker's output landing at the offset just learnt: both say where the log ends now.
          const moved = err instanceof DroverError && (err.code === "log_gap" || err.code === "log_conflict");
          if (moved) offset = Number(err.details?.expectedOffset);
          else throw err;
        }
      }
      await job.finish("errored", reason);
      this.c.log.warn({ job: t.assignment.jobId, reason }, "reported a pod failure");
    } catch (err) {
      // The server unreachable: not reported yet. The Job stays so the work queue (then the next sweep,
      // or the next controller's) tries again — also while stopping, where the queue still runs kept work.
      if (err instanceof NetworkError) {
        t.reported = false;
        this.c.countError("pod_failure_report");
        throw err;
      }
      this.c.log.info(
        { job: t.assignment.jobId, err: errText(err) },
        "pod failure not reported: the job had already ended",
      );
    }
    this.c.metrics.inc("drover_controller_pod_failures_total", { reason: kind });
    await this.deleteJob(name);
  }

  async deleteJob(name: string): Promise<void> {
    const t = this.c.tracked.get(name);
    if (t) t.deleting = true;
    try {
      await this.c.batch.deleteNamespacedJob({
        name,
        namespace: this.c.settings.namespace,
        propagationPolicy: "Background",
        gracePeriodSeconds: 0,
      });
    } catch (err) {
      if (status(err) !== 404) this.c.log.warn({ job: name, err: errText(err) }, "could not delete the Job");
    }
    this.untrack(name);
  }

  /** In-flight count and tokens from the cluster: unfinished Jobs with this controller's label. */
  async adopt(selector: string): Promise<void> {
    const jobs = await this.c.batch.listNamespacedJob({
      namespace: this.c.settings.namespace,
      labelSelector: selector,
    });
    for (const job of jobs.items) {
      const name = job.metadata?.name;
      if (!name || finished(job) || this.c.tracked.has(name)) continue;
      try {
        const secret = await this.c.core.readNamespacedSecret({
          name: `${name}-job`,
          namespace: this.c.settings.namespace,
        });
        const data = secret.data ?? {};
        const token = Buffer.from(data.token ?? "", "base64").toString("utf8");
        const assignment = jobAssignmentSchema.parse({
          ...JSON.parse(Buffer.from(data["assignment.json"] ?? "", "base64").toString("utf8")),
          jobToken: token,
        });
        this.c.tracked.set(name, {
          name,
          assignment,
          started: false,
          reported: false,
          podSeen: false,
          since: Date.now(),
        });
      } catch (err) {
        this.c.log.warn(
          { job: name, err: errText(err) },
          "cannot read the job Secret of a running Job; leaving it to its worker",
        );
      }
    }
    this.c.log.info({ inFlight: this.c.tracked.size }, "rebuilt in-flight Jobs from the cluster");
  }
}
