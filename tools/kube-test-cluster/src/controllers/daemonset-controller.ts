/**
 * apps/v1 DaemonSet controller: one pod per eligible node (nodeSelector, required node
 * affinity, taints against the pod's tolerations plus the ones the DaemonSet
 * controller adds), pinned to its node with a metadata.name node affinity and placed
 * by the scheduler (so resources count). Pods carry `controller-revision-hash` (a hash
 * of the template) and `pod-template-generation`. Template changes roll out with
 * RollingUpdate (maxUnavailable, default 1: an old pod is deleted only while fewer
 * than that are unavailable, its replacement created once it is gone) or wait for the
 * user's deletes with OnDelete. Status as `kubectl rollout status` reads it.
 */
import { createHash } from "node:crypto";
import type { EventRecorder } from "../api/events.js";
import type { ObjectApi } from "../api/object-api.js";
import { StatusError } from "../api/status-error.js";
import type { JsonObject, KObject } from "../api/types.js";
import { isObject } from "../api/types.js";
import { matchesNodeSelection, untoleratedTaint } from "./scheduler.js";
import { WorkQueue } from "./work-queue.js";

const obj = (v: unknown): JsonObject => (isObject(v) ? v : {});
const arr = (v: unknown): JsonObject[] => (Array.isArray(v) ? v.filter(isObject) : []);

/** Tolerations the DaemonSet controller adds to every pod it creates. */
const daemonTolerations = [
  { key: "node.kubernetes.io/not-ready", operator: "Exists", effect: "NoExecute" },
  { key: "node.kubernetes.io/unreachable", operator: "Exists", effect: "NoExecute" },
  { key: "node.kubernetes.io/disk-pressure", operator: "Exists", effect: "NoSchedule" },
  { key: "node.kubernetes.io/memory-pressure", operator: "Exists", effect: "NoSchedule" },
  { key: "node.kubernetes.io/pid-pressure", operator: "Exists", effect: "NoSchedule" },
  { key: "node.kubernetes.io/unschedulable", operator: "Exists", effect: "NoSchedule" },
];

function ready(p: KObject): boolean {
  return arr(obj(p.status).conditions).some((c) => c.type === "Ready" && c.status === "True");
}

export function templateHash(template: unknown): string {
  return createHash("sha256")
    .update(JSON.stringify(template ?? {}))
    .digest("hex")
    .slice(0, 10);
}

export class DaemonSetController {
  private readonly queue: WorkQueue;
  private readonly unsubscribe: () => void;

  constructor(
    private readonly api: ObjectApi,
    private readonly events: EventRecorder,
    private readonly retryMs: number,
    onError: (key: string, e: unknown) => void,
  ) {
    this.queue = new WorkQueue((key) => this.sync(key), onError);
    this.unsubscribe = api.store.subscribe((e) => {
      if (e.typeKey === "apps/daemonsets" && e.type !== "DELETED")
        this.queue.add(`${e.object.metadata.namespace ?? ""}|${e.object.metadata.name ?? ""}`);
      if (e.typeKey === "/nodes")
        for (const d of api.store.list("apps/daemonsets"))
          this.queue.add(`${d.metadata.namespace ?? ""}|${d.metadata.name ?? ""}`);
      if (e.typeKey === "/pods") {
        const owner = (e.object.metadata.ownerReferences ?? []).find(
          (r) => r.controller === true && r.kind === "DaemonSet",
        );
        if (owner) this.queue.add(`${e.object.metadata.namespace ?? ""}|${owner.name}`);
      }
    });
  }

  private get pods() {
    return this.api.type("", "pods");
  }

  private sync(key: string): void {
    const [ns = "", name = ""] = key.split("|");
    const dsType = this.api.type("apps", "daemonsets");
    const ds = this.api.tryGet(dsType, ns, name);
    if (!ds || ds.metadata.deletionTimestamp) return;
    const spec = obj(ds.spec);
    const template = obj(spec.template);
    const podSpec = obj(template.spec);
    const hash = templateHash(template);
    const generation = ds.metadata.generation ?? 1;
    const strategy = obj(spec.updateStrategy);
    const onDelete = strategy.type === "OnDelete";
    const maxUnavailableRaw = obj(strategy.rollingUpdate).maxUnavailable ?? 1;
    const owned = this.api.store.select("/pods", ns, (p) =>
      (p.metadata.ownerReferences ?? []).some((r) => r.uid === ds.metadata.uid && r.controller === true),
    );
    const nodeOf = (p: KObject): string => {
      const direct = obj(p.spec).nodeName;
      if (typeof direct === "string" && direct !== "") return direct;
      const terms = arr(
        obj(obj(obj(obj(p.spec).affinity).nodeAffinity).requiredDuringSchedulingIgnoredDuringExecution)
          .nodeSelectorTerms,
      );
      const field = arr(terms[0]?.matchFields).find((f) => f.key === "metadata.name");
      return Array.isArray(field?.values) ? String(field.values[0]) : "";
    };
    const eligible = this.api.store.list("/nodes").filter((n) => {
      const s = { ...podSpec, tolerations: [...arr(podSpec.tolerations), ...daemonTolerations] };
      return matchesNodeSelection(s, n) && !untoleratedTaint(s, n);
    });
    const eligibleNames = new Set(eligible.map((n) => n.metadata.name ?? ""));
    const total = eligible.length;
    const maxUnavailable =
      typeof maxUnavailableRaw === "string" && maxUnavailableRaw.endsWith("%")
        ? Math.max(1, Math.floor((Number(maxUnavailableRaw.slice(0, -1)) / 100) * total))
        : Number(maxUnavailableRaw);
    let retry = false;
    // Pods on nodes that no longer qualify, and failed pods, go.
    for (const p of owned) {
      if (p.metadata.deletionTimestamp) continue;
      if (!eligibleNames.has(nodeOf(p)) || obj(p.status).phase === "Failed" || obj(p.status).phase === "Succeeded")
        this.deletePod(ds, p);
    }
    const live = owned.filter(
      (p) =>
        !p.metadata.deletionTimestamp &&
        eligibleNames.has(nodeOf(p)) &&
        !["Failed", "Succeeded"].includes(String(obj(p.status).phase)),
    );
    const byNode = new Map<string, KObject[]>();
    for (const p of owned.filter(
      (x) => eligibleNames.has(nodeOf(x)) && !["Failed", "Succeeded"].includes(String(obj(x.status).phase)),
    ))
      byNode.set(nodeOf(p), [...(byNode.get(nodeOf(p)) ?? []), p]);
    for (const n of eligible) {
      const nodeName = n.metadata.name ?? "";
      if ((byNode.get(nodeName) ?? []).length === 0 && !this.createPod(ds, nodeName, hash, generation)) retry = true;
    }
    if (!onDelete) {
      let unavailable = eligible.filter(
        (n) => !(byNode.get(n.metadata.name ?? "") ?? []).some((p) => !p.metadata.deletionTimestamp && ready(p)),
      ).length;
      for (const p of live) {
        if (p.metadata.labels?.["controller-revision-hash"] === hash) continue;
        if (unavailable >= maxUnavailable && ready(p)) break;
        this.deletePod(ds, p);
        if (ready(p)) unavailable++;
      }
    }
    const current = live.filter((p) => obj(p.spec).nodeName);
    const updated = current.filter((p) => p.metadata.labels?.["controller-revision-hash"] === hash);
    const readyCount = current.filter(ready).length;
    this.api.mutate(
      dsType,
      ns,
      name,
      (o) => {
        o.status = {
          currentNumberScheduled: current.length,
          desiredNumberScheduled: total,
          numberMisscheduled: owned.filter((p) => !eligibleNames.has(nodeOf(p)) && !p.metadata.deletionTimestamp)
            .length,
          numberReady: readyCount,
          observedGeneration: o.metadata.generation ?? 1,
          updatedNumberScheduled: updated.length,
          numberAvailable: readyCount,
          ...(total - readyCount > 0 ? { numberUnavailable: total - readyCount } : {}),
        };
      },
      "status",
    );
    if (retry) this.queue.addAfter(key, this.retryMs);
  }

  private createPod(ds: KObject, nodeName: string, hash: string, generation: number): boolean {
    const template = obj(obj(ds.spec).template);
    const tmeta = obj(template.metadata);
    const spec = JSON.parse(JSON.stringify(obj(template.spec))) as JsonObject;
    spec.tolerations = [
      ...arr(spec.tolerations),
      ...daemonTolerations.filter((t) => !arr(spec.tolerations).some((x) => x.key === t.key && x.effect === t.effect)),
    ];
    const affinity = obj(spec.affinity);
    const nodeAffinity = obj(affinity.nodeAffinity);
    nodeAffinity.requiredDuringSchedulingIgnoredDuringExecution = {
      nodeSelectorTerms: [{ matchFields: [{ key: "metadata.name", operator: "In", values: [nodeName] }] }],
    };
    affinity.nodeAffinity = nodeAffinity;
    spec.affinity = affinity;
    const name = ds.metadata.name ?? "";
    try {
      const pod = this.api.create(
        this.pods,
        ds.metadata.namespace,
        {
          metadata: {
            generateName: `${name.slice(0, 57)}-`,
            labels: {
              ...obj(tmeta.labels),
              "controller-revision-hash": hash,
              "pod-template-generation": String(generation),
            },
            annotations: { ...obj(tmeta.annotations) },
            ownerReferences: [
              {
                apiVersion: "apps/v1",
                kind: "DaemonSet",
                name,
                uid: ds.metadata.uid ?? "",
                controller: true,
                blockOwnerDeletion: true,
              },
            ],
          },
          spec,
        },
        { system: true },
      );
      this.events.record(
        "daemonset-controller",
        undefined,
        ds,
        "Normal",
        "SuccessfulCreate",
        `Created pod: ${pod.metadata.name ?? ""}`,
      );
      return true;
    } catch (e) {
      if (!(e instanceof StatusError)) throw e;
      this.events.record(
        "daemonset-controller",
        undefined,
        ds,
        "Warning",
        "FailedCreate",
        `Error creating: ${e.message}`,
      );
      return false;
    }
  }

  private deletePod(ds: KObject, p: KObject): void {
    try {
      this.api.delete(this.pods, p.metadata.namespace, p.metadata.name ?? "", {});
      this.events.record(
        "daemonset-controller",
        undefined,
        ds,
        "Normal",
        "SuccessfulDelete",
        `Deleted pod: ${p.metadata.name ?? ""}`,
      );
    } catch (e) {
      if (!(e instanceof StatusError && e.code === 404)) throw e;
    }
  }

  async close(): Promise<void> {
    this.unsubscribe();
    await this.queue.close();
  }
}
