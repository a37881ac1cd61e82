/**
 * A container's environment as kubelet builds it: envFrom, then env (value with
 * $(VAR) expansion, secretKeyRef, configMapKeyRef, fieldRef, resourceFieldRef).
 * A missing Secret/ConfigMap or key is a CreateContainerConfigError.
 */
import type { ObjectApi } from "../api/object-api.js";
import type { JsonObject, KObject } from "../api/types.js";
import { isObject } from "../api/types.js";

export class ContainerConfigError extends Error {
  override name = "ContainerConfigError";
}

/** Expands $(VAR) from `env`; $$ escapes; unknown references stay as written. */
export function expand(text: string, env: Record<string, string>): string {
  return text.replace(/\$\$|\$\(([A-Za-z_][A-Za-z0-9_.-]*)\)/g, (m: string, name: string | undefined) => {
    if (m === "$$") return "$";
    return name !== undefined && env[name] !== undefined ? env[name] : m;
  });
}

function lookup(api: ObjectApi, ns: string, resource: "secrets" | "configmaps", name: string): KObject | undefined {
  return api.tryGet(api.type("", resource), ns, name);
}

function dataOf(o: KObject, resource: "secrets" | "configmaps"): Record<string, string> {
  const out: Record<string, string> = {};
  const data = isObject(o.data) ? o.data : {};
  for (const [k, v] of Object.entries(data))
    out[k] = resource === "secrets" ? Buffer.from(String(v), "base64").toString("utf8") : String(v);
  if (resource === "configmaps" && isObject(o.binaryData))
    for (const [k, v] of Object.entries(o.binaryData)) out[k] = Buffer.from(String(v), "base64").toString("utf8");
  return out;
}

function kindName(resource: "secrets" | "configmaps"): string {
  return resource === "secrets" ? "secret" : "configmap";
}

/** `podIP` stands for the pod's (and its node's) address: the loopback of the cluster's IP family. */
export function fieldRefValue(pod: KObject, path: string, podIP = "127.0.0.1"): string | undefined {
  const spec = isObject(pod.spec) ? pod.spec : {};
  const m = /^metadata\.(labels|annotations)\['(.+)'\]$/.exec(path);
  if (m) {
    const map = m[1] === "labels" ? pod.metadata.labels : pod.metadata.annotations;
    return map?.[m[2] ?? ""] ?? "";
  }
  switch (path) {
    case "metadata.name":
      return pod.metadata.name;
    case "metadata.namespace":
      return pod.metadata.namespace;
    case "metadata.uid":
      return pod.metadata.uid;
    case "metadata.labels":
      return Object.entries(pod.metadata.labels ?? {})
        .map(([k, v]) => `${k}="${v}"`)
        .sort()
        .join("\n");
    case "metadata.annotations":
      return Object.entries(pod.metadata.annotations ?? {})
        .map(([k, v]) => `${k}="${v}"`)
        .sort()
        .join("\n");
    case "spec.nodeName":
      return String(spec.nodeName ?? "");
    case "spec.serviceAccountName":
      return String(spec.serviceAccountName ?? "");
    case "status.podIP":
    case "status.hostIP":
    case "status.podIPs":
    case "status.hostIPs":
      return podIP;
    default:
      return undefined;
  }
}

export function resolveEnv(
  api: ObjectApi,
  pod: KObject,
  container: JsonObject,
  base: Record<string, string>,
  podIP = "127.0.0.1",
): Record<string, string> {
  const ns = pod.metadata.namespace ?? "default";
  const env: Record<string, string> = { ...base };
  for (const from of (Array.isArray(container.envFrom) ? container.envFrom : []).filter(isObject)) {
    const prefix = typeof from.prefix === "string" ? from.prefix : "";
    for (const [field, resource] of [
      ["configMapRef", "configmaps"],
      ["secretRef", "secrets"],
    ] as const) {
      const ref = from[field];
      if (!isObject(ref)) continue;
      const name = String(ref.name ?? "");
      const o = lookup(api, ns, resource, name);
      if (!o) {
        if (ref.optional === true) continue;
        throw new ContainerConfigError(`${kindName(resource)} "${name}" not found`);
      }
      for (const [k, v] of Object.entries(dataOf(o, resource))) env[`${prefix}${k}`] = v;
    }
  }
  for (const e of (Array.isArray(container.env) ? container.env : []).filter(isObject)) {
    const name = String(e.name ?? "");
    if (typeof e.value === "string") {
      env[name] = expand(e.value, env);
      continue;
    }
    const vf = isObject(e.valueFrom) ? e.valueFrom : undefined;
    if (!vf) {
      env[name] = "";
      continue;
    }
    for (const [field, resource] of [
      ["secretKeyRef", "secrets"],
      ["configMapKeyRef", "configmaps"],
    ] as const) {
      const ref = vf[field];
      if (!isObject(ref)) continue;
      const refName = String(ref.name ?? "");
      const key = String(ref.key ?? "");
      const o = lookup(api, ns, resource, refName);
      if (!o) {
        if (ref.optional === true) continue;
        throw new ContainerConfigError(`${kindName(resource)} "${refName}" not found`);
      }
      const data = dataOf(o, resource);
      if (data[key] === undefined) {
        if (ref.optional === true) continue;
        throw new ContainerConfigError(
          `couldn't find key ${key} in ${resource === "secrets" ? "Secret" : "ConfigMap"} ${ns}/${refName}`,
        );
      }
      env[name] = data[key];
    }
    if (isObject(vf.fieldRef)) {
      const v = fieldRefValue(pod, String(vf.fieldRef.fieldPath ?? ""), podIP);
      if (v === undefined) throw new ContainerConfigError(`unsupported fieldPath: ${String(vf.fieldRef.fieldPath)}`);
      env[name] = v;
    }
    if (isObject(vf.resourceFieldRef)) {
      const resources = isObject(container.resources) ? container.resources : {};
      const res = String(vf.resourceFieldRef.resource ?? "");
      const [kind, what] = res.split(".");
      const set = isObject(resources[kind ?? ""]) ? (resources[kind ?? ""] as JsonObject) : {};
      env[name] = String(set[what ?? ""] ?? (what === "memory" ? "8589934592" : "2"));
    }
  }
  return env;
}
