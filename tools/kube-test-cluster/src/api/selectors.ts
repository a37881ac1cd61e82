/** Label and field selectors, in their query-string and (for labels) object forms. */
import { badRequest } from "./status-error.js";
import type { JsonObject, KObject } from "./types.js";
import { isObject } from "./types.js";

type Requirement =
  | { key: string; op: "=" | "!="; value: string }
  | { key: string; op: "in" | "notin"; values: string[] }
  | { key: string; op: "exists" | "!exists" };

export type Selector = (fields: Record<string, string | undefined>) => boolean;

/** Splits on commas that are not inside parentheses. */
function splitTerms(text: string): string[] {
  const out: string[] = [];
  let depth = 0;
  let cur = "";
  for (const ch of text) {
    if (ch === "(") depth++;
    if (ch === ")") depth--;
    if (ch === "," && depth === 0) {
      out.push(cur);
      cur = "";
    } else cur += ch;
  }
  out.push(cur);
  return out.map((t) => t.trim()).filter((t) => t !== "");
}

function parseRequirements(text: string, allowSets: boolean): Requirement[] {
  const reqs: Requirement[] = [];
  for (const term of splitTerms(text)) {
    let m = /^([^\s!=,()]+)\s+(in|notin)\s+\(([^)]*)\)$/.exec(term);
    if (m && allowSets) {
      reqs.push({
        key: m[1] ?? "",
        op: m[2] === "in" ? "in" : "notin",
        values: (m[3] ?? "")
          .split(",")
          .map((v) => v.trim())
          .filter((v) => v !== ""),
      });
      continue;
    }
    m = /^([^\s!=]+)\s*(==|=|!=)\s*([^\s,]*)$/.exec(term);
    if (m) {
      reqs.push({ key: m[1] ?? "", op: m[2] === "!=" ? "!=" : "=", value: m[3] ?? "" });
      continue;
    }
    m = /^(!?)([^\s!=(),]+)$/.exec(term);
    if (m && allowSets) {
      reqs.push({ key: m[2] ?? "", op: m[1] === "!" ? "!exists" : "exists" });
      continue;
    }
    throw badRequest(`unable to parse requirement: ${term}`);
  }
  return reqs;
}

function evaluate(reqs: Requirement[], fields: Record<string, string | undefined>): boolean {
  return reqs.every((r) => {
    const v = fields[r.key];
    switch (r.op) {
      case "=":
        return v === r.value;
      case "!=":
        return v !== r.value;
      case "in":
        return v !== undefined && r.values.includes(v);
      case "notin":
        return v === undefined || !r.values.includes(v);
      case "exists":
        return v !== undefined;
      case "!exists":
        return v === undefined;
    }
    return false;
  });
}

export function parseLabelSelector(text: string | null | undefined): Selector {
  if (!text) return () => true;
  const reqs = parseRequirements(text, true);
  return (labels) => evaluate(reqs, labels);
}

export function parseFieldSelector(text: string | null | undefined): { selector: Selector; keys: string[] } {
  if (!text) return { selector: () => true, keys: [] };
  const reqs = parseRequirements(text, false);
  return { selector: (fields) => evaluate(reqs, fields), keys: reqs.map((r) => r.key) };
}

/** The value at a dotted path, as the string a field selector compares against. */
export function fieldValue(obj: KObject, path: string): string | undefined {
  if (path === "metadata.namespace") return obj.metadata.namespace ?? "";
  let cur: unknown = obj;
  for (const part of path.split(".")) {
    if (!isObject(cur)) return path === "status.phase" || path === "spec.nodeName" ? "" : undefined;
    cur = cur[part];
  }
  if (cur === undefined || cur === null) return "";
  return typeof cur === "object" ? JSON.stringify(cur) : String(cur);
}

export function fieldsOf(obj: KObject, keys: string[]): Record<string, string | undefined> {
  const out: Record<string, string | undefined> = {};
  for (const k of keys) out[k] = fieldValue(obj, k);
  return out;
}

/** A metav1.LabelSelector object (matchLabels + matchExpressions). Null matches nothing, {} everything. */
export function matchesLabelSelector(selector: unknown, labels: Record<string, string>): boolean {
  if (!isObject(selector)) return false;
  const matchLabels = isObject(selector.matchLabels) ? selector.matchLabels : {};
  for (const [k, v] of Object.entries(matchLabels)) if (labels[k] !== v) return false;
  const exprs = Array.isArray(selector.matchExpressions) ? (selector.matchExpressions as JsonObject[]) : [];
  for (const e of exprs) {
    const key = String(e.key);
    const values = Array.isArray(e.values) ? e.values.map(String) : [];
    const v = labels[key];
    switch (e.operator) {
      case "In":
        if (v === undefined || !values.includes(v)) return false;
        break;
      case "NotIn":
        if (v !== undefined && values.includes(v)) return false;
        break;
      case "Exists":
        if (v === undefined) return false;
        break;
      case "DoesNotExist":
        if (v !== undefined) return false;
        break;
      default:
        return false;
    }
  }
  return true;
}
