/**
 * Pod volumes materialised on the host: emptyDir → a per-pod temp dir; secret,
 * configMap, downwardAPI and projected → files written into one; hostPath and
 * persistentVolumeClaim → directories under the cluster's data dir that survive the
 * pod (one "node", so pods sharing a hostPath share it).
 */
import { chmodSync, mkdirSync, writeFileSync } from "node:fs";
import { dirname, join } from "node:path";
import type { ObjectApi } from "../api/object-api.js";
import type { JsonObject, KObject } from "../api/types.js";
import { isObject } from "../api/types.js";
import { fieldRefValue } from "./env.js";

export class VolumeError extends Error {
  override name = "VolumeError";
}

export interface PreparedVolume {
  hostPath: string;
  /** Secret, configMap, downwardAPI and projected volumes are always read-only. */
  readOnly: boolean;
}

export interface VolumeContext {
  api: ObjectApi;
  podDir: string;
  /** Root of the simulated node's filesystem for hostPath volumes (undefined: real host paths). */
  hostPathRoot: string | undefined;
  pvcRoot: string;
  token: string;
  caFile?: string;
}

function writeFiles(dir: string, files: { path: string; data: Buffer; mode: number }[]): void {
  mkdirSync(dir, { recursive: true });
  for (const f of files) {
    const p = join(dir, f.path);
    mkdirSync(dirname(p), { recursive: true });
    writeFileSync(p, f.data);
    chmodSync(p, f.mode);
  }
}

function projectData(data: Record<string, Buffer>, items: unknown, defaultMode: number, what: string, optional: boolean): { path: string; data: Buffer; mode: number }[] {
  if (Array.isArray(items) && items.length > 0) {
    const out: { path: string; data: Buffer; mode: number }[] = [];
    for (const it of items.filter(isObject)) {
      const key = String(it.key ?? "");
      const d = data[key];
      if (d === undefined) {
        if (optional) continue;
        throw new VolumeError(`configmap references non-existent config key: ${key}`.replace("configmap", what));
      }
      out.push({ path: String(it.path ?? key), data: d, mode: typeof it.mode === "number" ? it.mode : defaultMode });
    }
    return out;
  }
  return Object.entries(data).map(([k, d]) => ({ path: k, data: d, mode: defaultMode }));
}

function sourceData(ctx: VolumeContext, ns: string, resource: "secrets" | "configmaps", name: string, optional: boolean): Record<string, Buffer> | undefined {
  const o = ctx.api.tryGet(ctx.api.type("", resource), ns, name);
  if (!o) {
    if (optional) return {};
    return undefined;
  }
  const out: Record<string, Buffer> = {};
  const data = isObject(o.data) ? o.data : {};
  for (const [k, v] of Object.entries(data)) out[k] = resource === "secrets" ? Buffer.from(String(v), "base64") : Buffer.from(String(v), "utf8");
  if (isObject(o.binaryData)) for (const [k, v] of Object.entries(o.binaryData)) out[k] = Buffer.from(String(v), "base64");
  return out;
}

function downwardFiles(pod: KObject, items: unknown, defaultMode: number): { path: string; data: Buffer; mode: number }[] {
  return (Array.isArray(items) ? items : []).filter(isObject).map((it) => {
    const ref = isObject(it.fieldRef) ? String(it.fieldRef.fieldPath ?? "") : "";
    return { path: String(it.path ?? ""), data: Buffer.from(fieldRefValue(pod, ref) ?? ""), mode: typeof it.mode === "number" ? it.mode : defaultMode };
  });
}

export function prepareVolume(ctx: VolumeContext, pod: KObject, v: JsonObject): PreparedVolume {
  const ns = pod.metadata.namespace ?? "default";
  const name = String(v.name ?? "");
  const dir = join(ctx.podDir, "volumes", name);
  if (isObject(v.emptyDir) || Object.keys(v).length === 1) {
    mkdirSync(dir, { recursive: true });
    return { hostPath: dir, readOnly: false };
  }
  if (isObject(v.hostPath)) {
    const p = String(v.hostPath.path ?? "/");
    const host = ctx.hostPathRoot === undefined ? p : join(ctx.hostPathRoot, p);
    const type = String(v.hostPath.type ?? "");
    if (type === "File" || type === "FileOrCreate") {
      mkdirSync(dirname(host), { recursive: true });
      writeFileSync(host, "", { flag: "a" });
    } else mkdirSync(host, { recursive: true });
    return { hostPath: host, readOnly: false };
  }
  if (isObject(v.persistentVolumeClaim)) {
    const host = join(ctx.pvcRoot, ns, String(v.persistentVolumeClaim.claimName ?? ""));
    mkdirSync(host, { recursive: true });
    return { hostPath: host, readOnly: v.persistentVolumeClaim.readOnly === true };
  }
  for (const [field, resource, nameField] of [["secret", "secrets", "secretName"], ["configMap", "configmaps", "name"]] as const) {
    const src = v[field];
    if (!isObject(src)) continue;
    const refName = String(src[nameField] ?? "");
    const optional = src.optional === true;
    const data = sourceData(ctx, ns, resource, refName, optional);
    if (!data) throw new VolumeError(`MountVolume.SetUp failed for volume "${name}" : ${resource === "secrets" ? "secret" : "configmap"} "${refName}" not found`);
    const mode = typeof src.defaultMode === "number" ? src.defaultMode : 0o644;
    writeFiles(dir, projectData(data, src.items, mode, resource === "secrets" ? "secret" : "configmap", optional));
    return { hostPath: dir, readOnly: true };
  }
  if (isObject(v.downwardAPI)) {
    const mode = typeof v.downwardAPI.defaultMode === "number" ? v.downwardAPI.defaultMode : 0o644;
    writeFiles(dir, downwardFiles(pod, v.downwardAPI.items, mode));
    return { hostPath: dir, readOnly: true };
  }
  if (isObject(v.projected)) {
    const mode = typeof v.projected.defaultMode === "number" ? v.projected.defaultMode : 0o644;
    const files: { path: string; data: Buffer; mode: number }[] = [];
    for (const s of (Array.isArray(v.projected.sources) ? v.projected.sources : []).filter(isObject)) {
      for (const [field, resource] of [["secret", "secrets"], ["configMap", "configmaps"]] as const) {
        const src = s[field];
        if (!isObject(src)) continue;
        const refName = String(src.name ?? "");
        const data = sourceData(ctx, ns, resource, refName, src.optional === true);
        if (!data) throw new VolumeError(`MountVolume.SetUp failed for volume "${name}" : ${resource === "secrets" ? "secret" : "configmap"} "${refName}" not found`);
        files.push(...projectData(data, src.items, mode, resource === "secrets" ? "secret" : "configmap", src.optional === true));
      }
      if (isObject(s.downwardAPI)) files.push(...downwardFiles(pod, s.downwardAPI.items, mode));
      if (isObject(s.serviceAccountToken)) files.push({ path: String(s.serviceAccountToken.path ?? "token"), data: Buffer.from(ctx.token), mode });
    }
    writeFiles(dir, files);
    return { hostPath: dir, readOnly: true };
  }
  throw new VolumeError(`MountVolume.SetUp failed for volume "${name}" : volume type not supported by the test cluster`);
}
