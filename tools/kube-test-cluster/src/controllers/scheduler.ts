/**
 * The default scheduler over the cluster's nodes: filters by cordon, taints and
 * tolerations, nodeSelector, required node affinity, and resource requests against
 * allocatable (cpu, memory, pods); binds to the node with the fewest pods, or sets
 * PodScheduled=False/Unschedulable with the scheduler's message and a FailedScheduling
 * event, retrying whenever nodes or pods change.
 */
import type { EventRecorder } from "../api/events.js";
import type { ObjectApi } from "../api/object-api.js";
import { StatusError } from "../api/status-error.js";
import type { JsonObject, KObject } from "../api/types.js";
import { isObject, isoNow } from "../api/types.js";
import { WorkQueue } from "./work-queue.js";

const obj = (v: unknown): JsonObject => (isObject(v) ? v : {});
const arr = (v: unknown): JsonObject[] => (Array.isArray(v) ? v.filter(isObject) : []);

/** Kubernetes quantities ("500m", "1Gi", "2") as numbers (cores, bytes). */
export function quantity(v: unknown): number {
  if (typeof v === "number") return v;
  const m = /^([0-9.]+)([a-zA-Z]*)$/.exec(String(v ?? "0").trim());
  if (!m) return 0;
  const n = Number(m[1]);
  const units: Record<string, number> = {
    "": 1,
    m: 1e-3,
    k: 1e3,
    K: 1e3,
    M: 1e6,
    G: 1e9,
    T: 1e12,
    Ki: 1024,
    Mi: 1024 ** 2,
    Gi: 1024 ** 3,
    Ti: 1024 ** 4,
  };
  return n * (units[m[2] ?? ""] ?? 1);
}

/** The pod's effective requests: max of init containers' and the sum of containers'. */
export function podRequests(spec: JsonObject): { cpu: number; memory: number } {
  const req = (c: JsonObject, k: string): number =>
    quantity(obj(obj(c.resources).requests)[k] ?? obj(obj(c.resources).limits)[k] ?? 0);
  const sum = (k: string): number => arr(spec.containers).reduce((a, c) => a + req(c, k), 0);
  const init = (k: string): number => arr(spec.initContainers).reduce((a, c) => Math.max(a, req(c, k)), 0);
  return { cpu: Math.max(sum("cpu"), init("cpu")), memory: Math.max(sum("memory"), init("memory")) };
}

function tolerates(tolerations: JsonObject[], taint: JsonObject): boolean {
  return tolerations.some((t) => {
    if (t.effect !== undefined && t.effect !== "" && t.effect !== taint.effect) return false;
    if (t.key === undefined || t.key === "") return t.operator === "Exists";
    if (t.key !== taint.key) return false;
    return t.operator === "Exists" || String(t.value ?? "") === String(taint.value ?? "");
  });
}

/** The taints of a node, with the cordon as the unschedulable taint (as the node lifecycle controller adds it). */
export function nodeTaints(node: KObject): JsonObject[] {
  const spec = obj(node.spec);
  const taints = arr(spec.taints);
  if (spec.unschedulable === true && !taints.some((t) => t.key === "node.kubernetes.io/unschedulable"))
    taints.push({ key: "node.kubernetes.io/unschedulable", effect: "NoSchedule" });
  return taints;
}

function matchExpression(e: JsonObject, value: string | undefined): boolean {
  const values = Array.isArray(e.values) ? e.values.map(String) : [];
  switch (e.operator) {
    case "In":
      return value !== undefined && values.includes(value);
    case "NotIn":
      return value === undefined || !values.includes(value);
    case "Exists":
      return value !== undefined;
    case "DoesNotExist":
      return value === undefined;
    case "Gt":
      return value !== undefined && Number(value) > Number(values[0]);
    case "Lt":
      return value !== undefined && Number(value) < Number(values[0]);
    default:
      return false;
  }
}

/** nodeSelector and requiredDuringSchedulingIgnoredDuringExecution node affinity. */
export function matchesNodeSelection(spec: JsonObject, node: KObject): boolean {
  const labels = node.metadata.labels ?? {};
  for (const [k, v] of Object.entries(obj(spec.nodeSelector))) if (labels[k] !== v) return false;
  const required = obj(obj(obj(spec.affinity).nodeAffinity).requiredDuringSchedulingIgnoredDuringExecution);
  const terms = arr(required.nodeSelectorTerms);
  if (terms.length === 0) return true;
  return terms.some(
    (t) =>
      arr(t.matchExpressions).every((e) => matchExpression(e, labels[String(e.key)])) &&
      arr(t.matchFields).every((e) => matchExpression(e, e.key === "metadata.name" ? node.metadata.name : undefined)),
  );
}

/** The first untolerated NoSchedule/NoExecute taint, if any. */
export function untoleratedTaint(spec: JsonObject, node: KObject): JsonObject | undefined {
  const tolerations = arr(spec.tolerations);
  return nodeTaints(node).find(
    (t) => (t.effect === "NoSchedule" || t.effect === "NoExecute") && !tolerates(tolerations, t),
  );
}

function terminal(p: KObject): boolean {
  const phase = obj(p.status).phase;
  return phase === "Succeeded" || phase === "Failed";
}

export class Scheduler {
  private readonly queue: WorkQueue;
  private readonly unsubscribe: () => void;
  private readonly waiting = new Set<string>();

  constructor(
    private readonly api: ObjectApi,
    private readonly events: EventRecorder,
    onError: (key: string, e: unknown) => void,
  ) {
    this.queue = new WorkQueue((key) => this.schedule(key), onError);
    this.unsubscribe = api.store.subscribe((e) => {
      if (e.typeKey === "/nodes") {
        for (const k of this.waiting) this.queue.add(k);
        return;
      }
      if (e.typeKey !== "/pods") return;
      const spec = obj(e.object.spec);
      const key = `${e.object.metadata.namespace ?? ""}|${e.object.metadata.name ?? ""}`;
      if (e.type !== "DELETED" && !spec.nodeName) this.queue.add(key);
      else if (e.type === "DELETED" || terminal(e.object)) {
        // Room may have been freed.
        this.waiting.delete(key);
        for (const k of this.waiting) this.queue.add(k);
      }
    });
  }

  private get pods() {
    return this.api.type("", "pods");
  }

  private schedule(key: string): void {
    const [ns = "", name = ""] = key.split("|");
    const pod = this.api.tryGet(this.pods, ns, name);
    const spec = obj(pod?.spec);
    if (
      !pod ||
      spec.nodeName ||
      pod.metadata.deletionTimestamp ||
      (spec.schedulerName !== undefined && spec.schedulerName !== "default-scheduler")
    ) {
      this.waiting.delete(key);
      return;
    }
    const nodes = this.api.store.list("/nodes");
    const pods = this.api.store.select("/pods", undefined, (p) => Boolean(obj(p.spec).nodeName) && !terminal(p));
    const want = podRequests(spec);
    const reasons = new Map<string, number>();
    const why = (r: string): void => {
      reasons.set(r, (reasons.get(r) ?? 0) + 1);
    };
    const fits: { node: KObject; count: number }[] = [];
    for (const node of nodes) {
      const taint = untoleratedTaint(spec, node);
      if (taint) {
        why(
          taint.key === "node.kubernetes.io/unschedulable"
            ? "node(s) were unschedulable"
            : `node(s) had untolerated taint {${String(taint.key)}: ${String(taint.value ?? "")}}`,
        );
        continue;
      }
      if (!matchesNodeSelection(spec, node)) {
        why("node(s) didn't match Pod's node affinity/selector");
        continue;
      }
      const on = pods.filter((p) => obj(p.spec).nodeName === node.metadata.name);
      const alloc = obj(obj(node.status).allocatable);
      const used = on.reduce(
        (a, p) => {
          const r = podRequests(obj(p.spec));
          return { cpu: a.cpu + r.cpu, memory: a.memory + r.memory };
        },
        { cpu: 0, memory: 0 },
      );
      let short = false;
      if (on.length + 1 > quantity(alloc.pods ?? 110)) {
        why("Too many pods");
        short = true;
      }
      if (used.cpu + want.cpu > quantity(alloc.cpu ?? 0) + 1e-9) {
        why("Insufficient cpu");
        short = true;
      }
      if (used.memory + want.memory > quantity(alloc.memory ?? 0)) {
        why("Insufficient memory");
        short = true;
      }
      if (!short) fits.push({ node, count: on.length });
    }
    const best = fits.sort(
      (a, b) => a.count - b.count || (a.node.metadata.name ?? "").localeCompare(b.node.metadata.name ?? ""),
    )[0];
    if (!best) {
      this.waiting.add(key);
      const detail = [...reasons.entries()]
        .sort((a, b) => a[0].localeCompare(b[0]))
        .map(([r, n]) => `${n} ${r}`)
        .join(", ");
      const message = `0/${nodes.length} nodes are available: ${detail}. preemption: 0/${nodes.length} nodes are available: ${nodes.length} Preemption is not helpful for scheduling.`;
      const cur = arr(obj(pod.status).conditions).find((c) => c.type === "PodScheduled");
      if (cur?.status === "False" && cur.message === message) return;
      this.api.mutate(
        this.pods,
        ns,
        name,
        (p) => {
          const st = obj(p.status);
          st.conditions = [
            ...arr(st.conditions).filter((c) => c.type !== "PodScheduled"),
            {
              type: "PodScheduled",
              status: "False",
              lastProbeTime: null,
              lastTransitionTime: isoNow(),
              reason: "Unschedulable",
              message,
            },
          ];
          p.status = st;
        },
        "status",
      );
      this.events.record("default-scheduler", undefined, pod, "Warning", "FailedScheduling", message);
      return;
    }
    this.waiting.delete(key);
    const nodeName = best.node.metadata.name ?? "";
    try {
      this.api.mutate(this.pods, ns, name, (p) => {
        if (isObject(p.spec) && !p.spec.nodeName) p.spec.nodeName = nodeName;
      });
    } catch (e) {
      if (!(e instanceof StatusError)) throw e;
      return;
    }
    this.events.record(
      "default-scheduler",
      undefined,
      pod,
      "Normal",
      "Scheduled",
      `Successfully assigned ${ns}/${name} to ${nodeName}`,
    );
  }

  async close(): Promise<void> {
    this.unsubscribe();
    await this.queue.close();
  }
}
