/** The three PATCH formats of the API: JSON merge, strategic merge and JSON patch. */
import { badRequest, StatusError } from "./status-error.js";
import type { JsonObject } from "./types.js";
import { clone, deepEqual, isObject } from "./types.js";

/** RFC 7386: objects merge recursively, null deletes, anything else replaces. */
export function mergePatch(target: unknown, patch: unknown): unknown {
  if (!isObject(patch)) return clone(patch);
  const out: JsonObject = isObject(target) ? clone(target) : {};
  for (const [k, v] of Object.entries(patch)) {
    if (v === null) delete out[k];
    else out[k] = mergePatch(out[k], v);
  }
  return out;
}

/**
 * Merge keys of the built-in types' lists (`patchMergeKey` in the Go structs). Keyed by
 * field name, which is unambiguous for the kinds this cluster serves.
 */
const mergeKeys: Record<string, string> = {
  containers: "name",
  initContainers: "name",
  ephemeralContainers: "name",
  env: "name",
  volumes: "name",
  volumeMounts: "mountPath",
  volumeDevices: "devicePath",
  ports: "containerPort",
  imagePullSecrets: "name",
  ownerReferences: "uid",
  conditions: "type",
  hostAliases: "ip",
  topologySpreadConstraints: "topologyKey",
  resourceClaims: "name",
  podConditions: "type",
};

/** Lists of scalars merged as sets (`patchStrategy:"merge"` without a key). */
const primitiveMergeLists = new Set(["finalizers"]);

/** Strategic merge patch as the API server applies it to built-in kinds. */
export function strategicMergePatch(target: unknown, patch: unknown): unknown {
  if (!isObject(patch)) return clone(patch);
  return mergeMap(isObject(target) ? target : {}, patch);
}

function mergeMap(original: JsonObject, patch: JsonObject): JsonObject {
  if (patch.$patch === "replace") {
    const out = clone(patch);
    delete out.$patch;
    return out;
  }
  if (patch.$patch === "delete") return {};
  const out = clone(original);
  const retainKeys = Array.isArray(patch.$retainKeys) ? patch.$retainKeys.map(String) : undefined;
  const orders: [string, unknown[]][] = [];
  for (const [key, value] of Object.entries(patch)) {
    if (key === "$patch" || key === "$retainKeys") continue;
    if (key.startsWith("$setElementOrder/")) {
      if (Array.isArray(value)) orders.push([key.slice("$setElementOrder/".length), value]);
      continue;
    }
    if (key.startsWith("$deleteFromPrimitiveList/")) {
      const field = key.slice("$deleteFromPrimitiveList/".length);
      const remove = Array.isArray(value) ? value : [];
      const cur = out[field];
      if (Array.isArray(cur)) out[field] = cur.filter((v) => !remove.some((r) => deepEqual(r, v)));
      continue;
    }
    if (value === null) {
      delete out[key];
      continue;
    }
    const cur = out[key];
    if (isObject(value)) {
      if (value.$patch === "delete") delete out[key];
      else out[key] = mergeMap(isObject(cur) ? cur : {}, value);
    } else if (Array.isArray(value)) {
      out[key] = mergeList(key, Array.isArray(cur) ? cur : [], value);
    } else {
      out[key] = value;
    }
  }
  for (const [field, order] of orders) {
    const list = out[field];
    if (Array.isArray(list)) out[field] = reorder(field, list, order);
  }
  if (retainKeys) for (const k of Object.keys(out)) if (!retainKeys.includes(k) && !(k in patch)) delete out[k];
  return out;
}

function mergeList(field: string, original: unknown[], patch: unknown[]): unknown[] {
  const mergeKey = mergeKeys[field];
  if (patch.some((p) => isObject(p) && p.$patch === "replace")) {
    return clone(patch.filter((p) => !(isObject(p) && p.$patch === "replace")));
  }
  if (primitiveMergeLists.has(field)) {
    const out = [...original];
    for (const v of patch) if (!out.some((o) => deepEqual(o, v))) out.push(v);
    return out;
  }
  if (!mergeKey) return clone(patch);
  const out = clone(original);
  for (const item of patch) {
    if (!isObject(item)) continue;
    const keyValue = item[mergeKey];
    const index = out.findIndex((o) => isObject(o) && deepEqual(o[mergeKey], keyValue));
    if (item.$patch === "delete") {
      if (index >= 0) out.splice(index, 1);
      continue;
    }
    if (index >= 0) out[index] = mergeMap(out[index] as JsonObject, item);
    else out.push(mergeMap({}, item));
  }
  return out;
}

function reorder(field: string, list: unknown[], order: unknown[]): unknown[] {
  const mergeKey = mergeKeys[field];
  const keyOf = (v: unknown): unknown => (mergeKey && isObject(v) ? v[mergeKey] : v);
  const rank = (v: unknown): number => {
    const i = order.findIndex((o) => deepEqual(keyOf(o), keyOf(v)));
    return i < 0 ? order.length : i;
  };
  return [...list].sort((a, b) => rank(a) - rank(b));
}

/** RFC 6902 JSON patch. Failed `test` operations and bad paths answer 422 / 400 like the server. */
export function jsonPatch(target: unknown, ops: unknown): unknown {
  if (!Array.isArray(ops)) throw badRequest("json patch must be an array of operations");
  let doc: unknown = clone(target);
  for (const raw of ops) {
    if (!isObject(raw) || typeof raw.op !== "string" || typeof raw.path !== "string")
      throw badRequest("invalid JSON patch operation");
    const op = raw.op;
    const path = parsePointer(raw.path);
    switch (op) {
      case "add":
        doc = setAt(doc, path, clone(raw.value), "add");
        break;
      case "replace":
        getAt(doc, path);
        doc = setAt(doc, path, clone(raw.value), "replace");
        break;
      case "remove":
        doc = removeAt(doc, path);
        break;
      case "move": {
        const from = parsePointer(String(raw.from));
        const v = getAt(doc, from);
        doc = setAt(removeAt(doc, from), path, v, "add");
        break;
      }
      case "copy":
        doc = setAt(doc, path, clone(getAt(doc, parsePointer(String(raw.from)))), "add");
        break;
      case "test":
        if (!deepEqual(getAt(doc, path), raw.value))
          throw new StatusError(
            422,
            "Invalid",
            `the server rejected our request due to an error in our request: testing value ${raw.path} failed`,
          );
        break;
      default:
        throw badRequest(`unexpected JSON patch operation "${op}"`);
    }
  }
  return doc;
}

function parsePointer(pointer: string): string[] {
  if (pointer === "") return [];
  if (!pointer.startsWith("/")) throw badRequest(`invalid JSON pointer ${pointer}`);
  return pointer
    .slice(1)
    .split("/")
    .map((p) => p.replace(/~1/g, "/").replace(/~0/g, "~"));
}

function missing(path: string[]): StatusError {
  return new StatusError(
    422,
    "Invalid",
    `the server rejected our request due to an error in our request: path /${path.join("/")} does not exist`,
  );
}

function getAt(doc: unknown, path: string[]): unknown {
  let cur = doc;
  for (const p of path) {
    if (Array.isArray(cur)) cur = cur[Number(p)];
    else if (isObject(cur) && p in cur) cur = cur[p];
    else throw missing(path);
    if (cur === undefined) throw missing(path);
  }
  return cur;
}

function setAt(doc: unknown, path: string[], value: unknown, mode: "add" | "replace"): unknown {
  if (path.length === 0) return value;
  const parent = getAt(doc, path.slice(0, -1));
  const last = path[path.length - 1] ?? "";
  if (Array.isArray(parent)) {
    const index = last === "-" ? parent.length : Number(last);
    if (!Number.isInteger(index) || index < 0 || index > parent.length) throw missing(path);
    if (mode === "add") parent.splice(index, 0, value);
    else parent[index] = value;
  } else if (isObject(parent)) {
    parent[last] = value;
  } else throw missing(path);
  return doc;
}

function removeAt(doc: unknown, path: string[]): unknown {
  const parent = getAt(doc, path.slice(0, -1));
  const last = path[path.length - 1] ?? "";
  if (Array.isArray(parent)) {
    const index = Number(last);
    if (!Number.isInteger(index) || index < 0 || index >= parent.length) throw missing(path);
    parent.splice(index, 1);
  } else if (isObject(parent) && last in parent) delete parent[last];
  else throw missing(path);
  return doc;
}
