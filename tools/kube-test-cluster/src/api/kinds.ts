/**
 * Per-kind behaviour of the API server: defaulting, validation, which changes bump
 * `generation`, what deleting a kind orphans by default, and pod grace periods.
 */
import type { ResourceType } from "./resources.js";
import { deploymentRules } from "./deployment-rules.js";
import { applySchema } from "./schema.js";
import type { StatusCause } from "./status-error.js";
import type { JsonObject, KObject } from "./types.js";
import { deepEqual, isObject } from "./types.js";

export interface KindRules {
  /** Fills defaults on create (after metadata is stamped). */
  defaultOnCreate?(obj: KObject): void;
  /** Validates a create (old undefined) or an update. */
  validate?(obj: KObject, old: KObject | undefined, system: boolean): StatusCause[];
  /** Default propagation when a DELETE names none. */
  defaultPropagation?: "Orphan" | "Background";
  /** Status the server sets on create, replacing what the client sent. */
  initialStatus?(obj: KObject): JsonObject | undefined;
}

const dns1123Label = /^[a-z0-9]([-a-z0-9]*[a-z0-9])?$/;
const dns1123Subdomain = /^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$/;
const labelValue = /^(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?$/;
const qualifiedName = /^([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]$/;
const configKey = /^[-._a-zA-Z0-9]+$/;

export function validateName(name: string, label: boolean): string | undefined {
  if (label) {
    if (name.length > 63) return "must be no more than 63 characters";
    if (!dns1123Label.test(name))
      return `a lowercase RFC 1123 label must consist of lower case alphanumeric characters or '-', and must start and end with an alphanumeric character (e.g. 'my-name',  or '123-abc', regex used for validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?')`;
    return undefined;
  }
  if (name.length > 253) return "must be no more than 253 characters";
  if (!dns1123Subdomain.test(name))
    return `a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or '.', and must start and end with an alphanumeric character (e.g. 'example.com', regex used for validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*')`;
  return undefined;
}

export function validateLabels(labels: Record<string, string> | undefined, field: string): StatusCause[] {
  const causes: StatusCause[] = [];
  for (const [k, v] of Object.entries(labels ?? {})) {
    const slash = k.lastIndexOf("/");
    const prefix = slash >= 0 ? k.slice(0, slash) : undefined;
    const name = slash >= 0 ? k.slice(slash + 1) : k;
    if (
      name.length > 63 ||
      !qualifiedName.test(name) ||
      (prefix !== undefined && validateName(prefix, false) !== undefined)
    ) {
      causes.push({
        reason: "FieldValueInvalid",
        field,
        message: `Invalid value: "${k}": name part must consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character`,
      });
    }
    if (typeof v !== "string" || v.length > 63) {
      causes.push({
        reason: "FieldValueInvalid",
        field,
        message: `Invalid value: "${String(v)}": must be no more than 63 characters`,
      });
    } else if (!labelValue.test(v)) {
      causes.push({
        reason: "FieldValueInvalid",
        field,
        message: `Invalid value: "${v}": a valid label must be an empty string or consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character`,
      });
    }
  }
  return causes;
}

function asArray(v: unknown): JsonObject[] {
  return Array.isArray(v) ? v.filter(isObject) : [];
}

/** Pod spec checks shared by pods and Job templates; `path` is where the spec sits. */
export function validatePodSpec(spec: unknown, path: string, allowedRestart: string[]): StatusCause[] {
  const causes: StatusCause[] = [];
  if (!isObject(spec)) return [{ reason: "FieldValueRequired", field: path, message: "Required value" }];
  const containers = asArray(spec.containers);
  if (containers.length === 0)
    causes.push({ reason: "FieldValueRequired", field: `${path}.containers`, message: "Required value" });
  const volumeNames = new Set(asArray(spec.volumes).map((v) => String(v.name)));
  const seen = new Set<string>();
  for (const [listName, list] of [
    ["initContainers", asArray(spec.initContainers)],
    ["containers", containers],
  ] as const) {
    list.forEach((c, i) => {
      const name = typeof c.name === "string" ? c.name : "";
      const field = `${path}.${listName}[${i}]`;
      if (name === "") causes.push({ reason: "FieldValueRequired", field: `${field}.name`, message: "Required value" });
      else if (validateName(name, true))
        causes.push({
          reason: "FieldValueInvalid",
          field: `${field}.name`,
          message: `Invalid value: "${name}": ${validateName(name, true) ?? ""}`,
        });
      else if (seen.has(name))
        causes.push({ reason: "FieldValueDuplicate", field: `${field}.name`, message: `Duplicate value: "${name}"` });
      seen.add(name);
      // Only init containers may set a restartPolicy, and only Always (a native sidecar).
      if (c.restartPolicy !== undefined && (listName === "containers" || c.restartPolicy !== "Always")) {
        causes.push(
          listName === "containers"
            ? {
                reason: "FieldValueForbidden",
                field: `${field}.restartPolicy`,
                message: "Forbidden: may not be set for non-init containers",
              }
            : {
                reason: "FieldValueNotSupported",
                field: `${field}.restartPolicy`,
                message: `Unsupported value: "${String(c.restartPolicy)}": supported values: "Always"`,
              },
        );
      }
      asArray(c.volumeMounts).forEach((m, j) => {
        if (!volumeNames.has(String(m.name)))
          causes.push({
            reason: "FieldValueNotFound",
            field: `${field}.volumeMounts[${j}].name`,
            message: `Not found: "${String(m.name)}"`,
          });
        if (typeof m.mountPath !== "string" || m.mountPath === "")
          causes.push({
            reason: "FieldValueRequired",
            field: `${field}.volumeMounts[${j}].mountPath`,
            message: "Required value",
          });
      });
    });
  }
  const restart = spec.restartPolicy;
  if (restart !== undefined && !allowedRestart.includes(String(restart))) {
    causes.push({
      reason: "FieldValueNotSupported",
      field: `${path}.restartPolicy`,
      message: `Unsupported value: "${String(restart)}": supported values: ${allowedRestart.map((r) => `"${r}"`).join(", ")}`,
    });
  }
  if (restart === undefined && !allowedRestart.includes("Always")) {
    causes.push({
      reason: "FieldValueRequired",
      field: `${path}.restartPolicy`,
      message: `Required value: valid values: ${allowedRestart.map((r) => `"${r}"`).join(", ")}`,
    });
  }
  return causes;
}

function defaultPodSpec(spec: JsonObject): void {
  spec.restartPolicy ??= "Always";
  spec.terminationGracePeriodSeconds ??= 30;
  spec.dnsPolicy ??= "ClusterFirst";
  spec.schedulerName ??= "default-scheduler";
  spec.serviceAccountName ??= spec.serviceAccount ?? "default";
  spec.serviceAccount ??= spec.serviceAccountName;
  spec.securityContext ??= {};
  spec.enableServiceLinks ??= true;
  spec.preemptionPolicy ??= "PreemptLowerPriority";
  spec.priority ??= 0;
  for (const list of [asArray(spec.initContainers), asArray(spec.containers)]) {
    for (const c of list) {
      const image = typeof c.image === "string" ? c.image : "";
      c.imagePullPolicy ??= image.endsWith(":latest") || !/:[^/]+$/.test(image) ? "Always" : "IfNotPresent";
      c.terminationMessagePath ??= "/dev/termination-log";
      c.terminationMessagePolicy ??= "File";
      c.resources ??= {};
    }
  }
}

/** The pod spec fields an update may change (API server rule for pods). */
function mutablePodSpecView(spec: unknown): unknown {
  if (!isObject(spec)) return spec;
  const copy: JsonObject = { ...spec };
  delete copy.activeDeadlineSeconds;
  delete copy.tolerations;
  delete copy.terminationGracePeriodSeconds;
  delete copy.schedulingGates;
  for (const k of ["containers", "initContainers"]) {
    copy[k] = asArray(spec[k]).map((c) => ({ ...c, image: undefined }));
  }
  return copy;
}

const podRules: KindRules = {
  defaultOnCreate(obj) {
    const spec = isObject(obj.spec) ? obj.spec : {};
    defaultPodSpec(spec);
    obj.spec = spec;
  },
  initialStatus() {
    return { phase: "Pending", qosClass: "BestEffort" };
  },
  validate(obj, old, system) {
    const causes = validatePodSpec(obj.spec, "spec", ["Always", "OnFailure", "Never"]);
    if (old && !system && !deepEqual(mutablePodSpecView(obj.spec), mutablePodSpecView(old.spec))) {
      causes.push({
        reason: "FieldValueForbidden",
        field: "spec",
        message:
          "Forbidden: pod updates may not change fields other than `spec.containers[*].image`,`spec.initContainers[*].image`,`spec.activeDeadlineSeconds`,`spec.tolerations` (only additions to existing tolerations),`spec.terminationGracePeriodSeconds` (allow it to be set to 1 if it was previously negative)",
      });
    }
    return causes;
  },
};

const jobRules: KindRules = {
  defaultPropagation: "Orphan",
  defaultOnCreate(obj) {
    const spec = isObject(obj.spec) ? obj.spec : {};
    obj.spec = spec;
    spec.parallelism ??= 1;
    spec.completions ??= 1;
    spec.backoffLimit ??= 6;
    spec.completionMode ??= "NonIndexed";
    spec.suspend ??= false;
    spec.podReplacementPolicy ??= "TerminatingOrFailed";
    const uid = obj.metadata.uid ?? "";
    const name = obj.metadata.name ?? "";
    const template = isObject(spec.template) ? spec.template : {};
    spec.template = template;
    const tmeta = isObject(template.metadata) ? template.metadata : {};
    template.metadata = tmeta;
    const labels = isObject(tmeta.labels) ? (tmeta.labels as Record<string, string>) : {};
    if (spec.manualSelector !== true) {
      Object.assign(labels, {
        "batch.kubernetes.io/controller-uid": uid,
        "batch.kubernetes.io/job-name": name,
        "controller-uid": uid,
        "job-name": name,
      });
      spec.selector ??= { matchLabels: { "batch.kubernetes.io/controller-uid": uid } };
    }
    tmeta.labels = labels;
    obj.metadata.labels = {
      "batch.kubernetes.io/controller-uid": uid,
      "batch.kubernetes.io/job-name": name,
      "controller-uid": uid,
      "job-name": name,
      ...(obj.metadata.labels ?? {}),
    };
    if (isObject(template.spec)) defaultPodSpec(template.spec);
  },
  initialStatus() {
    return {};
  },
  validate(obj, old) {
    const spec = isObject(obj.spec) ? obj.spec : {};
    const template = isObject(spec.template) ? spec.template : {};
    const causes = validatePodSpec(template.spec, "spec.template.spec", ["OnFailure", "Never"]);
    const tmeta = isObject(template.metadata) ? template.metadata : {};
    causes.push(...validateLabels(tmeta.labels as Record<string, string> | undefined, "spec.template.labels"));
    for (const f of ["backoffLimit", "parallelism", "completions", "ttlSecondsAfterFinished"]) {
      const v = spec[f];
      if (v !== undefined && v !== null && (!Number.isInteger(v) || (v as number) < 0))
        causes.push({
          reason: "FieldValueInvalid",
          field: `spec.${f}`,
          message: `Invalid value: ${JSON.stringify(v)}: must be greater than or equal to 0`,
        });
    }
    const replacement = spec.podReplacementPolicy;
    if (
      replacement !== undefined &&
      replacement !== null &&
      replacement !== "Failed" &&
      replacement !== "TerminatingOrFailed"
    ) {
      causes.push({
        reason: "FieldValueNotSupported",
        field: "spec.podReplacementPolicy",
        message: `Unsupported value: ${JSON.stringify(replacement)}: supported values: "Failed", "TerminatingOrFailed"`,
      });
    }
    const ads = spec.activeDeadlineSeconds;
    if (ads !== undefined && ads !== null && (!Number.isInteger(ads) || (ads as number) <= 0))
      causes.push({
        reason: "FieldValueInvalid",
        field: "spec.activeDeadlineSeconds",
        message: `Invalid value: ${JSON.stringify(ads)}: must be greater than 0`,
      });
    if (old) {
      const oldSpec = isObject(old.spec) ? old.spec : {};
      if (!deepEqual(spec.template, oldSpec.template) && oldSpec.suspend !== true)
        causes.push({
          reason: "FieldValueInvalid",
          field: "spec.template",
          message: "Invalid value: field is immutable",
        });
      if (!deepEqual(spec.selector, oldSpec.selector))
        causes.push({
          reason: "FieldValueInvalid",
          field: "spec.selector",
          message: "Invalid value: field is immutable",
        });
      if (spec.completions !== oldSpec.completions)
        causes.push({
          reason: "FieldValueInvalid",
          field: "spec.completions",
          message: "Invalid value: field is immutable",
        });
    }
    return causes;
  },
};

function validateDataKeys(obj: KObject, fields: string[]): StatusCause[] {
  const causes: StatusCause[] = [];
  for (const f of fields) {
    const data = obj[f];
    if (data === undefined || data === null) continue;
    if (!isObject(data)) {
      causes.push({ reason: "FieldValueTypeInvalid", field: f, message: "must be a map of strings" });
      continue;
    }
    for (const [k, v] of Object.entries(data)) {
      if (!configKey.test(k))
        causes.push({
          reason: "FieldValueInvalid",
          field: `${f}[${k}]`,
          message: `Invalid value: "${k}": a valid config key must consist of alphanumeric characters, '-', '_' or '.' (e.g. 'key.name',  or 'KEY_NAME',  or 'key-name', regex used for validation is '[-._a-zA-Z0-9]+')`,
        });
      if (typeof v !== "string")
        causes.push({ reason: "FieldValueTypeInvalid", field: `${f}[${k}]`, message: "must be a string" });
      else if ((f === "data" && obj.kind === "Secret") || f === "binaryData") {
        if (!/^[A-Za-z0-9+/]*={0,2}$/.test(v) || v.length % 4 !== 0)
          causes.push({ reason: "FieldValueInvalid", field: `${f}[${k}]`, message: "illegal base64 data" });
      }
    }
  }
  return causes;
}

function immutableData(obj: KObject, old: KObject | undefined, fields: string[]): StatusCause[] {
  if (!old || old.immutable !== true) return [];
  const changed = fields.some((f) => !deepEqual(obj[f], old[f])) || obj.immutable !== true;
  return changed
    ? [
        {
          reason: "FieldValueForbidden",
          field: "data",
          message: "Forbidden: field is immutable when `immutable` is set",
        },
      ]
    : [];
}

const secretRules: KindRules = {
  defaultOnCreate(obj) {
    obj.type ??= "Opaque";
  },
  validate(obj, old) {
    return [...validateDataKeys(obj, ["data"]), ...immutableData(obj, old, ["data"])];
  },
};

const configMapRules: KindRules = {
  validate(obj, old) {
    return [...validateDataKeys(obj, ["data", "binaryData"]), ...immutableData(obj, old, ["data", "binaryData"])];
  },
};

const namespaceRules: KindRules = {
  defaultOnCreate(obj) {
    obj.spec = { finalizers: ["kubernetes"] };
    obj.metadata.labels = { ...(obj.metadata.labels ?? {}), "kubernetes.io/metadata.name": obj.metadata.name ?? "" };
  },
  initialStatus() {
    return { phase: "Active" };
  },
};

const crdRules: KindRules = {
  validate(obj) {
    const causes: StatusCause[] = [];
    const spec = isObject(obj.spec) ? obj.spec : {};
    const names = isObject(spec.names) ? spec.names : {};
    const group = typeof spec.group === "string" ? spec.group : "";
    const plural = typeof names.plural === "string" ? names.plural : "";
    if (group === "" || !group.includes("."))
      causes.push({
        reason: "FieldValueInvalid",
        field: "spec.group",
        message: `Invalid value: "${group}": should be a domain with at least one dot`,
      });
    if (plural === "")
      causes.push({ reason: "FieldValueRequired", field: "spec.names.plural", message: "Required value" });
    if (typeof names.kind !== "string" || names.kind === "")
      causes.push({ reason: "FieldValueRequired", field: "spec.names.kind", message: "Required value" });
    if (obj.metadata.name !== `${plural}.${group}`)
      causes.push({
        reason: "FieldValueInvalid",
        field: "metadata.name",
        message: `Invalid value: "${obj.metadata.name ?? ""}": must be spec.names.plural+"."+spec.group`,
      });
    if (spec.scope !== "Namespaced" && spec.scope !== "Cluster")
      causes.push({
        reason: "FieldValueNotSupported",
        field: "spec.scope",
        message: `Unsupported value: "${String(spec.scope)}": supported values: "Cluster", "Namespaced"`,
      });
    const versions = asArray(spec.versions);
    if (versions.length === 0)
      causes.push({
        reason: "FieldValueRequired",
        field: "spec.versions",
        message: "Required value: must have at least one version",
      });
    if (versions.filter((v) => v.storage === true).length !== 1)
      causes.push({
        reason: "FieldValueInvalid",
        field: "spec.versions",
        message: "Invalid value: must have exactly one version marked as storage version",
      });
    return causes;
  },
  initialStatus(obj) {
    const spec = isObject(obj.spec) ? obj.spec : {};
    const now = new Date().toISOString().replace(/\.\d{3}Z$/, "Z");
    return {
      acceptedNames: spec.names,
      conditions: [
        {
          type: "NamesAccepted",
          status: "True",
          reason: "NoConflicts",
          message: "no conflicts found",
          lastTransitionTime: now,
        },
        {
          type: "Established",
          status: "True",
          reason: "InitialNamesAccepted",
          message: "the initial names have been accepted",
          lastTransitionTime: now,
        },
      ],
      storedVersions: asArray(spec.versions)
        .filter((v) => v.storage === true)
        .map((v) => v.name),
    };
  },
};

const rulesByType: Record<string, KindRules> = {
  "/pods": podRules,
  "batch/jobs": jobRules,
  "/secrets": secretRules,
  "/configmaps": configMapRules,
  "/namespaces": namespaceRules,
  "apiextensions.k8s.io/customresourcedefinitions": crdRules,
  "apps/deployments": deploymentRules,
};

export function rulesFor(t: ResourceType, version: string): KindRules {
  if (t.custom) {
    const schema = t.custom.schemas.get(version);
    return {
      validate(obj) {
        return schema ? applySchema(obj, schema) : [];
      },
    };
  }
  return rulesByType[`${t.group}/${t.resource}`] ?? {};
}

/** Kinds whose spec changes bump metadata.generation. */
export function tracksGeneration(t: ResourceType): boolean {
  return (
    t.custom !== undefined ||
    [
      "batch/jobs",
      "apps/deployments",
      "apps/daemonsets",
      "policy/poddisruptionbudgets",
      "apiextensions.k8s.io/customresourcedefinitions",
    ].includes(`${t.group}/${t.resource}`)
  );
}
