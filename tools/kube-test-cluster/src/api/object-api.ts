/**
 * The semantics of the REST verbs over the store: create, get, list, update, patch,
 * delete (finalizers, graceful pod deletion, propagation policies), shared by the
 * HTTP layer and by the in-process controllers so both obey the same rules.
 */
import { randomUUID } from "node:crypto";
import { rulesFor, tracksGeneration, validateLabels, validateName } from "./kinds.js";
import { jsonPatch, mergePatch, strategicMergePatch } from "./patch.js";
import type { ResourceRegistry, ResourceType } from "./resources.js";
import { apiVersionOf, compareVersions, typeKey } from "./resources.js";
import { fieldsOf, parseFieldSelector, parseLabelSelector } from "./selectors.js";
import type { StatusCause } from "./status-error.js";
import {
  alreadyExists,
  badRequest,
  conflict,
  gone,
  invalid,
  notFound,
  staleMessage,
  StatusError,
  unsupportedMediaType,
} from "./status-error.js";
import type { Store } from "./store.js";
import type { UserInfo } from "./auth.js";
import type { JsonObject, KObject } from "./types.js";
import { clone, deepEqual, isObject, isoNow, randomSuffix } from "./types.js";

export type PropagationPolicy = "Orphan" | "Background" | "Foreground";

export interface WriteOptions {
  dryRun?: boolean;
  /** `status` writes only the status; anything else writes all but the status. */
  subresource?: "status";
  /** Writes by the cluster's own controllers, allowed to change what clients may not (spec.nodeName). */
  system?: boolean;
  /** The authenticated user of an API request (admission plugins that check permissions need it). */
  user?: UserInfo;
}

/** One write as admission plugins see it. */
export interface AdmissionRequest {
  t: ResourceType;
  operation: "CREATE" | "UPDATE";
  obj: KObject;
  old: KObject | undefined;
  opts: WriteOptions;
}

/** An admission plugin: `mutate` runs before validation, `validate` after; both throw StatusErrors to refuse. */
export interface AdmissionPlugin {
  mutate?(r: AdmissionRequest): void;
  validate?(r: AdmissionRequest): void;
}

export interface DeleteOptions {
  propagationPolicy?: PropagationPolicy;
  orphanDependents?: boolean;
  gracePeriodSeconds?: number;
  preconditions?: { uid?: string; resourceVersion?: string };
  dryRun?: boolean;
}

export interface ListOptions {
  labelSelector?: string | null;
  fieldSelector?: string | null;
  limit?: number;
  continueToken?: string | null;
}

export interface ListResult {
  items: KObject[];
  resourceVersion: string;
  continueToken?: string;
  remainingItemCount?: number;
}

export type PatchType = "json" | "merge" | "strategic" | "apply";

export function patchTypeOf(contentType: string): PatchType {
  const base = contentType.split(";")[0]?.trim() ?? "";
  switch (base) {
    case "application/json-patch+json":
      return "json";
    case "application/merge-patch+json":
      return "merge";
    case "application/strategic-merge-patch+json":
      return "strategic";
    case "application/apply-patch+yaml":
    case "application/apply-patch+cbor":
      return "apply";
    default:
      throw unsupportedMediaType(contentType);
  }
}

/** Field selectors the real server accepts per kind (beyond metadata.name/namespace). */
const selectableFields: Record<string, string[]> = {
  "/pods": [
    "spec.nodeName",
    "spec.restartPolicy",
    "spec.schedulerName",
    "spec.serviceAccountName",
    "spec.hostNetwork",
    "status.phase",
    "status.podIP",
    "status.nominatedNodeName",
  ],
  "/events": [
    "involvedObject.kind",
    "involvedObject.namespace",
    "involvedObject.name",
    "involvedObject.uid",
    "involvedObject.apiVersion",
    "involvedObject.resourceVersion",
    "involvedObject.fieldPath",
    "reason",
    "reportingComponent",
    "source",
    "type",
  ],
  "/secrets": ["type"],
  "/namespaces": ["status.phase"],
  "/nodes": ["spec.unschedulable"],
  "batch/jobs": ["status.successful"],
};

export function checkFieldSelector(t: ResourceType, keys: string[]): void {
  const allowed = ["metadata.name", "metadata.namespace", ...(selectableFields[typeKey(t.group, t.resource)] ?? [])];
  for (const k of keys) if (!allowed.includes(k)) throw badRequest(`field label not supported: ${k}`);
}

export type WriteHook = (t: ResourceType, obj: KObject, removed: boolean) => void;

export class ObjectApi {
  private readonly hooks: WriteHook[] = [];
  /** Admission plugins, in order (ServiceAccount, PodSecurity, ...), run on every create and update but status writes. */
  readonly admission: AdmissionPlugin[] = [];

  constructor(
    readonly store: Store,
    readonly resources: ResourceRegistry,
  ) {}

  /** Runs after every committed write to a type (used to serve CRDs). */
  onWrite(hook: WriteHook): void {
    this.hooks.push(hook);
  }

  type(group: string, resource: string): ResourceType {
    const t = this.resources.get(group, resource);
    if (!t) throw new Error(`unknown resource ${group}/${resource}`);
    return t;
  }

  /** The object as served at `version`: stored once, shown under the version asked for. */
  present(t: ResourceType, obj: KObject, version?: string): KObject {
    const out = clone(obj);
    const v =
      version ??
      (obj.apiVersion.includes("/") ? obj.apiVersion.slice(obj.apiVersion.indexOf("/") + 1) : obj.apiVersion);
    out.apiVersion = apiVersionOf(t.group, t.versions.includes(v) ? v : (t.versions[0] ?? v));
    out.kind = t.kind;
    return out;
  }

  get(t: ResourceType, ns: string | undefined, name: string, version?: string): KObject {
    const o = this.store.get(typeKey(t.group, t.resource), t.namespaced ? ns : undefined, name);
    if (!o) throw notFound(t.resource, t.group, name);
    return this.present(t, o, version);
  }

  tryGet(t: ResourceType, ns: string | undefined, name: string): KObject | undefined {
    const o = this.store.get(typeKey(t.group, t.resource), t.namespaced ? ns : undefined, name);
    return o && this.present(t, o);
  }

  list(t: ResourceType, ns: string | undefined, opts: ListOptions = {}, version?: string): ListResult {
    const labels = parseLabelSelector(opts.labelSelector);
    const fields = parseFieldSelector(opts.fieldSelector);
    checkFieldSelector(t, fields.keys);
    const rv = this.store.currentRevision;
    let all = this.store.select(
      typeKey(t.group, t.resource),
      t.namespaced ? ns : undefined,
      (o) => labels(o.metadata.labels ?? {}) && fields.selector(fieldsOf(o, fields.keys)),
    );
    let listRv = String(rv);
    if (opts.continueToken) {
      let token: { rv?: number; start?: string };
      try {
        token = JSON.parse(Buffer.from(opts.continueToken, "base64url").toString("utf8")) as {
          rv?: number;
          start?: string;
        };
      } catch {
        throw badRequest("continue key is not valid: illegal base64 data");
      }
      if ((token.rv ?? 0) < this.store.oldestResumable) {
        throw gone(
          "The provided continue parameter is too old to display a consistent list result. You can start a new list without the continue parameter, or use the continue token in this response to retrieve the remainder of the results. Continuing with the provided token results in an inconsistent list - objects that were created, modified, or deleted between the time the first chunk was returned and now may show up in the list.",
        );
      }
      const start = token.start ?? "";
      all = all.filter((o) => `${o.metadata.namespace ?? ""}/${o.metadata.name ?? ""}` > start);
      listRv = String(token.rv ?? rv);
    }
    const items = all.map((o) => this.present(t, o, version));
    if (opts.limit && opts.limit > 0 && items.length > opts.limit) {
      const page = items.slice(0, opts.limit);
      const last = page[page.length - 1];
      const start = `${last?.metadata.namespace ?? ""}/${last?.metadata.name ?? ""}`;
      return {
        items: page,
        resourceVersion: listRv,
        continueToken: Buffer.from(JSON.stringify({ rv: Number(listRv), start })).toString("base64url"),
        remainingItemCount: items.length - page.length,
      };
    }
    return { items, resourceVersion: listRv };
  }

  private checkNamespace(t: ResourceType, ns: string | undefined, creating: boolean): void {
    if (!t.namespaced) return;
    if (!ns) throw badRequest("the server could not find the requested resource: a namespace is required");
    const nsObj = this.store.get("/namespaces", undefined, ns);
    if (!nsObj) throw notFound("namespaces", "", ns);
    if (creating && nsObj.metadata.deletionTimestamp) {
      throw new StatusError(
        403,
        "Forbidden",
        `${t.resource} "${"(new)"}" is forbidden: unable to create new content in namespace ${ns} because it is being terminated`,
        {
          kind: t.resource,
          group: t.group,
          causes: [
            {
              reason: "NamespaceTerminating",
              message: `namespace ${ns} is being terminated`,
              field: "metadata.namespace",
            },
          ],
        },
      );
    }
  }

  create(t: ResourceType, ns: string | undefined, body: unknown, opts: WriteOptions = {}, version?: string): KObject {
    if (!isObject(body)) throw badRequest("the body of the request was not a JSON object");
    const obj = clone(body) as KObject;
    obj.metadata = isObject(obj.metadata) ? obj.metadata : {};
    const meta = obj.metadata;
    if (t.namespaced) {
      if (meta.namespace && ns && meta.namespace !== ns)
        throw badRequest("the namespace of the provided object does not match the namespace sent on the request");
      meta.namespace = ns;
    } else delete meta.namespace;
    this.checkNamespace(t, ns, true);
    const key = typeKey(t.group, t.resource);
    if (!meta.name && meta.generateName) {
      do meta.name = `${meta.generateName}${randomSuffix()}`;
      while (this.store.get(key, meta.namespace, meta.name));
    }
    const name = meta.name ?? "";
    if (name === "")
      throw invalid(t.kind, t.group, "", [
        {
          reason: "FieldValueRequired",
          field: "metadata.name",
          message: "Required value: name or generateName is required",
        },
      ]);
    const causes: StatusCause[] = [];
    const nameError = validateName(name, t.resource === "namespaces");
    if (nameError)
      causes.push({
        reason: "FieldValueInvalid",
        field: "metadata.name",
        message: `Invalid value: "${name}": ${nameError}`,
      });
    if (this.store.get(key, meta.namespace, name)) throw alreadyExists(t.resource, t.group, name);
    obj.apiVersion = apiVersionOf(t.group, version ?? t.versions[0] ?? "v1");
    obj.kind = t.kind;
    meta.uid = randomUUID();
    meta.creationTimestamp = isoNow();
    delete meta.resourceVersion;
    delete meta.deletionTimestamp;
    delete meta.deletionGracePeriodSeconds;
    delete meta.managedFields;
    delete meta.selfLink;
    if (tracksGeneration(t)) meta.generation = 1;
    else delete meta.generation;
    mergeStringData(obj);
    const rules = rulesFor(t, version ?? t.versions[0] ?? "v1");
    rules.defaultOnCreate?.(obj);
    const review: AdmissionRequest = { t, operation: "CREATE", obj, old: undefined, opts };
    for (const a of this.admission) a.mutate?.(review);
    if (t.statusSubresource) {
      const status = rules.initialStatus?.(obj);
      if (status === undefined) delete obj.status;
      else obj.status = status;
    }
    causes.push(
      ...validateLabels(meta.labels, "metadata.labels"),
      ...(rules.validate?.(obj, undefined, opts.system === true) ?? []),
    );
    if (causes.length > 0) throw invalid(t.kind, t.group, name, causes);
    for (const a of this.admission) a.validate?.(review);
    if (opts.dryRun) return this.present(t, obj, version);
    const stored = this.store.put(key, obj);
    for (const h of this.hooks) h(t, stored, false);
    return this.present(t, stored, version);
  }

  update(
    t: ResourceType,
    ns: string | undefined,
    name: string,
    body: unknown,
    opts: WriteOptions = {},
    version?: string,
  ): KObject {
    if (!isObject(body)) throw badRequest("the body of the request was not a JSON object");
    const key = typeKey(t.group, t.resource);
    const old = this.store.get(key, t.namespaced ? ns : undefined, name);
    if (!old) throw notFound(t.resource, t.group, name);
    const incoming = clone(body) as KObject;
    incoming.metadata = isObject(incoming.metadata) ? incoming.metadata : {};
    if (incoming.metadata.name !== undefined && incoming.metadata.name !== name)
      throw badRequest(
        `the name of the object (${String(incoming.metadata.name)}) does not match the name on the URL (${name})`,
      );
    if (t.namespaced && incoming.metadata.namespace && incoming.metadata.namespace !== ns)
      throw badRequest("the namespace of the provided object does not match the namespace sent on the request");
    const rvIn = incoming.metadata.resourceVersion;
    if (rvIn !== undefined && rvIn !== "" && rvIn !== old.metadata.resourceVersion)
      throw conflict(t.resource, t.group, name, staleMessage);
    if (incoming.metadata.uid && incoming.metadata.uid !== old.metadata.uid) {
      throw conflict(
        t.resource,
        t.group,
        name,
        `Precondition failed: UID in precondition: ${String(incoming.metadata.uid)}, UID in object meta: ${old.metadata.uid ?? ""}`,
      );
    }
    let obj: KObject;
    if (opts.subresource === "status") {
      obj = clone(old);
      obj.status = incoming.status;
      if (incoming.status === undefined) delete obj.status;
    } else {
      obj = incoming;
      const m = obj.metadata;
      for (const f of [
        "uid",
        "creationTimestamp",
        "deletionTimestamp",
        "deletionGracePeriodSeconds",
        "generation",
        "namespace",
      ] as const) {
        const prev: unknown = old.metadata[f];
        if (prev === undefined) delete m[f];
        else (m as Record<string, unknown>)[f] = prev;
      }
      m.name = name;
      delete m.managedFields;
      if (t.statusSubresource) {
        if (old.status === undefined) delete obj.status;
        else obj.status = old.status;
      }
      mergeStringData(obj);
      if (old.metadata.deletionTimestamp) {
        const added = (m.finalizers ?? []).filter((f) => !(old.metadata.finalizers ?? []).includes(f));
        if (added.length > 0)
          throw invalid(t.kind, t.group, name, [
            {
              reason: "FieldValueForbidden",
              field: "metadata.finalizers",
              message: `Forbidden: no new finalizers can be added if the object is being deleted, found new finalizers []string{"${added.join('", "')}"}`,
            },
          ]);
      }
    }
    obj.apiVersion = old.apiVersion;
    obj.kind = t.kind;
    obj.metadata.resourceVersion = old.metadata.resourceVersion;
    if (tracksGeneration(t) && !deepEqual(specView(obj), specView(old)))
      obj.metadata.generation = (old.metadata.generation ?? 1) + 1;
    const rules = rulesFor(t, version ?? t.versions[0] ?? "v1");
    const review: AdmissionRequest = { t, operation: "UPDATE", obj, old, opts };
    if (opts.subresource === undefined) for (const a of this.admission) a.mutate?.(review);
    const causes = [
      ...validateLabels(obj.metadata.labels, "metadata.labels"),
      ...(rules.validate?.(obj, old, opts.system === true) ?? []),
    ];
    if (causes.length > 0) throw invalid(t.kind, t.group, name, causes);
    if (opts.subresource === undefined) for (const a of this.admission) a.validate?.(review);
    if (deepEqual(obj, old)) return this.present(t, old, version);
    if (opts.dryRun) return this.present(t, obj, version);
    const stored = this.store.put(key, obj);
    const meta = stored.metadata;
    if (
      meta.deletionTimestamp &&
      (meta.finalizers ?? []).length === 0 &&
      (meta.deletionGracePeriodSeconds ?? 0) === 0
    ) {
      return this.present(t, this.removeNow(t, stored), version);
    }
    for (const h of this.hooks) h(t, stored, false);
    return this.present(t, stored, version);
  }

  patch(
    t: ResourceType,
    ns: string | undefined,
    name: string,
    type: PatchType,
    body: unknown,
    opts: WriteOptions = {},
    version?: string,
  ): KObject {
    const key = typeKey(t.group, t.resource);
    const old = this.store.get(key, t.namespaced ? ns : undefined, name);
    if (!old) {
      if (type === "apply" && opts.subresource === undefined)
        return this.create(t, ns, { ...(isObject(body) ? body : {}) }, opts, version);
      throw notFound(t.resource, t.group, name);
    }
    const base = this.present(t, old, version);
    let result: unknown;
    switch (type) {
      case "merge":
        result = mergePatch(base, body);
        break;
      case "strategic":
        if (t.custom) throw unsupportedMediaType("application/strategic-merge-patch+json");
        result = strategicMergePatch(base, body);
        break;
      case "json":
        result = jsonPatch(base, body);
        break;
      case "apply":
        // Server-side apply approximated: the applied configuration is merged in.
        result = t.custom ? mergePatch(base, body) : strategicMergePatch(base, body);
        break;
    }
    if (!isObject(result)) throw badRequest("the patch produced something other than an object");
    const patched = result as KObject;
    patched.metadata = isObject(patched.metadata) ? patched.metadata : {};
    const patchMeta = isObject(body) && isObject(body.metadata) ? body.metadata : undefined;
    const patchedRv = type === "json" ? patched.metadata.resourceVersion : patchMeta?.resourceVersion;
    if (patchedRv === undefined || patchedRv === null) patched.metadata.resourceVersion = old.metadata.resourceVersion;
    return this.update(t, ns, name, patched, opts, version);
  }

  /**
   * DELETE. Objects with finalizers (including those added for Orphan and Foreground
   * propagation) and pods still running on a node get a deletionTimestamp and stay;
   * everything else goes at once and the garbage collector deletes dependents.
   */
  delete(t: ResourceType, ns: string | undefined, name: string, opts: DeleteOptions = {}, version?: string): KObject {
    const key = typeKey(t.group, t.resource);
    const old = this.store.get(key, t.namespaced ? ns : undefined, name);
    if (!old) throw notFound(t.resource, t.group, name);
    if (opts.preconditions?.uid && opts.preconditions.uid !== old.metadata.uid) {
      throw conflict(
        t.resource,
        t.group,
        name,
        `Precondition failed: UID in precondition: ${opts.preconditions.uid}, UID in object meta: ${old.metadata.uid ?? ""}`,
      );
    }
    if (opts.preconditions?.resourceVersion && opts.preconditions.resourceVersion !== old.metadata.resourceVersion) {
      throw conflict(
        t.resource,
        t.group,
        name,
        `Precondition failed: ResourceVersion in precondition: ${opts.preconditions.resourceVersion}, ResourceVersion in object meta: ${old.metadata.resourceVersion ?? ""}`,
      );
    }
    const policy: PropagationPolicy =
      opts.propagationPolicy ??
      (opts.orphanDependents === true
        ? "Orphan"
        : opts.orphanDependents === false
          ? "Background"
          : (rulesFor(t, t.versions[0] ?? "v1").defaultPropagation ?? "Background"));
    if (!["Orphan", "Background", "Foreground"].includes(policy))
      throw badRequest(
        `Unsupported value: "${String(policy)}": supported values: "Foreground", "Background", "Orphan"`,
      );
    if (opts.dryRun) return this.present(t, old, version);
    const obj = clone(old);
    const meta = obj.metadata;
    if (t.group === "" && t.resource === "namespaces") {
      if (!meta.deletionTimestamp) {
        meta.deletionTimestamp = isoNow();
        meta.deletionGracePeriodSeconds = 0;
        obj.status = { phase: "Terminating" };
        return this.present(t, this.store.put(key, obj), version);
      }
      return this.present(t, old, version);
    }
    let grace = 0;
    if (t.group === "" && t.resource === "pods") {
      const spec = isObject(obj.spec) ? obj.spec : {};
      const status = isObject(obj.status) ? obj.status : {};
      grace =
        opts.gracePeriodSeconds ??
        (typeof spec.terminationGracePeriodSeconds === "number" ? spec.terminationGracePeriodSeconds : 30);
      if (!spec.nodeName || status.phase === "Succeeded" || status.phase === "Failed") grace = 0;
      if (grace < 0) grace = 0;
    }
    const finalizers = [...(meta.finalizers ?? [])];
    if (!meta.deletionTimestamp) {
      if (policy === "Orphan" && !finalizers.includes("orphan")) finalizers.push("orphan");
      if (policy === "Foreground" && !finalizers.includes("foregroundDeletion")) finalizers.push("foregroundDeletion");
    }
    if (finalizers.length === 0 && grace === 0) return this.present(t, this.removeNow(t, obj), version);
    if (meta.deletionTimestamp) {
      // Already being deleted: a second DELETE may only shorten a pod's grace period.
      if (grace < (meta.deletionGracePeriodSeconds ?? 0)) {
        meta.deletionGracePeriodSeconds = grace;
        const stored = this.store.put(key, obj);
        if (grace === 0 && (stored.metadata.finalizers ?? []).length === 0)
          return this.present(t, this.removeNow(t, stored), version);
        return this.present(t, stored, version);
      }
      return this.present(t, old, version);
    }
    meta.deletionTimestamp = isoNow(Date.now() + grace * 1000);
    meta.deletionGracePeriodSeconds = grace;
    meta.finalizers = finalizers;
    if (meta.generation !== undefined) meta.generation += 1;
    const stored = this.store.put(key, obj);
    for (const h of this.hooks) h(t, stored, false);
    return this.present(t, stored, version);
  }

  /** Removes an object from storage now, whatever its finalizers (namespace/CRD cleanup, final pod removal). */
  removeNow(t: ResourceType, obj: KObject): KObject {
    const removed = this.store.remove(
      typeKey(t.group, t.resource),
      t.namespaced ? obj.metadata.namespace : undefined,
      obj.metadata.name ?? "",
    );
    const out = removed ?? obj;
    for (const h of this.hooks) h(t, out, true);
    return out;
  }

  deleteCollection(t: ResourceType, ns: string | undefined, list: ListOptions, opts: DeleteOptions = {}): KObject[] {
    const { items } = this.list(t, ns, list);
    const out: KObject[] = [];
    for (const o of items) {
      try {
        out.push(this.delete(t, ns, o.metadata.name ?? "", opts));
      } catch (e) {
        if (!(e instanceof StatusError && e.code === 404)) throw e;
      }
    }
    return out;
  }

  /**
   * Read-modify-write for controllers: applies `mutate` to the latest object and
   * retries on conflicts. Returns undefined when the object is gone.
   */
  mutate(
    t: ResourceType,
    ns: string | undefined,
    name: string,
    mutate: (o: KObject) => void,
    subresource?: "status",
  ): KObject | undefined {
    for (let attempt = 0; attempt < 5; attempt++) {
      const cur = this.tryGet(t, ns, name);
      if (!cur) return undefined;
      mutate(cur);
      try {
        return this.update(t, ns, name, cur, { system: true, ...(subresource ? { subresource } : {}) });
      } catch (e) {
        if (e instanceof StatusError && e.code === 409) continue;
        if (e instanceof StatusError && e.code === 404) return undefined;
        throw e;
      }
    }
    throw new Error(`could not update ${t.resource} ${ns ?? ""}/${name} after 5 attempts`);
  }

  /** Types in discovery order, highest version first (for kubectl's resource resolution). */
  typesSorted(): ResourceType[] {
    return this.resources
      .all()
      .sort((a, b) => a.group.localeCompare(b.group) || compareVersions(a.versions[0] ?? "", b.versions[0] ?? ""));
  }
}

function specView(o: KObject): JsonObject {
  const out: JsonObject = { ...o };
  delete out.metadata;
  delete out.status;
  delete out.apiVersion;
  delete out.kind;
  return out;
}

/** Secrets: `stringData` is write-only and lands base64-encoded in `data`. */
function mergeStringData(obj: KObject): void {
  if (obj.kind !== "Secret" || !isObject(obj.stringData)) return;
  const data = isObject(obj.data) ? obj.data : {};
  for (const [k, v] of Object.entries(obj.stringData)) data[k] = Buffer.from(String(v), "utf8").toString("base64");
  obj.data = data;
  delete obj.stringData;
}
