/**
 * apps/v1 Deployment controller, reduced to what installing a chart needs: keeps
 * `spec.replicas` live pods from the template (owned by the Deployment, so deleting it
 * garbage-collects them; no ReplicaSets). Pods carry `pod-template-hash`; a changed
 * template rolls out (RollingUpdate: one extra new pod at a time, an old pod deleted
 * once a new one is Ready; Recreate: old pods deleted first). Status counts Ready pods,
 * as `kubectl rollout status` reads them. Refused creates are retried. Scale-in deletes
 * in the ReplicaSet controller's order, pod-deletion-cost included.
 */
import type { EventRecorder } from "../api/events.js";
import type { ObjectApi } from "../api/object-api.js";
import { StatusError } from "../api/status-error.js";
import type { JsonObject, KObject } from "../api/types.js";
import { isObject } from "../api/types.js";
import { templateHash } from "./daemonset-controller.js";
import { WorkQueue } from "./work-queue.js";

const obj = (v: unknown): JsonObject => (isObject(v) ? v : {});

function ready(p: KObject): boolean {
  return (Array.isArray(obj(p.status).conditions) ? (obj(p.status).conditions as unknown[]) : []).some(
    (c) => isObject(c) && c.type === "Ready" && c.status === "True",
  );
}

/** The annotation's integer value (the API server rejects others; here they count as 0). */
function deletionCost(p: KObject): number {
  const v = Number(p.metadata.annotations?.["controller.kubernetes.io/pod-deletion-cost"] ?? 0);
  return Number.isInteger(v) ? v : 0;
}

/** Sort order of pods to delete on scale-in, first to go first. */
function deletionOrder(a: KObject, b: KObject): number {
  const rank = (p: KObject): number[] => {
    const phase = String(obj(p.status).phase ?? "Pending");
    return [
      obj(p.spec).nodeName ? 1 : 0,
      phase === "Pending" ? 0 : phase === "Running" ? 2 : 1,
      ready(p) ? 1 : 0,
      deletionCost(p),
      -Date.parse(p.metadata.creationTimestamp ?? "1970-01-01T00:00:00Z"),
    ];
  };
  const ra = rank(a);
  const rb = rank(b);
  for (let i = 0; i < ra.length; i++) if (ra[i] !== rb[i]) return (ra[i] ?? 0) - (rb[i] ?? 0);
  return 0;
}

export class DeploymentController {
  private readonly queue: WorkQueue;
  private readonly unsubscribe: () => void;

  constructor(
    private readonly api: ObjectApi,
    private readonly events: EventRecorder,
    private readonly retryMs: number,
    onError: (key: string, e: unknown) => void,
  ) {
    this.queue = new WorkQueue((key) => this.process(key), onError);
    this.unsubscribe = api.store.subscribe((e) => {
      if (e.typeKey === "apps/deployments" && e.type !== "DELETED")
        this.queue.add(`${e.object.metadata.namespace ?? ""}|${e.object.metadata.name ?? ""}`);
      if (e.typeKey === "/pods") {
        const owner = (e.object.metadata.ownerReferences ?? []).find(
          (r) => r.controller === true && r.kind === "Deployment",
        );
        if (owner) this.queue.add(`${e.object.metadata.namespace ?? ""}|${owner.name}`);
      }
    });
  }

  private process(key: string): void {
    const [ns = "", name = ""] = key.split("|");
    const deployments = this.api.type("apps", "deployments");
    const pods = this.api.type("", "pods");
    const d = this.api.tryGet(deployments, ns, name);
    if (!d || d.metadata.deletionTimestamp) return;
    const spec = obj(d.spec);
    const template = obj(spec.template);
    const hash = templateHash(template);
    const want = Number(spec.replicas ?? 1);
    const owned = this.api.store
      .list("/pods", ns)
      .filter((p: KObject) =>
        (p.metadata.ownerReferences ?? []).some((r) => r.uid === d.metadata.uid && r.controller === true),
      );
    const live = owned.filter(
      (p) =>
        !p.metadata.deletionTimestamp && !["Succeeded", "Failed"].includes(String(obj(p.status).phase ?? "Pending")),
    );
    const current = live.filter((p) => p.metadata.labels?.["pod-template-hash"] === hash);
    const old = live.filter((p) => p.metadata.labels?.["pod-template-hash"] !== hash);
    const del = (p: KObject): void => {
      try {
        this.api.delete(pods, ns, p.metadata.name ?? "", {});
      } catch (e) {
        if (!(e instanceof StatusError && e.code === 404)) throw e;
      }
    };
    for (const p of owned)
      if (!p.metadata.deletionTimestamp && ["Succeeded", "Failed"].includes(String(obj(p.status).phase))) del(p);
    const recreate = obj(spec.strategy).type === "Recreate";
    if (recreate && old.length > 0) {
      for (const p of old) del(p);
    } else {
      // One surge pod while old ones remain; an old pod goes for each Ready new one beyond the rest.
      const room = want + (old.length > 0 ? 1 : 0) - live.length;
      const terminating = owned.some(
        (p) => p.metadata.deletionTimestamp && p.metadata.labels?.["pod-template-hash"] !== hash,
      );
      let failed = false;
      for (let i = 0; i < room && !(recreate && terminating); i++) {
        try {
          this.api.create(
            pods,
            ns,
            {
              metadata: {
                generateName: `${name.slice(0, 46)}-${hash.slice(0, 10)}-`,
                labels: { ...obj(obj(template.metadata).labels), "pod-template-hash": hash },
                annotations: { ...obj(obj(template.metadata).annotations) },
                ownerReferences: [
                  {
                    apiVersion: "apps/v1",
                    kind: "Deployment",
                    name,
                    uid: d.metadata.uid ?? "",
                    controller: true,
                    blockOwnerDeletion: true,
                  },
                ],
              },
              spec: template.spec,
            },
            { system: true },
          );
        } catch (e) {
          if (!(e instanceof StatusError)) throw e;
          this.events.record(
            "deployment-controller",
            undefined,
            d,
            "Warning",
            "FailedCreate",
            `Error creating: ${e.message}`,
          );
          failed = true;
          break;
        }
      }
      if (failed) this.queue.addAfter(key, this.retryMs);
      const readyNew = current.filter(ready).length;
      let removable = old.length + readyNew - want;
      for (const p of [...old].sort((a, b) => Number(ready(a)) - Number(ready(b)))) {
        if (removable <= 0 && ready(p)) break;
        del(p);
        removable--;
      }
    }
    // Scale-in: excess pods go in the real ReplicaSet controller's order — unscheduled, then
    // pending, then not Ready, then the lowest controller.kubernetes.io/pod-deletion-cost,
    // then the youngest — so an annotated busy pod outlives idle ones.
    const excess = current.filter((p) => !p.metadata.deletionTimestamp).length - want;
    if (excess > 0 && old.length === 0) {
      for (const p of [...current].sort(deletionOrder).slice(0, excess)) del(p);
    }
    const readyCount = live.filter(ready).length;
    this.api.mutate(
      deployments,
      ns,
      name,
      (o) => {
        o.status = {
          observedGeneration: o.metadata.generation,
          replicas: live.length,
          updatedReplicas: current.length,
          readyReplicas: readyCount,
          availableReplicas: readyCount,
          ...(live.length - readyCount > 0 ? { unavailableReplicas: live.length - readyCount } : {}),
          conditions: [
            {
              type: "Available",
              status: readyCount >= want ? "True" : "False",
              reason: readyCount >= want ? "MinimumReplicasAvailable" : "MinimumReplicasUnavailable",
              message:
                readyCount >= want
                  ? "Deployment has minimum availability."
                  : "Deployment does not have minimum availability.",
            },
          ],
        };
      },
      "status",
    );
  }

  async close(): Promise<void> {
    this.unsubscribe();
    await this.queue.close();
  }
}
