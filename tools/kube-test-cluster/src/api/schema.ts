/**
 * Structural-schema handling for custom resources: defaulting, pruning of unknown
 * fields and validation against a CRD version's openAPIV3Schema.
 */
import type { StatusCause } from "./status-error.js";
import type { JsonObject } from "./types.js";
import { clone, isObject } from "./types.js";

/** Applies defaults and prunes unknown fields in place; returns validation failures. */
export function applySchema(value: JsonObject, schema: JsonObject): StatusCause[] {
  const causes: StatusCause[] = [];
  const props = isObject(schema.properties) ? schema.properties : {};
  // apiVersion, kind and metadata are validated by the server itself, never pruned.
  const rootSchema: JsonObject = {
    ...schema,
    properties: {
      ...props,
      apiVersion: { type: "string" },
      kind: { type: "string" },
      metadata: { type: "object", "x-kubernetes-preserve-unknown-fields": true },
    },
  };
  walk(value, rootSchema, "", causes);
  return causes;
}

function walk(value: unknown, schema: JsonObject, path: string, causes: StatusCause[]): unknown {
  const at = path === "" ? "<root>" : path;
  if (value === null) {
    if (schema.nullable !== true)
      causes.push({
        reason: "FieldValueTypeInvalid",
        field: at,
        message: `Invalid value: "null": ${at} in body must be of type ${String(schema.type ?? "object")}`,
      });
    return value;
  }
  const intOrString = schema["x-kubernetes-int-or-string"] === true;
  const type = typeof schema.type === "string" ? schema.type : undefined;
  if (intOrString) {
    if (typeof value !== "string" && !Number.isInteger(value))
      causes.push({
        reason: "FieldValueTypeInvalid",
        field: at,
        message: `Invalid value: ${JSON.stringify(value)}: ${at} in body must be of type integer or string`,
      });
    return value;
  }
  if (type && !matchesType(value, type)) {
    causes.push({
      reason: "FieldValueTypeInvalid",
      field: at,
      message: `Invalid value: "${typeName(value)}": ${at} in body must be of type ${type}: "${typeName(value)}"`,
    });
    return value;
  }
  if (Array.isArray(schema.enum) && !schema.enum.some((e) => JSON.stringify(e) === JSON.stringify(value))) {
    causes.push({
      reason: "FieldValueNotSupported",
      field: at,
      message: `Unsupported value: ${JSON.stringify(value)}: supported values: ${schema.enum.map((e) => JSON.stringify(e)).join(", ")}`,
    });
  }
  if (typeof value === "number") {
    if (typeof schema.minimum === "number" && value < schema.minimum)
      causes.push({
        reason: "FieldValueInvalid",
        field: at,
        message: `Invalid value: ${value}: ${at} in body should be greater than or equal to ${schema.minimum}`,
      });
    if (typeof schema.maximum === "number" && value > schema.maximum)
      causes.push({
        reason: "FieldValueInvalid",
        field: at,
        message: `Invalid value: ${value}: ${at} in body should be less than or equal to ${schema.maximum}`,
      });
  }
  if (typeof value === "string") {
    if (typeof schema.minLength === "number" && value.length < schema.minLength)
      causes.push({
        reason: "FieldValueInvalid",
        field: at,
        message: `Invalid value: "${value}": ${at} in body should be at least ${schema.minLength} chars long`,
      });
    if (typeof schema.maxLength === "number" && value.length > schema.maxLength)
      causes.push({
        reason: "FieldValueTooLong",
        field: at,
        message: `Too long: may not be longer than ${schema.maxLength}`,
      });
    if (typeof schema.pattern === "string" && !new RegExp(schema.pattern).test(value))
      causes.push({
        reason: "FieldValueInvalid",
        field: at,
        message: `Invalid value: "${value}": ${at} in body should match '${schema.pattern}'`,
      });
  }
  if (Array.isArray(value)) {
    if (typeof schema.minItems === "number" && value.length < schema.minItems)
      causes.push({
        reason: "FieldValueInvalid",
        field: at,
        message: `Invalid value: ${value.length}: ${at} in body should have at least ${schema.minItems} items`,
      });
    if (typeof schema.maxItems === "number" && value.length > schema.maxItems)
      causes.push({
        reason: "FieldValueTooMany",
        field: at,
        message: `Too many: ${value.length}: must have at most ${schema.maxItems} items`,
      });
    if (isObject(schema.items)) {
      const items = schema.items;
      value.forEach((v, i) => {
        value[i] = walk(v, items, `${path}[${i}]`, causes);
      });
    }
    return value;
  }
  if (isObject(value)) {
    const props = isObject(schema.properties) ? schema.properties : undefined;
    const additional = schema.additionalProperties;
    const preserve = schema["x-kubernetes-preserve-unknown-fields"] === true;
    const embedded = schema["x-kubernetes-embedded-resource"] === true;
    if (props) {
      for (const [k, s] of Object.entries(props)) {
        if (!isObject(s)) continue;
        if (value[k] === undefined && s.default !== undefined) value[k] = clone(s.default);
        if (value[k] !== undefined) value[k] = walk(value[k], s, path === "" ? k : `${path}.${k}`, causes);
      }
    }
    for (const k of Object.keys(value)) {
      if (props && k in props) continue;
      if (embedded && (k === "apiVersion" || k === "kind" || k === "metadata")) continue;
      if (isObject(additional)) value[k] = walk(value[k], additional, path === "" ? k : `${path}.${k}`, causes);
      else if (additional === true || preserve) continue;
      else delete value[k];
    }
    const required = Array.isArray(schema.required) ? schema.required.map(String) : [];
    for (const r of required) {
      if (value[r] === undefined)
        causes.push({
          reason: "FieldValueRequired",
          field: path === "" ? r : `${path}.${r}`,
          message: "Required value",
        });
    }
  }
  return value;
}

function matchesType(value: unknown, type: string): boolean {
  switch (type) {
    case "object":
      return isObject(value);
    case "array":
      return Array.isArray(value);
    case "string":
      return typeof value === "string";
    case "integer":
      return Number.isInteger(value);
    case "number":
      return typeof value === "number";
    case "boolean":
      return typeof value === "boolean";
    default:
      return true;
  }
}

function typeName(value: unknown): string {
  if (Array.isArray(value)) return "array";
  if (isObject(value)) return "object";
  if (Number.isInteger(value)) return "integer";
  return typeof value;
}
