import type { JobAssignment } from "@drover/protocol";
import type { V1Job, V1JobSpec } from "@kubernetes/client-node";
import { agentVersion } from "../../session/version.js";
import {
  errText,
  queueMaxAttempts,
  status,
  transient,
  type AgentTask,
  type ControllerContext,
} from "./controller-context.js";
import { buildJob, jobName, labels } from "./job-spec.js";
import type { JobWatch } from "./job-watch.js";
import { grantJobSecret } from "./run-access.js";
import { taskSettings } from "./template-check.js";

/** Makes a claimed job's Kubernetes objects: its Job, its token Secret, and in node-worker mode the grant to read it. */
export class Launcher {
  constructor(
    private readonly c: ControllerContext,
    private readonly watch: JobWatch,
  ) {}

  /**
   * The AgentTask's Job template: from the watch's cache when it is current and holds it,
   * else read from the API (before the first list, while a watch resumes, or an AgentTask
   * created a moment ago).
   */
  private async template(): Promise<V1JobSpec | undefined> {
    const name = this.c.config.kubernetesTaskTemplate;
    if (!name) return undefined;
    const cache = this.c.informers.find((i) => i.name === "agenttasks")?.informer;
    const cached = cache?.synced ? (cache.get(name, this.c.settings.namespace) as AgentTask | undefined) : undefined;
    if (cached) return cached.spec?.jobTemplate;
    const task = (await this.c.custom.getNamespacedCustomObject({
      group: "drover.dev",
      version: "v1alpha1",
      namespace: this.c.settings.namespace,
      plural: "agenttasks",
      name,
    })) as AgentTask;
    return task.spec?.jobTemplate;
  }

  /**
   * Creates the Job (deterministic name) and then its token Secret, owned by the Job. Both tolerate
   * "already exists", so a launch whose API call went unanswered (a deadline, a 5xx) is thrown back to
   * the queue to run again (`attempt` counts from 1); other failures, or the last attempt's, are reported.
   */
  async launch(a: JobAssignment, attempt: number): Promise<void> {
    const settings = taskSettings(this.c.config, this.c.settings);
    const name = jobName(a);
    try {
      const body = buildJob(a, await this.template(), settings);
      let created: V1Job;
      let createdNow = true;
      try {
        created = await this.c.batch.createNamespacedJob({ namespace: this.c.settings.namespace, body });
      } catch (err) {
        createdNow = false;
        // An earlier attempt's create went through and only its answer was lost: that create
        // launched the Job, so it is counted and traced here as one.
        if (status(err) !== 409) throw err;
        created = await this.c.batch.readNamespacedJob({ name, namespace: this.c.settings.namespace });
      }
      // Once per Job: a launch retried after its Secret's answer was lost meets its own Job here again.
      const t = this.c.tracked.get(name);
      if (!t || t.jobCreatedAt === undefined) {
        this.c.metrics.inc("drover_controller_jobs_launched_total");
        if (t) {
          // A create answered now, or one whose answer was lost: then the Job's own creation time (whole seconds).
          const stamp = created.metadata?.creationTimestamp;
          t.jobCreatedAt = Math.max(t.since, stamp && !createdNow ? new Date(stamp).getTime() : Date.now());
          this.c.tracer
            .start("kubernetes job created", a.traceparent, {
              startTime: t.since,
              attributes: { "k8s.job.name": name },
            })
            .end(undefined, undefined, t.jobCreatedAt);
        }
      }
      const { jobToken, ...rest } = a;
      try {
        await this.c.core.createNamespacedSecret({
          namespace: this.c.settings.namespace,
          body: {
            metadata: {
              name: `${name}-job`,
              labels: { [labels.controller]: this.c.config.name, [labels.k8sJob]: name },
              // No blockOwnerDeletion: setting it needs `update` on jobs/finalizers under the
              // OwnerReferencesPermissionEnforcement admission plugin, and nothing waits on the Secret.
              ownerReferences: [
                { apiVersion: "batch/v1", kind: "Job", name, uid: created.metadata?.uid ?? "", controller: true },
              ],
            },
            type: "Opaque",
            // The server URL rides along for node workers, which hold no pool token to read it from.
            // So is this controller's version, which a node worker compares with its own (versionSkew).
            stringData: {
              token: jobToken,
              "assignment.json": JSON.stringify(rest),
              url: this.c.config.url,
              version: agentVersion,
            },
          },
        });
      } catch (err) {
        if (status(err) !== 409) throw err;
      }
      if (this.c.settings.nodeHome && this.c.settings.nodeWorkerServiceAccount) {
        await grantJobSecret(this.c.rbac, {
          namespace: this.c.settings.namespace,
          jobName: name,
          secretName: `${name}-job`,
          serviceAccount: this.c.settings.nodeWorkerServiceAccount,
          owner: { apiVersion: "batch/v1", kind: "Job", name, uid: created.metadata?.uid ?? "", controller: true },
          labels: { [labels.controller]: this.c.config.name, [labels.k8sJob]: name },
        });
      }
      this.c.log.info({ job: a.jobId, run: a.runId, phase: a.phase, k8sJob: name }, "launched Job");
    } catch (err) {
      if (transient(err) && attempt < queueMaxAttempts) throw err;
      this.c.log.error({ job: a.jobId, err: errText(err) }, "could not create the Job");
      this.c.countError("job_create");
      // Queued behind this launch (same key), so a server that cannot be told is retried without launching again.
      // errText names the object refused (the Job, its Secret, the Role granting it) and the API's reason.
      const reason = `could not launch the Kubernetes Job ${name}: ${errText(err)}`;
      const reporting = this.c.queue.add(name, () => this.watch.report(name, reason, "job_create_failed"), {
        keepOnStop: true,
      });
      this.c.launching.add(reporting);
      void reporting.finally(() => this.c.launching.delete(reporting));
    }
  }
}
