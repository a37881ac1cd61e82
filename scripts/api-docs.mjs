// Regenerates the route reference of docs/api.md (between <!-- routes:start --> and
// <!-- routes:end -->) from the route table, the exported `routes` of @drover/protocol: every
// route with its method, path, auth, parameters, body, responses and error codes, and the wire
// schemas they name. Run after `npm run build`; `--check` exits 1 when the file is stale.
//
//   node scripts/api-docs.mjs
import { readFileSync, writeFileSync } from "node:fs";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";
import { z } from "zod";
import * as protocol from "../packages/protocol/dist/src/index.js";

const { routes, errorsOf, statusForCode, userApi, agentApi } = protocol;

/** The exported wire schemas by name (`poolSchema` is `Pool`): the document names them instead of inlining. */
const registry = z.registry();
for (const [key, value] of Object.entries(protocol).sort(([a], [b]) => a.localeCompare(b))) {
  if (key.endsWith("Schema") && value !== null && typeof value === "object" && "_zod" in value)
    registry.add(value, { id: key[0].toUpperCase() + key.slice(1, -"Schema".length) });
}

/** A schema as JSON Schema, its named parts collected in `defs`. */
function jsonSchema(schema, io, defs) {
  const out = z.toJSONSchema(schema, { io, metadata: registry, unrepresentable: "any" });
  for (const [name, def] of Object.entries(out.$defs ?? {}))
    if (!defs.has(`${io}:${name}`)) defs.set(`${io}:${name}`, def);
  delete out.$defs;
  delete out.$schema;
  return out;
}

const refName = (ref) => ref.slice(ref.lastIndexOf("/") + 1);
const anchor = (name) => name.toLowerCase();

/** A JSON Schema as a short type: `string`, `Run[]`, `{ key: string, value?: string }`, `"a" | "b"`. */
function typeText(s) {
  if (s.$ref) return `[${refName(s.$ref)}](#${anchor(refName(s.$ref))})`;
  const alternatives = s.anyOf ?? s.oneOf;
  if (alternatives) return alternatives.map(typeText).join(" | ");
  if (s.enum) return s.enum.map((v) => JSON.stringify(v)).join(" | ");
  if (s.const !== undefined) return JSON.stringify(s.const);
  if (Array.isArray(s.type)) return s.type.map((t) => typeText({ ...s, type: t })).join(" | ");
  switch (s.type) {
    case "array": {
      const item = s.items ? typeText(s.items) : "any";
      return item.includes(" ") && !item.startsWith("{") ? `(${item})[]` : `${item}[]`;
    }
    case "object": {
      const props = Object.entries(s.properties ?? {});
      if (props.length === 0)
        return s.additionalProperties && typeof s.additionalProperties === "object"
          ? `{ [key]: ${typeText(s.additionalProperties)} }`
          : "object";
      const required = new Set(s.required ?? []);
      return `{ ${props.map(([k, v]) => `${k}${required.has(k) ? "" : "?"}: ${typeText(v)}`).join(", ")} }`;
    }
    case undefined:
      return "any";
    default:
      return s.type;
  }
}

/** What a schema allows beyond its type: bounds, pattern, format, default. */
function limits(s) {
  const out = [];
  // An integer's own safe range is no limit worth reading.
  const min = s.minimum === Number.MIN_SAFE_INTEGER ? undefined : s.minimum;
  const max = s.maximum === Number.MAX_SAFE_INTEGER ? undefined : s.maximum;
  if (min !== undefined && max !== undefined) out.push(`${min}–${max}`);
  else if (min !== undefined) out.push(`≥ ${min}`);
  else if (max !== undefined) out.push(`≤ ${max}`);
  if (s.minLength !== undefined || s.maxLength !== undefined)
    out.push(`length ${s.minLength ?? 0}–${s.maxLength ?? "∞"}`);
  if (s.minItems !== undefined || s.maxItems !== undefined) out.push(`${s.minItems ?? 0}–${s.maxItems ?? "∞"} items`);
  if (s.pattern) out.push(`pattern \`${s.pattern}\``);
  if (s.format) out.push(s.format);
  if (s.default !== undefined) out.push(`default \`${JSON.stringify(s.default)}\``);
  return out.join(", ");
}

const cell = (text) => text.replace(/\|/g, "\\|").replace(/\n/g, " ");
const code = (text) => `\`${text}\``;

/** The parameters of one location (path or query) as list items. */
function parameterLines(shape, where, defs) {
  return Object.entries(shape).map(([name, schema]) => {
    const s = jsonSchema(schema, "input", defs);
    const optional = where === "query" && schema.safeParse(undefined).success;
    const extra = limits(s);
    return `  - ${code(name)}${optional ? " (optional)" : ""}: ${typeText(s)}${extra ? `; ${extra}` : ""}`;
  });
}

function bodyText(route, defs) {
  const b = route.body;
  if (b.kind === "json") return `JSON ${typeText(jsonSchema(b.schema, "input", defs))}`;
  if (b.kind === "raw") return `raw bytes (${code(b.contentType)})`;
  return undefined;
}

function responseText(route, defs) {
  const r = route.response;
  if (r.kind === "json") return `${r.status}, JSON ${typeText(jsonSchema(r.schema, "output", defs))}`;
  if (r.kind === "raw")
    return `${r.status}, raw bytes (${code(r.contentType)})${r.emptyStatus ? `; ${r.emptyStatus} when there is none` : ""}`;
  return `${r.status}, no body`;
}

function errorsText(route) {
  const byStatus = new Map();
  for (const c of errorsOf(route)) byStatus.set(statusForCode(c), [...(byStatus.get(statusForCode(c)) ?? []), c]);
  return [...byStatus]
    .sort((a, b) => a[0] - b[0])
    .map(([status, codes]) => `${status} ${codes.map(code).join(", ")}`)
    .join("; ");
}

const authText = {
  none: "none",
  user: "user token",
  pool: "pool token",
  session: "agent session token",
  job: "job token of the job in the path",
  state: "user token, or the job token of a job of the workspace",
};

/** Which section a route belongs to. */
function sectionOf(route) {
  if (route.auth === "state") return "Terraform state backend";
  if (route.path.startsWith(agentApi)) return `Agent protocol — \`${agentApi}\``;
  if (route.path.startsWith(userApi)) return `User API — \`${userApi}\``;
  return "Server";
}

/** The generated reference: a section per API, a block per route, then the schemas the routes name. */
export function routeReference() {
  const defs = new Map();
  const sections = new Map();
  for (const [name, route] of Object.entries(routes)) {
    const lines = [`### ${code(`${route.method} ${route.path}`)}`, "", `${route.summary} (${code(name)})`, ""];
    lines.push(`- Auth: ${authText[route.auth]}`);
    const path = parameterLines(route.params.shape, "path", defs);
    if (path.length > 0) lines.push("- Path:", ...path);
    const query = parameterLines(route.query.shape, "query", defs);
    if (query.length > 0) lines.push("- Query:", ...query);
    const body = bodyText(route, defs);
    if (body) lines.push(`- Body: ${body}`);
    lines.push(`- Response: ${responseText(route, defs)}`, `- Errors: ${errorsText(route)}`, "");
    const section = sectionOf(route);
    sections.set(section, [...(sections.get(section) ?? []), ...lines]);
  }
  const out = [];
  for (const [title, lines] of sections) out.push(`## ${title}`, "", ...lines);
  out.push("## Schemas", "");
  out.push("Request bodies are shown as the client may send them (fields with a default may be left out), responses");
  out.push("as the server sends them.", "");
  const seen = new Map();
  for (const [key, def] of defs) {
    const name = key.slice(key.indexOf(":") + 1);
    // The input and output forms of a schema differ only by defaults; one entry, the output form when both exist.
    if (seen.has(name) && key.startsWith("input:")) continue;
    seen.set(name, def);
  }
  for (const name of [...seen.keys()].sort()) {
    const def = seen.get(name);
    out.push(`### ${name}`, "");
    const props = def.type === "object" ? Object.entries(def.properties ?? {}) : [];
    if (props.length === 0) {
      const extra = limits(def);
      out.push(`${typeText(def)}${extra ? ` (${extra})` : ""}`, "");
      continue;
    }
    const required = new Set(def.required ?? []);
    out.push("| field | type | required | notes |", "|---|---|---|---|");
    for (const [field, s] of props)
      out.push(
        `| ${code(field)} | ${cell(typeText(s))} | ${required.has(field) ? "yes" : "no"} | ${cell(limits(s))} |`,
      );
    out.push("");
  }
  return out.join("\n").trimEnd();
}

/** `doc` with its generated part replaced by the current reference. */
export function withRouteReference(doc) {
  const start = doc.indexOf("<!-- routes:start -->");
  const end = doc.indexOf("<!-- routes:end -->");
  if (start < 0 || end < start)
    throw new Error("docs/api.md lacks the <!-- routes:start --> / <!-- routes:end --> markers");
  return `${doc.slice(0, start)}<!-- routes:start -->\n${routeReference()}\n${doc.slice(end)}`;
}

if (process.argv[1] === fileURLToPath(import.meta.url)) {
  const file = join(dirname(fileURLToPath(import.meta.url)), "..", "docs", "api.md");
  const before = readFileSync(file, "utf8");
  const after = withRouteReference(before);
  if (process.argv.includes("--check")) {
    if (after !== before) {
      console.error("docs/api.md is out of date: run `npm run build && node scripts/api-docs.mjs`");
      process.exit(1);
    }
  } else if (after !== before) writeFileSync(file, after);
}
