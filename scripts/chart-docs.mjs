// Generates, for every chart under charts/: the README values table (between the markers
// <!-- values:start --> and <!-- values:end -->) and values.schema.json, both from the
// `# -- description` comments and defaults of values.yaml. `--check` exits 1 when either is
// stale instead of writing.
import { existsSync, readdirSync, readFileSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { isMap, isScalar, parseDocument } from "yaml";

/** Values whose allowed set is narrower than their type. */
const enums = {
  mode: ["runs", "vcs"],
  "agent.shutdownMode": ["graceful", "drain", "force"],
  "agent.logFormat": ["json", "plain", "dev"],
  "image.pullPolicy": ["Always", "IfNotPresent", "Never"],
  "networkPolicy.flavor": ["kubernetes", "cilium"],
  "strategy.type": ["RollingUpdate", "Recreate"],
  "persistence.persistentVolumeClaim.accessMode": [
    "ReadWriteOnce",
    "ReadWriteMany",
    "ReadOnlyMany",
    "ReadWriteOncePod",
  ],
  "persistence.cache.persistentVolumeClaim.accessMode": [
    "ReadWriteOnce",
    "ReadWriteMany",
    "ReadOnlyMany",
    "ReadWriteOncePod",
  ],
};
/** Values that take a whole number or a percentage ("50%"); empty means unset. */
const intOrPercent = [
  "podDisruptionBudget.minAvailable",
  "podDisruptionBudget.maxUnavailable",
  "task.podDisruptionBudget.maxUnavailable",
  "strategy.rollingUpdate.maxSurge",
  "strategy.rollingUpdate.maxUnavailable",
];
/**
 * Maps whose keys are Kubernetes' own fields, or the user's (a node selector with a default): open at every depth, so
 * any field Kubernetes accepts passes.
 */
const openObjects = [
  "affinity",
  "strategy",
  "updateStrategy",
  "podSecurityContext",
  "securityContext",
  "emptyDir",
  "nodeSelector",
];
/** A Kubernetes quantity, which Kubernetes accepts as a string or a number. */
const quantity = {
  type: ["string", "number"],
  pattern: "^[+-]?([0-9]+(\\.[0-9]*)?|\\.[0-9]+)([KMGTPE]i|[numkMGTPE]|[eE][+-]?[0-9]+)?$",
};
/** A container's `resources`: the shape of the core ResourceRequirements, with any resource name in either map. */
const resourceRequirements = {
  type: "object",
  properties: {
    requests: { type: "object", additionalProperties: quantity },
    limits: { type: "object", additionalProperties: quantity },
    claims: { type: "array" },
  },
  additionalProperties: false,
};
const ranges = {
  "agent.concurrency": [1, 1000],
  terminationGracePeriodSeconds: [1, 86400],
  replicaCount: [0, 1000],
  "autoscaling.keda.minReplicaCount": [0, 1000],
  "autoscaling.keda.maxReplicaCount": [1, 1000],
  "autoscaling.keda.pollingInterval": [1, 3600],
  "autoscaling.keda.cooldownPeriod": [0, 86400],
  "autoscaling.keda.scaleDownStabilizationSeconds": [0, 3600],
};

function description(comment) {
  if (!comment) return undefined;
  const lines = comment.split("\n").map((l) => l.trim());
  const at = lines.findIndex((l) => l.startsWith("--"));
  if (at < 0) return undefined;
  return lines
    .slice(at)
    .join(" ")
    .replace(/^--\s*/, "")
    .trim();
}

/**
 * The `# --` comment of the map's i-th key. The yaml library attaches the comment above a
 * nested map's first key to the map itself, not to that key.
 */
function keyComment(map, i) {
  const pair = map.items[i];
  return pair.key.commentBefore ?? pair.commentBefore ?? (i === 0 ? map.commentBefore : undefined);
}

/** Whether anything inside `node` has its own description. */
function hasDocs(node) {
  return isMap(node) && node.items.some((p, j) => description(keyComment(node, j)) || hasDocs(p.value));
}

/** Collects a row per documented value; `undocumented` gets every value without a description. */
function walk(node, path, rows, undocumented) {
  if (!isMap(node)) return;
  node.items.forEach((pair, i) => {
    const key = String(pair.key.value);
    const full = path ? `${path}.${key}` : key;
    const desc = description(keyComment(node, i));
    const value = pair.value?.toJSON?.() ?? (isScalar(pair.value) ? pair.value.value : null);
    const documentedChildren = hasDocs(pair.value);
    if (isMap(pair.value) && documentedChildren) return walk(pair.value, full, rows, undocumented);
    if (!desc) return undocumented.push(full);
    rows.push({
      key: full,
      type: Array.isArray(value)
        ? "list"
        : value === null
          ? "string"
          : typeof value === "object"
            ? "object"
            : typeof value === "number"
              ? Number.isInteger(value)
                ? "int"
                : "float"
              : typeof value,
      value,
      desc,
    });
  });
}

function schemaOf(value, path, open = false) {
  const last = path.split(".").pop();
  if (last === "resources") return resourceRequirements;
  if (Array.isArray(value)) return { type: "array" };
  if (value === null) return {};
  if (typeof value === "object") {
    const keys = Object.keys(value);
    // An empty map is free-form (annotations, nodeSelector, extraEnv…).
    if (keys.length === 0) return { type: "object" };
    const freeForm = open || openObjects.includes(last);
    const properties = Object.fromEntries(
      keys.map((k) => [k, schemaOf(value[k], path ? `${path}.${k}` : k, freeForm)]),
    );
    // `global` is shared with an umbrella chart's other subcharts: keys this chart does not read are theirs.
    return { type: "object", properties, additionalProperties: freeForm || path === "global" };
  }
  if (intOrPercent.includes(path)) return { type: ["integer", "string"], minimum: 0, pattern: "^([0-9]+%?)?$" };
  const s = {
    type:
      typeof value === "number"
        ? Number.isInteger(value)
          ? "integer"
          : "number"
        : typeof value === "boolean"
          ? "boolean"
          : "string",
  };
  if (enums[path]) s.enum = enums[path];
  if (ranges[path]) Object.assign(s, { minimum: ranges[path][0], maximum: ranges[path][1] });
  if (s.type === "integer" && typeof value === "number" && String(value).length > 0 && /Port$/.test(path))
    Object.assign(s, { minimum: 0, maximum: 65535 });
  return s;
}

function render(chartDir) {
  const doc = parseDocument(readFileSync(join(chartDir, "values.yaml"), "utf8"));
  const rows = [];
  const undocumented = [];
  walk(doc.contents, "", rows, undocumented);
  if (undocumented.length > 0) {
    console.error(`${chartDir}/values.yaml: no "# --" description for ${undocumented.join(", ")}`);
    process.exitCode = 1;
  }
  rows.sort((a, b) => a.key.localeCompare(b.key));
  const cell = (s) => String(s).replace(/\|/g, "\\|").replace(/\n/g, " ");
  const table = [
    "| Key | Type | Default | Description |",
    "|-----|------|---------|-------------|",
    ...rows.map((r) => `| ${r.key} | ${r.type} | \`${cell(JSON.stringify(r.value))}\` | ${cell(r.desc)} |`),
  ].join("\n");
  const values = doc.toJSON();
  const schema = {
    $schema: "http://json-schema.org/draft-07/schema#",
    title: `${chartDir.split("/").pop()} values`,
    ...schemaOf(values, ""),
  };
  // Helm gives every dependency a key of the parent's values (the library chart reads none).
  const chart = parseDocument(readFileSync(join(chartDir, "Chart.yaml"), "utf8")).toJSON();
  for (const dep of chart.dependencies ?? []) schema.properties[dep.alias ?? dep.name] = { type: "object" };
  return { table, schema: JSON.stringify(schema, null, 2) + "\n" };
}

const check = process.argv.includes("--check");
const chartsDir = join(process.cwd(), "charts");
let stale = [];
for (const name of readdirSync(chartsDir)) {
  const dir = join(chartsDir, name);
  if (!existsSync(join(dir, "values.yaml"))) continue;
  const { table, schema } = render(dir);
  const readmePath = join(dir, "README.md");
  const readme = existsSync(readmePath)
    ? readFileSync(readmePath, "utf8")
    : `# ${name}\n\n## Values\n\n<!-- values:start -->\n<!-- values:end -->\n`;
  const start = readme.indexOf("<!-- values:start -->");
  const end = readme.indexOf("<!-- values:end -->");
  if (start < 0 || end < 0)
    throw new Error(`${readmePath} lacks the <!-- values:start --> / <!-- values:end --> markers`);
  const newReadme = `${readme.slice(0, start)}<!-- values:start -->\n${table}\n${readme.slice(end)}`;
  const schemaPath = join(dir, "values.schema.json");
  const oldSchema = existsSync(schemaPath) ? readFileSync(schemaPath, "utf8") : "";
  if (check) {
    if (newReadme !== readme) stale.push(`${name}/README.md`);
    if (schema !== oldSchema) stale.push(`${name}/values.schema.json`);
  } else {
    writeFileSync(readmePath, newReadme);
    writeFileSync(schemaPath, schema);
  }
}
if (stale.length > 0) {
  console.error(`stale chart docs: ${stale.join(", ")}; run \`node scripts/chart-docs.mjs\``);
  process.exit(1);
}
