/**
 * The ResourceQuota admission plugin, for pods: a quota whose `spec.hard` names a compute
 * resource (`requests.cpu`/`cpu`, `requests.memory`/`memory`, `limits.cpu`, `limits.memory`)
 * refuses a pod any of whose containers lacks it ("must specify limits.cpu for: runner"), and
 * a pod that would take the namespace's use past `hard` ("exceeded quota"); `pods` counts
 * pods. Use is summed over the namespace's pods that have not ended, at admission time (a real
 * API server reads it from the quota's status, which its quota controller keeps; here no
 * status is written). Messages are the API server's. No LimitRange defaults exist here: a pod must carry its own values.
 */
import { quantity } from "../controllers/scheduler.js";
import type { AdmissionPlugin, ObjectApi } from "./object-api.js";
import { StatusError } from "./status-error.js";
import type { JsonObject, KObject } from "./types.js";
import { isObject } from "./types.js";

const obj = (v: unknown): JsonObject => (isObject(v) ? v : {});
const arr = (v: unknown): JsonObject[] => (Array.isArray(v) ? v.filter(isObject) : []);

/** Quota resource names that each container must state, and where in `resources` they are. */
const perContainer: Record<string, { kind: "requests" | "limits"; resource: string }> = {
  cpu: { kind: "requests", resource: "cpu" },
  memory: { kind: "requests", resource: "memory" },
  "requests.cpu": { kind: "requests", resource: "cpu" },
  "requests.memory": { kind: "requests", resource: "memory" },
  "limits.cpu": { kind: "limits", resource: "cpu" },
  "limits.memory": { kind: "limits", resource: "memory" },
};

/** A container's own value: a request defaults to the limit, as the API server defaults it. */
function containerValue(c: JsonObject, kind: "requests" | "limits", resource: string): unknown {
  const r = obj(c.resources);
  return kind === "limits" ? obj(r.limits)[resource] : (obj(r.requests)[resource] ?? obj(r.limits)[resource]);
}

/**
 * The pod's use of one quota resource: the larger of its regular containers plus native
 * sidecars, and of each init container plus the sidecars started before it.
 */
function podUse(spec: JsonObject, name: string): number {
  if (name === "pods" || name === "count/pods") return 1;
  const at = perContainer[name];
  if (!at) return 0;
  const value = (c: JsonObject) => quantity(containerValue(c, at.kind, at.resource) ?? 0);
  let sidecars = 0;
  let initPeak = 0;
  for (const c of arr(spec.initContainers)) {
    if (c.restartPolicy === "Always") sidecars += value(c);
    else initPeak = Math.max(initPeak, sidecars + value(c));
  }
  return Math.max(
    arr(spec.containers).reduce((a, c) => a + value(c), sidecars),
    initPeak,
  );
}

const ended = (p: KObject) => ["Succeeded", "Failed"].includes(String(obj(p.status).phase));

/** How a quantity prints in the API server's quota messages (as given, or as a count). */
function printed(n: number, name: string): string {
  if (name.endsWith("cpu") || name === "cpu") return Number.isInteger(n) ? String(n) : `${Math.round(n * 1000)}m`;
  if (name.endsWith("memory") || name === "memory")
    return n % 1024 ** 3 === 0 ? `${n / 1024 ** 3}Gi` : n % 1024 ** 2 === 0 ? `${n / 1024 ** 2}Mi` : String(n);
  return String(n);
}
const list = (names: string[], value: (n: string) => number) =>
  names.map((n) => `${n}=${printed(value(n), n)}`).join(",");

export function resourceQuotaAdmission(api: ObjectApi): AdmissionPlugin {
  const quotas = api.type("", "resourcequotas");
  const pods = api.type("", "pods");
  return {
    validate(r) {
      if (r.t.group !== "" || r.t.resource !== "pods" || r.operation !== "CREATE") return;
      const ns = r.obj.metadata.namespace ?? "default";
      const spec = obj(r.obj.spec);
      const forbidden = (message: string) =>
        new StatusError(403, "Forbidden", `pods "${r.obj.metadata.name ?? ""}" is forbidden: ${message}`, {
          name: r.obj.metadata.name ?? "",
          kind: "pods",
        });
      const all = [...arr(spec.initContainers), ...arr(spec.containers)];
      for (const quota of api
        .list(quotas, ns)
        .items.sort((a, b) => (a.metadata.name ?? "").localeCompare(b.metadata.name ?? ""))) {
        const hard = obj(obj(quota.spec).hard);
        const missing = Object.keys(hard)
          .filter((n) => perContainer[n])
          .sort()
          .flatMap((n) => {
            const at = perContainer[n]!;
            const lacking = all
              .filter((c) => containerValue(c, at.kind, at.resource) === undefined)
              .map((c) => String(c.name))
              .sort();
            return lacking.length > 0 ? [`${n} for: ${lacking.join(",")}`] : [];
          });
        if (missing.length > 0)
          throw forbidden(`failed quota: ${quota.metadata.name ?? ""}: must specify ${missing.join("; ")}`);
        const live = api.list(pods, ns).items.filter((p) => !ended(p) && p.metadata.name !== r.obj.metadata.name);
        const used = (n: string) => live.reduce((a, p) => a + podUse(obj(p.spec), n), 0);
        const asked = (n: string) => podUse(spec, n);
        const tracked = Object.keys(hard)
          .filter((n) => perContainer[n] || n === "pods" || n === "count/pods")
          .sort();
        // A thousandth of a core or a byte of slack: quantities are parsed to floating point.
        const over = tracked.filter((n) => used(n) + asked(n) > quantity(hard[n]) + 1e-9);
        if (over.length > 0) {
          const limit = (n: string) => quantity(hard[n]);
          throw forbidden(
            `exceeded quota: ${quota.metadata.name ?? ""}, requested: ${list(over, asked)}, used: ${list(over, used)}, limited: ${list(over, limit)}`,
          );
        }
      }
    },
  };
}
