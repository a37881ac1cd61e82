import assert from "node:assert/strict";

import { readFileSync } from "node:fs";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";
import { test } from "node:test";
import { parseAllDocuments } from "yaml";
import { helmTemplate } from "../support/helm.js";

// Least privilege, checked against the code: every Kubernetes API call the controller and the
// node worker make (read from their sources) needs a grant of the chart's Role, and every
// grant of the Role must be used by such a call. A new call without a grant, or a grant left
// behind after a call went away, fails here.

const repo = join(dirname(fileURLToPath(import.meta.url)), "..", "..", "..");
const token = "drv_p_eyJ1cmwiOiJodHRwczovL2QuZXhhbXBsZSIsInBvb2wiOiJwIn0.c2VjcmV0";

/** `group/resource verb` strings. */
type Grants = Set<string>;

const kinds: Record<string, [string, string]> = {
  Job: ["batch", "jobs"],
  Pod: ["", "pods"],
  Secret: ["", "secrets"],
  Event: ["", "events"],
  ConfigMap: ["", "configmaps"],
  Role: ["rbac.authorization.k8s.io", "roles"],
  RoleBinding: ["rbac.authorization.k8s.io", "rolebindings"],
  ServiceAccount: ["", "serviceaccounts"],
  Lease: ["coordination.k8s.io", "leases"],
};
const verbs: Record<string, string> = {
  list: "list",
  read: "get",
  create: "create",
  delete: "delete",
  patch: "patch",
  replace: "update",
  get: "get",
};

/** The API calls a source file makes, as grants: client methods, custom objects, informers (list + watch). */
function callsOf(file: string): Grants {
  const src = readFileSync(join(repo, "packages", "agent", "src", "drivers", "kubernetes", file), "utf8");
  const used: Grants = new Set();
  for (const m of src.matchAll(/\.(list|read|create|delete|patch|replace)Namespaced([A-Z][A-Za-z]*?)(Status)?\(/g)) {
    const [, verb, kind, sub] = m;
    if (kind === "CustomObject") continue; // read from its group and plural below
    const k = kinds[kind!];
    assert.ok(k, `${file}: unknown kind ${kind} (add it to this test's table)`);
    used.add(`${k[0]}/${k[1]}${sub ? "/status" : ""} ${verbs[verb!]}`);
  }
  for (const m of src.matchAll(
    /\.(get|list|create|delete|patch|replace)NamespacedCustomObject(Status)?\(\{[^}]*group: "([^"]+)"[^}]*plural: "([^"]+)"/g,
  )) {
    used.add(`${m[3]}/${m[4]}${m[2] ? "/status" : ""} ${verbs[m[1]!]}`);
  }
  // Informers: `inform("<resource>", "<path>", ...)` lists and watches the path's resource (however the
  // formatter breaks the call's lines).
  for (const m of src.matchAll(
    /inform\(\s*"[^"]*",\s*`\/apis?\/(?:([a-z.]+)\/)?v1(?:(?:alpha|beta)\d+)?\/namespaces\/\$\{ns\}\/([a-z]+)`/g,
  )) {
    const group = m[1] && m[1] !== "v1" ? m[1] : "";
    used.add(`${group}/${m[2]} list`).add(`${group}/${m[2]} watch`);
  }
  // `startInformer({ …, path: "/api/v1/namespaces/${namespace}/<resource>", … })` likewise.
  for (const m of src.matchAll(
    /startInformer<\w+>\(\{[^}]*?path: `\/apis?\/(?:([a-z.]+)\/)?v1\/namespaces\/\$\{\w+\}\/([a-z]+)`/g,
  )) {
    used.add(`${m[1] ?? ""}/${m[2]} list`).add(`${m[1] ?? ""}/${m[2]} watch`);
  }
  if (/new ListWatch|makeInformer/.test(src) && !/inform\(|startInformer</.test(src))
    assert.fail(`${file}: an informer this test cannot attribute`);
  return used;
}

interface Rule {
  apiGroups: string[];
  resources: string[];
  resourceNames?: string[];
  verbs: string[];
}

function rules(chart: string, role: string, args: string[] = []): Rule[] {
  const out = helmTemplate(["template", "rel", join(repo, "charts", chart), "--set", `agent.token=${token}`, ...args]);
  const r = parseAllDocuments(out)
    .map((d) => d.toJSON() as { kind: string; metadata: { name: string }; rules?: Rule[] } | null)
    .find((o) => o?.kind === "Role" && o.metadata.name === `rel-${chart}-${role}`);
  assert.ok(r, `${chart}: no Role ${role}`);
  return r.rules ?? [];
}

function granted(chart: string, role: string, args: string[] = []): Grants {
  const g: Grants = new Set();
  for (const rule of rules(chart, role, args))
    for (const group of rule.apiGroups)
      for (const res of rule.resources) for (const v of rule.verbs) g.add(`${group}/${res} ${v}`);
  return g;
}

const diff = (a: Grants, b: Grants) => [...a].filter((x) => !b.has(x)).sort();

/** The controller's sources: the process, its launches, its watches, its template check, its leader lease. */
const controllerFiles = [
  "controller.ts",
  "controller-context.ts",
  "launch.ts",
  "job-watch.ts",
  "template-check.ts",
  "stage-trace.ts",
  "controller-metrics.ts",
  "leader-lease.ts",
];
const controllerCalls = (): Grants => new Set(controllerFiles.flatMap((f) => [...callsOf(f)]));

test("the controller's Role grants exactly the API calls the controller makes", () => {
  const controller = controllerCalls();
  assert.ok(controller.has("batch/jobs create") && controller.has("batch/jobs watch"), [...controller].join(", "));
  // agent-k8s's node mode also grants each run's job Secret to the node workers (run-access.ts).
  const nodeMode = new Set([...controller, ...callsOf("run-access.ts")]);
  for (const [chart, used] of [
    ["agent-job", controller],
    ["agent-k8s", nodeMode],
  ] as const) {
    const g = granted(chart, "controller");
    assert.deepEqual(diff(used, g), [], `${chart}: calls without a grant`);
    assert.deepEqual(diff(g, used), [], `${chart}: grants no call uses`);
  }
});

test("no Role grants pods/log or secrets delete; agenttasks (and its status) only the chart's own task template, by name", () => {
  // The controller writes its template's Valid condition (I7): a status patch, and no update.
  assert.ok(controllerCalls().has("drover.dev/agenttasks/status patch"));
  for (const [chart, role] of [
    ["agent-job", "controller"],
    ["agent-k8s", "controller"],
    ["agent-k8s", "worker"],
  ] as const) {
    const g = granted(chart, role);
    for (const bad of ["/pods/log get", "/secrets delete", "drover.dev/agenttasks/status update"]) {
      assert.ok(!g.has(bad), `${chart} ${role}: ${bad}`);
    }
    assert.equal(
      g.has("drover.dev/agenttasks/status patch"),
      role === "controller",
      `${chart} ${role}: agenttasks/status patch`,
    );
    for (const rule of rules(chart, role).filter((r) => r.resources.some((x) => x.startsWith("agenttasks")))) {
      assert.deepEqual(
        rule.resourceNames,
        [`rel-${chart}-task-template`],
        `${chart} ${role}: agenttasks granted beyond the task template`,
      );
    }
  }
});

test("agent-k8s's node workers are granted no Secret: the controller grants each run's job Secret by name", () => {
  const g = granted("agent-k8s", "worker");
  assert.deepEqual(
    [...g].filter((x) => x.startsWith("/secrets")),
    [],
    "the worker Role grants no Secret",
  );
  assert.ok(callsOf("run-access.ts").has("rbac.authorization.k8s.io/roles create"));
});

test("agent-k8s's node-worker Role grants exactly the worker's calls but its per-run Secret read", () => {
  const calls = callsOf("node-worker.ts");
  assert.ok(calls.has("/pods list") && calls.delete("/secrets get"), [...calls].join(", "));
  const g = granted("agent-k8s", "worker");
  assert.deepEqual(diff(calls, g), [], "calls without a grant");
  assert.deepEqual(diff(g, calls), [], "grants no call uses");
});

test("agent-local's pod-annotator Role grants only the patch of pods the sidecar sends", () => {
  const src = readFileSync(join(repo, "packages", "agent", "src", "drivers", "kubernetes", "pod-annotator.ts"), "utf8");
  const methods = new Set([...src.matchAll(/method: "([A-Z]+)"/g)].map((m) => m[1]!.toLowerCase()));
  assert.deepEqual([...methods], ["patch"]);
  const args = ["--set", "busyPodProtection.enabled=true"];
  assert.deepEqual([...granted("agent-local", "pod-annotator", args)], ["/pods patch"]);
});
