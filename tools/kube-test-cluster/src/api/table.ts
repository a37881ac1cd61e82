/**
 * Server-side printing: the `meta.k8s.io/v1` Table kubectl asks for with
 * `Accept: application/json;as=Table;v=v1;g=meta.k8s.io`, with the columns kubectl
 * users expect per kind.
 */
import type { ResourceType } from "./resources.js";
import type { JsonObject, KObject } from "./types.js";
import { isObject } from "./types.js";

interface Column {
  name: string;
  type: string;
  format?: string;
  priority?: number;
  description?: string;
  cell(o: KObject, now: number): unknown;
}

export function humanDuration(ms: number): string {
  const s = Math.max(0, Math.floor(ms / 1000));
  if (s < 120) return `${s}s`;
  const m = Math.floor(s / 60);
  if (m < 10) return s % 60 === 0 ? `${m}m` : `${m}m${s % 60}s`;
  if (m < 180) return `${m}m`;
  const h = Math.floor(m / 60);
  if (h < 8) return m % 60 === 0 ? `${h}h` : `${h}h${m % 60}m`;
  if (h < 48) return `${h}h`;
  const d = Math.floor(h / 24);
  if (d < 8) return h % 24 === 0 ? `${d}d` : `${d}d${h % 24}h`;
  return `${d}d`;
}

function obj(v: unknown): JsonObject {
  return isObject(v) ? v : {};
}

function arr(v: unknown): JsonObject[] {
  return Array.isArray(v) ? v.filter(isObject) : [];
}

const nameCol: Column = {
  name: "Name",
  type: "string",
  format: "name",
  description: "Name must be unique within a namespace.",
  cell: (o) => o.metadata.name ?? "",
};
const ageCol: Column = {
  name: "Age",
  type: "string",
  description: "CreationTimestamp is a timestamp representing the server time when this object was created.",
  cell: (o, now) =>
    o.metadata.creationTimestamp ? humanDuration(now - Date.parse(o.metadata.creationTimestamp)) : "<unknown>",
};

function podStatusText(o: KObject): string {
  const status = obj(o.status);
  let reason = String(status.reason ?? status.phase ?? "Unknown");
  const inits = arr(status.initContainerStatuses);
  let initializing = false;
  inits.forEach((c, i) => {
    if (initializing) return;
    const state = obj(c.state);
    const term = obj(state.terminated);
    const waiting = obj(state.waiting);
    if (state.terminated && term.exitCode === 0) return;
    initializing = true;
    if (state.terminated)
      reason = term.reason ? `Init:${String(term.reason)}` : `Init:ExitCode:${String(term.exitCode)}`;
    else if (waiting.reason && waiting.reason !== "PodInitializing") reason = `Init:${String(waiting.reason)}`;
    else reason = `Init:${i}/${inits.length}`;
  });
  if (!initializing) {
    let running = false;
    for (const c of arr(status.containerStatuses).reverse()) {
      const state = obj(c.state);
      const waiting = obj(state.waiting);
      const term = obj(state.terminated);
      if (waiting.reason) reason = String(waiting.reason);
      else if (state.terminated)
        reason = term.reason
          ? String(term.reason)
          : term.signal
            ? `Signal:${String(term.signal)}`
            : `ExitCode:${String(term.exitCode)}`;
      else if (c.ready === true && state.running) running = true;
    }
    if (reason === "Completed" && running) reason = "Running";
  }
  if (o.metadata.deletionTimestamp) reason = status.reason === "NodeLost" ? "Unknown" : "Terminating";
  return reason;
}

const columnsByType: Record<string, Column[]> = {
  "/pods": [
    nameCol,
    {
      name: "Ready",
      type: "string",
      description: "The aggregate readiness state of this pod for accepting traffic.",
      cell: (o) => {
        const cs = arr(obj(o.status).containerStatuses);
        const total = arr(obj(o.spec).containers).length;
        return `${cs.filter((c) => c.ready === true).length}/${total}`;
      },
    },
    {
      name: "Status",
      type: "string",
      description: "The aggregate status of the containers in this pod.",
      cell: (o) => podStatusText(o),
    },
    {
      name: "Restarts",
      type: "string",
      description: "The number of times the containers in this pod have been restarted.",
      cell: (o) =>
        String(
          arr(obj(o.status).containerStatuses).reduce(
            (n, c) => n + (typeof c.restartCount === "number" ? c.restartCount : 0),
            0,
          ),
        ),
    },
    ageCol,
    { name: "IP", type: "string", priority: 1, cell: (o) => String(obj(o.status).podIP ?? "<none>") },
    { name: "Node", type: "string", priority: 1, cell: (o) => String(obj(o.spec).nodeName ?? "<none>") },
  ],
  "batch/jobs": [
    nameCol,
    {
      name: "Status",
      type: "string",
      description: "Status of the job.",
      cell: (o) => {
        const conds = arr(obj(o.status).conditions).filter((c) => c.status === "True");
        if (conds.some((c) => c.type === "Complete")) return "Complete";
        if (conds.some((c) => c.type === "Failed")) return "Failed";
        if (o.metadata.deletionTimestamp) return "Terminating";
        if (conds.some((c) => c.type === "FailureTarget")) return "FailureTarget";
        if (obj(o.spec).suspend === true) return "Suspended";
        return "Running";
      },
    },
    {
      name: "Completions",
      type: "string",
      description: "The completion status of the job.",
      cell: (o) => `${Number(obj(o.status).succeeded ?? 0)}/${Number(obj(o.spec).completions ?? 1)}`,
    },
    {
      name: "Duration",
      type: "string",
      description: "Time required to complete the job.",
      cell: (o, now) => {
        const st = obj(o.status);
        if (typeof st.startTime !== "string") return "";
        const end = typeof st.completionTime === "string" ? Date.parse(st.completionTime) : now;
        return humanDuration(end - Date.parse(st.startTime));
      },
    },
    ageCol,
  ],
  "/namespaces": [nameCol, { name: "Status", type: "string", cell: (o) => String(obj(o.status).phase ?? "") }, ageCol],
  "/configmaps": [
    nameCol,
    {
      name: "Data",
      type: "integer",
      cell: (o) => Object.keys(obj(o.data)).length + Object.keys(obj(o.binaryData)).length,
    },
    ageCol,
  ],
  "/secrets": [
    nameCol,
    { name: "Type", type: "string", cell: (o) => String(o.type ?? "Opaque") },
    { name: "Data", type: "integer", cell: (o) => Object.keys(obj(o.data)).length },
    ageCol,
  ],
  "/serviceaccounts": [nameCol, { name: "Secrets", type: "integer", cell: (o) => arr(o.secrets).length }, ageCol],
  "/nodes": [
    nameCol,
    {
      name: "Status",
      type: "string",
      cell: (o) => (obj(o.spec).unschedulable === true ? "Ready,SchedulingDisabled" : "Ready"),
    },
    { name: "Roles", type: "string", cell: () => "<none>" },
    ageCol,
    { name: "Version", type: "string", cell: (o) => String(obj(obj(o.status).nodeInfo).kubeletVersion ?? "") },
  ],
  "/events": [
    {
      name: "Last Seen",
      type: "string",
      cell: (o, now) =>
        humanDuration(now - Date.parse(String(o.lastTimestamp ?? o.eventTime ?? o.metadata.creationTimestamp))),
    },
    { name: "Type", type: "string", cell: (o) => String(o.type ?? "") },
    { name: "Reason", type: "string", cell: (o) => String(o.reason ?? "") },
    {
      name: "Object",
      type: "string",
      cell: (o) =>
        `${String(obj(o.involvedObject).kind ?? "").toLowerCase()}/${String(obj(o.involvedObject).name ?? "")}`,
    },
    { name: "Message", type: "string", cell: (o) => String(o.message ?? "") },
    { ...nameCol, priority: 1 },
  ],
  "apiextensions.k8s.io/customresourcedefinitions": [
    nameCol,
    { name: "Created At", type: "date", cell: (o) => o.metadata.creationTimestamp ?? "" },
  ],
  "coordination.k8s.io/leases": [
    nameCol,
    { name: "Holder", type: "string", cell: (o) => String(obj(o.spec).holderIdentity ?? "") },
    ageCol,
  ],
};

/**
 * Evaluates the JSONPath of CRD printer columns: fields, indexes and equality filters
 * (`.status.phase`, `.spec.items[0].name`, `.status.conditions[?(@.type=="Ready")].status`).
 * A filter keeps the matching items; a printer column shows the first.
 */
function jsonPath(o: unknown, path: string): unknown {
  let cur: unknown[] = [o];
  // Fields split on dots outside brackets (a filter's `@.type` has one).
  const parts = path.replace(/^\./, "").match(/(?:[^.[\]]+|\[[^\]]*\])+/g) ?? [];
  for (const part of parts) {
    const m = /^([^[\]]*)((?:\[[^\]]*\])*)$/.exec(part);
    if (!m) return undefined;
    if (m[1]) cur = cur.map((v) => (isObject(v) ? v[m[1] ?? ""] : undefined));
    for (const sel of (m[2] ?? "").match(/\[[^\]]*\]/g) ?? []) {
      const index = /^\[(\d+)\]$/.exec(sel);
      const filter = /^\[\?\(@\.([A-Za-z0-9_]+)\s*==\s*["']([^"']*)["']\)\]$/.exec(sel);
      if (index) cur = cur.map((v) => (Array.isArray(v) ? v[Number(index[1])] : undefined));
      else if (filter)
        cur = cur.flatMap((v) =>
          Array.isArray(v) ? v.filter((i) => isObject(i) && String(i[filter[1] ?? ""]) === filter[2]) : [],
        );
      else return undefined;
    }
  }
  return cur[0];
}

function columnsFor(t: ResourceType, version: string): Column[] {
  if (t.custom) {
    const extra = (t.custom.printerColumns.get(version) ?? []).map<Column>((c) => ({
      name: String(c.name),
      type: String(c.type ?? "string"),
      ...(typeof c.priority === "number" ? { priority: c.priority } : {}),
      cell: (o, now) => {
        const v = jsonPath(o, String(c.jsonPath ?? ""));
        if (c.type === "date" && typeof v === "string") return humanDuration(now - Date.parse(v));
        return v === undefined ? null : v;
      },
    }));
    return [nameCol, ...extra, ...(extra.some((c) => c.name === "Age") ? [] : [ageCol])];
  }
  return columnsByType[`${t.group}/${t.resource}`] ?? [nameCol, ageCol];
}

export type IncludeObject = "None" | "Metadata" | "Object";

export function toTable(
  t: ResourceType,
  version: string,
  items: KObject[],
  resourceVersion: string,
  include: IncludeObject,
  withHeaders: boolean,
  continueToken?: string,
): JsonObject {
  const now = Date.now();
  const columns = columnsFor(t, version);
  return {
    kind: "Table",
    apiVersion: "meta.k8s.io/v1",
    metadata: { resourceVersion, ...(continueToken ? { continue: continueToken } : {}) },
    columnDefinitions: withHeaders
      ? columns.map((c) => ({
          name: c.name,
          type: c.type,
          format: c.format ?? "",
          description: c.description ?? "",
          priority: c.priority ?? 0,
        }))
      : [],
    rows: items.map((o) => ({
      cells: columns.map((c) => c.cell(o, now)),
      ...(include === "None"
        ? {}
        : {
            object:
              include === "Object"
                ? o
                : { kind: "PartialObjectMetadata", apiVersion: "meta.k8s.io/v1", metadata: o.metadata },
          }),
    })),
  };
}
