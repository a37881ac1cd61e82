import { noopTracer } from "@drover/runtime";
import type { V1Pod } from "@kubernetes/client-node";
import { eventsAbout, type ControllerContext, type Tracked } from "./controller-context.js";

/** The Kubernetes stages of each job's trace: pod scheduled, image pulled, container started. */
export class StageTrace {
  constructor(private readonly c: ControllerContext) {}

  /**
   * Spans `pod scheduled`, `image pulled` and `container started` of a Job this process
   * created, each once. The pull ends at the kubelet's `Pulled` event for the container (an
   * image already present is pulled at once); without that event, at the container's start.
   */
  async stages(t: Tracked, pod: V1Pod, owner: string): Promise<void> {
    if (t.jobCreatedAt === undefined || this.c.tracer === noopTracer) return;
    const parent = t.assignment.traceparent;
    const attributes = { "k8s.pod.name": pod.metadata?.name ?? "", "k8s.node.name": pod.spec?.nodeName ?? "" };
    const scheduled = pod.status?.conditions?.find((c) => c.type === "PodScheduled" && c.status === "True");
    if (t.scheduledAt === undefined && scheduled) {
      // The API server's times have whole seconds: never before the Job existed.
      t.scheduledAt = Math.max(
        t.jobCreatedAt,
        scheduled.lastTransitionTime ? new Date(scheduled.lastTransitionTime).getTime() : Date.now(),
      );
      this.c.tracer
        .start("pod scheduled", parent, { startTime: t.jobCreatedAt, attributes })
        .end(undefined, undefined, t.scheduledAt);
    }
    const status = pod.status?.containerStatuses?.find((c) => c.name === owner);
    const running = status?.state?.running;
    if (!t.containerTraced && t.scheduledAt !== undefined && running) {
      t.containerTraced = true;
      const at = Math.max(t.scheduledAt, running.startedAt ? new Date(running.startedAt).getTime() : Date.now());
      const pulled = await this.imagePulledAt(pod, owner);
      const pulledAt = Math.min(at, Math.max(t.scheduledAt, pulled ?? at));
      const container = { ...attributes, "k8s.container.name": owner, "container.image.name": status?.image ?? "" };
      this.c.tracer
        .start("image pulled", parent, {
          startTime: t.scheduledAt,
          attributes: { ...container, "drover.k8s.pulled_event": pulled !== undefined },
        })
        .end(undefined, undefined, pulledAt);
      this.c.tracer
        .start("container started", parent, { startTime: pulledAt, attributes: container })
        .end(undefined, undefined, at);
    }
  }

  /** When the kubelet reported `container`'s image pulled (its `Pulled` event), if it did. */
  private async imagePulledAt(pod: V1Pod, container: string): Promise<number | undefined> {
    const name = pod.metadata?.name;
    if (!name) return undefined;
    const times = (await eventsAbout(this.c, name))
      .filter((e) => e.reason === "Pulled" && e.involvedObject.fieldPath === `spec.containers{${container}}`)
      .map((e) => new Date(e.eventTime ?? e.firstTimestamp ?? e.lastTimestamp ?? NaN).getTime())
      .filter((ms) => Number.isFinite(ms));
    return times.length ? Math.min(...times) : undefined;
  }
}
