/*
 * Kubernetes strategic merge patch for pod templates, as `kubectl patch --type strategic`
 * applies it to the fields users customise: objects merge key by key; lists of named things
 * (containers, initContainers, volumes, env, volumeMounts, envFrom by prefix is not keyed)
 * merge element by element on their merge key; other lists are replaced; `null` deletes.
 */

type Json = null | boolean | number | string | Json[] | { [key: string]: Json };

/** Merge keys of the pod-spec lists that Kubernetes merges element-wise. */
const mergeKeys: Record<string, string> = {
  containers: "name",
  initContainers: "name",
  ephemeralContainers: "name",
  volumes: "name",
  env: "name",
  volumeMounts: "mountPath",
  volumeDevices: "devicePath",
  ports: "containerPort",
  imagePullSecrets: "name",
  hostAliases: "ip",
  topologySpreadConstraints: "topologyKey",
  resourceClaims: "name",
};

const isObject = (v: unknown): v is { [key: string]: Json } => typeof v === "object" && v !== null && !Array.isArray(v);

function mergeList(base: Json[], patch: Json[], key: string): Json[] {
  const out = [...base];
  for (const item of patch) {
    if (!isObject(item) || item[key] === undefined) {
      out.push(item);
      continue;
    }
    const at = out.findIndex((b) => isObject(b) && b[key] === item[key]);
    if (at >= 0) out[at] = strategicMerge(out[at] as Json, item);
    else out.push(item);
  }
  return out;
}

/** Returns `base` with `patch` applied by strategic-merge rules; neither input is modified. */
export function strategicMerge<T>(base: T, patch: unknown): T {
  if (!isObject(patch) || !isObject(base)) return (patch === undefined ? base : patch) as T;
  const out: { [key: string]: Json } = { ...(base as { [key: string]: Json }) };
  for (const [k, v] of Object.entries(patch)) {
    if (v === null) {
      delete out[k];
    } else if (Array.isArray(v) && Array.isArray(out[k]) && mergeKeys[k]) {
      out[k] = mergeList(out[k] as Json[], v, mergeKeys[k]!);
    } else if (isObject(v) && isObject(out[k])) {
      out[k] = strategicMerge(out[k], v);
    } else {
      out[k] = v;
    }
  }
  return out as T;
}
