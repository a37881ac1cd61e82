/**
 * PodDisruptionBudgets: the disruption controller's status (expectedPods,
 * currentHealthy, desiredHealthy, disruptionsAllowed, DisruptionAllowed condition) and
 * the eviction subresource that honours them — 429 TooManyRequests when evicting the
 * pod would leave fewer healthy pods than the budget needs, which is what keeps
 * `kubectl drain` retrying until its timeout.
 */
import type { ObjectApi } from "../api/object-api.js";
import { matchesLabelSelector } from "../api/selectors.js";
import { StatusError } from "../api/status-error.js";
import type { JsonObject, KObject } from "../api/types.js";
import { isObject, isoNow } from "../api/types.js";
import { WorkQueue } from "./work-queue.js";

const obj = (v: unknown): JsonObject => (isObject(v) ? v : {});

function healthy(p: KObject): boolean {
  if (p.metadata.deletionTimestamp) return false;
  return (Array.isArray(obj(p.status).conditions) ? (obj(p.status).conditions as unknown[]) : []).some(
    (c) => isObject(c) && c.type === "Ready" && c.status === "True",
  );
}

function terminal(p: KObject): boolean {
  const phase = obj(p.status).phase;
  return phase === "Succeeded" || phase === "Failed";
}

/** A percentage ("50%") of `total`, rounded up as Kubernetes does for PDBs, or the integer itself. */
function scaled(v: unknown, total: number): number {
  if (typeof v === "string" && v.endsWith("%")) return Math.ceil((Number(v.slice(0, -1)) / 100) * total);
  return Number(v);
}

export interface BudgetState {
  expectedPods: number;
  currentHealthy: number;
  desiredHealthy: number;
  disruptionsAllowed: number;
}

export function budgetState(api: ObjectApi, pdb: KObject): BudgetState {
  const spec = obj(pdb.spec);
  const pods = api.store.select(
    "/pods",
    pdb.metadata.namespace,
    (p) => !terminal(p) && matchesLabelSelector(spec.selector ?? {}, p.metadata.labels ?? {}),
  );
  const expectedPods = pods.length;
  const currentHealthy = pods.filter(healthy).length;
  let desiredHealthy: number;
  if (spec.minAvailable !== undefined) desiredHealthy = scaled(spec.minAvailable, expectedPods);
  else if (spec.maxUnavailable !== undefined)
    desiredHealthy = Math.max(0, expectedPods - scaled(spec.maxUnavailable, expectedPods));
  else desiredHealthy = expectedPods;
  return {
    expectedPods,
    currentHealthy,
    desiredHealthy,
    disruptionsAllowed: Math.max(0, currentHealthy - desiredHealthy),
  };
}

/** The eviction subresource: checks the pod's budget, then marks the pod DisruptionTarget and deletes it gracefully. */
export function evictPod(api: ObjectApi, ns: string, name: string, deleteOptions: JsonObject | undefined): void {
  const pods = api.type("", "pods");
  const pod = api.get(pods, ns, name);
  if (!terminal(pod) && !pod.metadata.deletionTimestamp) {
    const pdbs = api.store
      .list("policy/poddisruptionbudgets", ns)
      .filter((b) => matchesLabelSelector(obj(b.spec).selector ?? {}, pod.metadata.labels ?? {}));
    if (pdbs.length > 1)
      throw new StatusError(
        500,
        "InternalError",
        "This pod has more than one PodDisruptionBudget, which the eviction subresource does not support.",
      );
    const pdb = pdbs[0];
    if (pdb) {
      const s = budgetState(api, pdb);
      const alwaysAllow = obj(pdb.spec).unhealthyPodEvictionPolicy === "AlwaysAllow";
      // An unready pod may go while the budget is met (IfHealthyBudget) or always (AlwaysAllow).
      const unhealthyOk = !healthy(pod) && (alwaysAllow || s.currentHealthy >= s.desiredHealthy);
      if (!unhealthyOk && s.disruptionsAllowed <= 0) {
        throw new StatusError(
          429,
          "TooManyRequests",
          "Cannot evict pod as it would violate the pod's disruption budget.",
          {
            causes: [
              {
                reason: "DisruptionBudget",
                message: `The disruption budget ${pdb.metadata.name ?? ""} needs ${s.desiredHealthy} healthy pods and has ${s.currentHealthy} currently`,
              },
            ],
          },
        );
      }
    }
  }
  const now = isoNow();
  api.mutate(
    pods,
    ns,
    name,
    (p) => {
      const st = obj(p.status);
      const conds = (Array.isArray(st.conditions) ? st.conditions : [])
        .filter(isObject)
        .filter((c) => c.type !== "DisruptionTarget");
      conds.push({
        type: "DisruptionTarget",
        status: "True",
        lastProbeTime: null,
        lastTransitionTime: now,
        reason: "EvictionByEvictionAPI",
        message: "Eviction API: evicting",
      });
      st.conditions = conds;
      p.status = st;
    },
    "status",
  );
  const grace =
    deleteOptions && typeof deleteOptions.gracePeriodSeconds === "number"
      ? { gracePeriodSeconds: deleteOptions.gracePeriodSeconds }
      : {};
  api.delete(pods, ns, name, grace);
}

/** Keeps every PDB's status current as pods come, go and change readiness. */
export class DisruptionController {
  private readonly queue: WorkQueue;
  private readonly unsubscribe: () => void;

  constructor(
    private readonly api: ObjectApi,
    onError: (key: string, e: unknown) => void,
  ) {
    this.queue = new WorkQueue((key) => this.sync(key), onError);
    this.unsubscribe = api.store.subscribe((e) => {
      if (e.typeKey === "policy/poddisruptionbudgets" && e.type !== "DELETED")
        this.queue.add(`${e.object.metadata.namespace ?? ""}|${e.object.metadata.name ?? ""}`);
      if (e.typeKey === "/pods") {
        for (const b of api.store.list("policy/poddisruptionbudgets", e.object.metadata.namespace))
          this.queue.add(`${b.metadata.namespace ?? ""}|${b.metadata.name ?? ""}`);
      }
    });
  }

  private sync(key: string): void {
    const [ns = "", name = ""] = key.split("|");
    const t = this.api.type("policy", "poddisruptionbudgets");
    const pdb = this.api.tryGet(t, ns, name);
    if (!pdb) return;
    const s = budgetState(this.api, pdb);
    const st = obj(pdb.status);
    const prev = (Array.isArray(st.conditions) ? st.conditions : [])
      .filter(isObject)
      .find((c) => c.type === "DisruptionAllowed");
    const allowed = s.disruptionsAllowed > 0;
    const status = {
      observedGeneration: pdb.metadata.generation ?? 1,
      ...s,
      conditions: [
        {
          type: "DisruptionAllowed",
          status: allowed ? "True" : "False",
          reason: allowed ? "SufficientPods" : "InsufficientPods",
          message: "",
          observedGeneration: pdb.metadata.generation ?? 1,
          lastTransitionTime: prev && prev.status === (allowed ? "True" : "False") ? prev.lastTransitionTime : isoNow(),
        },
      ],
    };
    if (JSON.stringify(status) === JSON.stringify({ ...st, disruptedPods: undefined })) return;
    this.api.mutate(
      t,
      ns,
      name,
      (o) => {
        o.status = status;
      },
      "status",
    );
  }

  async close(): Promise<void> {
    this.unsubscribe();
    await this.queue.close();
  }
}
