/**
 * Pod volumes materialised on the host: emptyDir → a per-pod temp dir; secret,
 * configMap, downwardAPI and projected → files written into one; hostPath and
 * persistentVolumeClaim → directories under the cluster's data dir that survive the
 * pod (one "node", so pods sharing a hostPath share it).
 */
import { chmodSync, chownSync, existsSync, lstatSync, mkdirSync, readdirSync, statSync, writeFileSync } from "node:fs";
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
  /** The token of the pod's ServiceAccount (what a projected serviceAccountToken source holds). */
  serviceAccountToken(namespace: string, serviceAccount: string): string;
}

/**
 * fsGroup as kubelet applies it to a volume it owns: group ownership of every entry,
 * group read (read-only volumes) or read-write access, and setgid directories.
 */
function applyFsGroup(path: string, gid: number, readOnly: boolean): void {
  const st = lstatSync(path);
  if (st.isSymbolicLink()) return;
  chownSync(path, st.uid, gid);
  let mode = st.mode & 0o7777;
  mode |= readOnly ? 0o440 : 0o660;
  if (st.isDirectory()) {
    mode |= 0o2110;
    for (const e of readdirSync(path)) applyFsGroup(join(path, e), gid, readOnly);
  }
  chmodSync(path, mode);
}

function fsGroupOf(pod: KObject): number | undefined {
  const spec = isObject(pod.spec) ? pod.spec : {};
  const sc = isObject(spec.securityContext) ? spec.securityContext : {};
  return typeof sc.fsGroup === "number" ? sc.fsGroup : undefined;
}

function owned(pod: KObject, v: PreparedVolume): PreparedVolume {
  const gid = fsGroupOf(pod);
  if (gid !== undefined && process.getuid?.() === 0) applyFsGroup(v.hostPath, gid, v.readOnly);
  return v;
}

/** hostPath `type` checks (and creation for the *OrCreate types), with kubelet's messages. */
function hostPathVolume(name: string, path: string, host: string, type: string): PreparedVolume {
  const fail = (what: string): never => {
    throw new VolumeError(
      `MountVolume.SetUp failed for volume "${name}" : hostPath type check failed: ${path} is not ${what}`,
    );
  };
  const exists = existsSync(host);
  const st = exists ? statSync(host) : undefined;
  switch (type) {
    case "Directory":
      if (!st?.isDirectory()) fail("a directory");
      break;
    case "DirectoryOrCreate":
      if (!st) {
        mkdirSync(host, { recursive: true, mode: 0o755 });
        chmodSync(host, 0o755);
      } else if (!st.isDirectory()) fail("a directory");
      break;
    case "File":
      if (!st?.isFile()) fail("a file");
      break;
    case "FileOrCreate":
      if (!st) {
        if (!existsSync(dirname(host)))
          throw new VolumeError(
            `MountVolume.SetUp failed for volume "${name}" : hostPath type check failed: ${path}: parent directory does not exist`,
          );
        writeFileSync(host, "", { mode: 0o644 });
      } else if (!st.isFile()) fail("a file");
      break;
    case "Socket":
      if (!st?.isSocket()) fail("a socket file");
      break;
    case "CharDevice":
      if (!st?.isCharacterDevice()) fail("a character device");
      break;
    case "BlockDevice":
      if (!st?.isBlockDevice()) fail("a block device");
      break;
    case "":
      // No check; the runtime creates a missing path as a root-owned directory when it binds it.
      if (!exists) mkdirSync(host, { recursive: true, mode: 0o755 });
      break;
    default:
      throw new VolumeError(`MountVolume.SetUp failed for volume "${name}" : hostPath type "${type}" is not supported`);
  }
  return { hostPath: host, readOnly: false };
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

function projectData(
  data: Record<string, Buffer>,
  items: unknown,
  defaultMode: number,
  what: string,
  optional: boolean,
): { path: string; data: Buffer; mode: number }[] {
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

function sourceData(
  ctx: VolumeContext,
  ns: string,
  resource: "secrets" | "configmaps",
  name: string,
  optional: boolean,
): Record<string, Buffer> | undefined {
  const o = ctx.api.tryGet(ctx.api.type("", resource), ns, name);
  if (!o) {
    if (optional) return {};
    return undefined;
  }
  const out: Record<string, Buffer> = {};
  const data = isObject(o.data) ? o.data : {};
  for (const [k, v] of Object.entries(data))
    out[k] = resource === "secrets" ? Buffer.from(String(v), "base64") : Buffer.from(String(v), "utf8");
  if (isObject(o.binaryData))
    for (const [k, v] of Object.entries(o.binaryData)) out[k] = Buffer.from(String(v), "base64");
  return out;
}

function downwardFiles(
  pod: KObject,
  items: unknown,
  defaultMode: number,
): { path: string; data: Buffer; mode: number }[] {
  return (Array.isArray(items) ? items : []).filter(isObject).map((it) => {
    const ref = isObject(it.fieldRef) ? String(it.fieldRef.fieldPath ?? "") : "";
    return {
      path: String(it.path ?? ""),
      data: Buffer.from(fieldRefValue(pod, ref) ?? ""),
      mode: typeof it.mode === "number" ? it.mode : defaultMode,
    };
  });
}

export function prepareVolume(ctx: VolumeContext, pod: KObject, v: JsonObject): PreparedVolume {
  const ns = pod.metadata.namespace ?? "default";
  const name = String(v.name ?? "");
  const dir = join(ctx.podDir, "volumes", name);
  if (isObject(v.emptyDir) || Object.keys(v).length === 1) {
    // World-writable like kubelet's emptyDir, so any runAsUser can use it.
    mkdirSync(dir, { recursive: true });
    chmodSync(dir, 0o777);
    return owned(pod, { hostPath: dir, readOnly: false });
  }
  if (isObject(v.hostPath)) {
    const p = String(v.hostPath.path ?? "/");
    if (ctx.hostPathRoot !== undefined) mkdirSync(ctx.hostPathRoot, { recursive: true });
    const host = ctx.hostPathRoot === undefined ? p : join(ctx.hostPathRoot, p);
    return hostPathVolume(name, p, host, String(v.hostPath.type ?? ""));
  }
  if (isObject(v.persistentVolumeClaim)) {
    const host = join(ctx.pvcRoot, ns, String(v.persistentVolumeClaim.claimName ?? ""));
    mkdirSync(host, { recursive: true });
    return owned(pod, { hostPath: host, readOnly: v.persistentVolumeClaim.readOnly === true });
  }
  for (const [field, resource, nameField] of [
    ["secret", "secrets", "secretName"],
    ["configMap", "configmaps", "name"],
  ] as const) {
    const src = v[field];
    if (!isObject(src)) continue;
    const refName = String(src[nameField] ?? "");
    const optional = src.optional === true;
    const data = sourceData(ctx, ns, resource, refName, optional);
    if (!data)
      throw new VolumeError(
        `MountVolume.SetUp failed for volume "${name}" : ${resource === "secrets" ? "secret" : "configmap"} "${refName}" not found`,
      );
    const mode = typeof src.defaultMode === "number" ? src.defaultMode : 0o644;
    writeFiles(dir, projectData(data, src.items, mode, resource === "secrets" ? "secret" : "configmap", optional));
    return owned(pod, { hostPath: dir, readOnly: true });
  }
  if (isObject(v.downwardAPI)) {
    const mode = typeof v.downwardAPI.defaultMode === "number" ? v.downwardAPI.defaultMode : 0o644;
    writeFiles(dir, downwardFiles(pod, v.downwardAPI.items, mode));
    return owned(pod, { hostPath: dir, readOnly: true });
  }
  if (isObject(v.projected)) {
    const mode = typeof v.projected.defaultMode === "number" ? v.projected.defaultMode : 0o644;
    const files: { path: string; data: Buffer; mode: number }[] = [];
    for (const s of (Array.isArray(v.projected.sources) ? v.projected.sources : []).filter(isObject)) {
      for (const [field, resource] of [
        ["secret", "secrets"],
        ["configMap", "configmaps"],
      ] as const) {
        const src = s[field];
        if (!isObject(src)) continue;
        const refName = String(src.name ?? "");
        const data = sourceData(ctx, ns, resource, refName, src.optional === true);
        if (!data)
          throw new VolumeError(
            `MountVolume.SetUp failed for volume "${name}" : ${resource === "secrets" ? "secret" : "configmap"} "${refName}" not found`,
          );
        files.push(
          ...projectData(data, src.items, mode, resource === "secrets" ? "secret" : "configmap", src.optional === true),
        );
      }
      if (isObject(s.downwardAPI)) files.push(...downwardFiles(pod, s.downwardAPI.items, mode));
      if (isObject(s.serviceAccountToken)) {
        const spec = isObject(pod.spec) ? pod.spec : {};
        files.push({
          path: String(s.serviceAccountToken.path ?? "token"),
          data: Buffer.from(ctx.serviceAccountToken(ns, String(spec.serviceAccountName ?? "default"))),
          mode,
        });
      }
    }
    writeFiles(dir, files);
    return owned(pod, { hostPath: dir, readOnly: true });
  }
  throw new VolumeError(
    `MountVolume.SetUp failed for volume "${name}" : volume type not supported by the test cluster`,
  );
}
