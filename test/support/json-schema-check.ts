/*
 * Enough of JSON Schema (as OpenAPI 3.0/3.1 and Swagger 2.0 use it) to check that a stand-in's
 * answer has the shape a provider's published description gives it: $ref, type (with null and
 * `nullable`), required, properties, items, enum, allOf/anyOf/oneOf. Formats and patterns are
 * not checked. Returns the problems found, empty when the value fits.
 */

export type Schema = { [key: string]: unknown };

export function checkSchema(root: Schema, schema: Schema, value: unknown, at = "$"): string[] {
  const ref = schema["$ref"];
  if (typeof ref === "string") return checkSchema(root, resolve(root, ref), value, at);
  const problems: string[] = [];
  const nullable = schema["nullable"] === true;
  if (value === null && nullable) return [];
  const types = schema["type"] === undefined ? [] : ([] as unknown[]).concat(schema["type"]);
  if (types.length > 0 && !types.some((t) => fits(t, value)))
    return [`${at}: ${describe(value)} is not ${types.join("|")}`];
  const en = schema["enum"];
  if (Array.isArray(en) && !en.some((e) => e === value)) problems.push(`${at}: ${JSON.stringify(value)} not in enum`);
  for (const sub of (schema["allOf"] as Schema[] | undefined) ?? [])
    problems.push(...checkSchema(root, sub, value, at));
  for (const key of ["anyOf", "oneOf"]) {
    const options = schema[key] as Schema[] | undefined;
    if (options && !options.some((o) => checkSchema(root, o, value, at).length === 0))
      problems.push(`${at}: fits none of ${key}`);
  }
  if (value !== null && typeof value === "object" && !Array.isArray(value)) {
    const obj = value as Record<string, unknown>;
    for (const r of (schema["required"] as string[] | undefined) ?? [])
      if (!(r in obj)) problems.push(`${at}: missing required ${r}`);
    const props = (schema["properties"] as Record<string, Schema> | undefined) ?? {};
    for (const [k, sub] of Object.entries(props))
      if (k in obj) problems.push(...checkSchema(root, sub, obj[k], `${at}.${k}`));
  }
  if (Array.isArray(value) && schema["items"])
    value.forEach((v, i) => problems.push(...checkSchema(root, schema["items"] as Schema, v, `${at}[${i}]`)));
  return problems;
}

function resolve(root: Schema, ref: string): Schema {
  if (!ref.startsWith("#/")) throw new Error(`only local references: ${ref}`);
  let node: unknown = root;
  for (const part of ref.slice(2).split("/")) node = (node as Schema)[part.replace(/~1/g, "/").replace(/~0/g, "~")];
  if (node === undefined) throw new Error(`unresolved reference ${ref}`);
  return node as Schema;
}

function fits(type: unknown, value: unknown): boolean {
  switch (type) {
    case "null":
      return value === null;
    case "integer":
      return typeof value === "number" && Number.isInteger(value);
    case "number":
      return typeof value === "number";
    case "string":
      return typeof value === "string";
    case "boolean":
      return typeof value === "boolean";
    case "array":
      return Array.isArray(value);
    case "object":
      return value !== null && typeof value === "object" && !Array.isArray(value);
    default:
      return true;
  }
}

const describe = (v: unknown) => (v === null ? "null" : Array.isArray(v) ? "array" : typeof v);

/** The node at `ref` of a description (for stand-ins that start from a published example). */
export function at(root: Schema, ref: string): Schema {
  return resolve(root, ref);
}
