/**
 * apps/v1 Deployment controller, reduced to what installing a chart needs: keeps
 * `spec.replicas` live pods from the template (owned by the Deployment, so deleting it
 * garbage-collects them) and reports replica counts. No ReplicaSets, no rollouts.
 */
import type { ObjectApi } from "../api/object-api.js";
import { StatusError } from "../api/status-error.js";
import type { JsonObject, KObject } from "../api/types.js";
import { isObject } from "../api/types.js";
import { WorkQueue } from "./work-queue.js";

const obj = (v: unknown): JsonObject => (isObject(v) ? v : {});

export class DeploymentController {
  private readonly queue: WorkQueue;
  private readonly unsubscribe: () => void;

  constructor(
    private readonly api: ObjectApi,
    onError: (key: string, e: unknown) => void,
  ) {
    this.queue = new WorkQueue((key) => this.process(key), onError);
    this.unsubscribe = api.store.subscribe((e) => {
      if (e.typeKey === "apps/deployments" && e.type !== "DELETED") this.queue.add(`${e.object.metadata.namespace ?? ""}|${e.object.metadata.name ?? ""}`);
      if (e.typeKey === "/pods") {
        const owner = (e.object.metadata.ownerReferences ?? []).find((r) => r.controller === true && r.kind === "Deployment");
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
    const want = Number(spec.replicas ?? 1);
    const owned = this.api.store
      .list("/pods", ns)
      .filter((p: KObject) => (p.metadata.ownerReferences ?? []).some((r) => r.uid === d.metadata.uid && r.controller === true) && !p.metadata.deletionTimestamp);
    const live = owned.filter((p) => !["Succeeded", "Failed"].includes(String(obj(p.status).phase ?? "Pending")));
    for (let i = live.length; i < want; i++) {
      try {
        this.api.create(pods, ns, {
          metadata: {
            generateName: `${name.slice(0, 57)}-`,
            labels: { ...obj(obj(template.metadata).labels) },
            annotations: { ...obj(obj(template.metadata).annotations) },
            ownerReferences: [{ apiVersion: "apps/v1", kind: "Deployment", name, uid: d.metadata.uid ?? "", controller: true, blockOwnerDeletion: true }],
          },
          spec: template.spec,
        }, { system: true });
      } catch (e) {
        if (!(e instanceof StatusError)) throw e;
      }
    }
    const ready = live.filter((p) => String(obj(p.status).phase) === "Running").length;
    this.api.mutate(deployments, ns, name, (o) => {
      o.status = { observedGeneration: o.metadata.generation, replicas: live.length, readyReplicas: ready, availableReplicas: ready };
    }, "status");
  }

  async close(): Promise<void> {
    this.unsubscribe();
    await this.queue.close();
  }
}
