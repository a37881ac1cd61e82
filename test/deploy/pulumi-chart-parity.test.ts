// Each mode of the Pulumi component (deploy/pulumi, under Pulumi's mocks) against what the
// matching chart renders with the same inputs (`helm template`), field by field: every object,
// container, env var, volume, mount, port, security context, resource, strategy, policy, CRD and
// the AgentTask's Job template. The two are written separately, so they drift; this test makes
// drift a failure. What may differ is the short allow-list below, each entry with its reason;
// an entry that no longer matches anything fails too, so the list cannot outlive the drift.
import assert from "node:assert/strict";

import { dirname, join } from "node:path";
import { fileURLToPath, pathToFileURL } from "node:url";
import { describe, test } from "node:test";
import * as pulumi from "@pulumi/pulumi";
import { parseAllDocuments } from "yaml";
import { settings } from "@drover/protocol";
import { helmTemplate } from "../support/helm.js";

const repo = join(dirname(fileURLToPath(import.meta.url)), "..", "..", "..");
const token = "drv_p_eyJ1cmwiOiJodHRwczovL2QuZXhhbXBsZSIsInBvb2wiOiJwIn0.c2VjcmV0";
type Obj = Record<string, any>;
type Mode = "local" | "job" | "node";
const charts: Record<Mode, string> = { local: "agent-local", job: "agent-job", node: "agent-k8s" };

/**
 * The same installation both ways. `fullnameOverride` gives the chart's objects the names the
 * component gives its own (`<name>-<suffix>`), so objects pair by kind and name.
 */
interface Inputs {
  chart: string[];
  pulumi: Record<string, unknown>;
}
const defaults: Inputs = { chart: [], pulumi: {} };
const ca = "-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----\n";
const withCaAndProxy: Inputs = {
  chart: [
    ...["--set-string", `agent.caBundle=${ca}`, "--set", "proxy.httpsProxy=http://proxy:3128"],
    ...["--set", "proxy.noProxy=.svc", "--set", "agent.url=https://d.example"],
  ],
  pulumi: { caBundle: ca, proxy: { httpsProxy: "http://proxy:3128", noProxy: ".svc" }, url: "https://d.example" },
};

function renderChart(mode: Mode, inputs: Inputs): Obj[] {
  const args = [
    ...["template", "drv", join(repo, "charts", charts[mode]), "--namespace", "drover", "--include-crds"],
    ...["--set", "fullnameOverride=drv", "--set", `agent.token=${token}`, ...inputs.chart],
  ];
  return parseAllDocuments(helmTemplate(args))
    .map((d) => d.toJSON() as Obj | null)
    .filter((o): o is Obj => o !== null);
}

/** Pulumi's wire form of a secret (`{ <sig>: <marker>, value }`) unwrapped, recursively. */
function plain(v: unknown): unknown {
  if (Array.isArray(v)) return v.map(plain);
  if (v && typeof v === "object") {
    const o = v as Obj;
    if ("4dabf18193072939515e22adb298388d" in o) return plain(o.value);
    return Object.fromEntries(Object.entries(o).map(([k, x]) => [k, plain(x)]));
  }
  return v;
}

async function renderPulumi(mode: Mode, inputs: Inputs): Promise<Obj[]> {
  const created: { type: string; name: string; inputs: Obj }[] = [];
  await pulumi.runtime.setMocks(
    {
      newResource: (a) => {
        created.push({ type: a.type, name: a.name, inputs: a.inputs as Obj });
        return { id: `${a.name}-id`, state: a.inputs };
      },
      call: (a) => a.inputs,
    },
    "drover",
    "parity",
    false,
  );
  const url = pathToFileURL(join(repo, "deploy", "pulumi", "dist", "src", "index.js")).href;
  const { DroverAgent } = (await import(url)) as { DroverAgent: new (name: string, args: Obj) => unknown };
  new DroverAgent("drv", { namespace: "drover", createNamespace: false, token, mode, ...inputs.pulumi });
  // Every registration the component started has reached the mocks once the RPC queue is empty.
  await pulumi.runtime.disconnect();
  return created.flatMap((c) => {
    const m = /^kubernetes:([^:]+):([^:]+)$/.exec(c.type);
    if (!m) return [];
    const o = plain(c.inputs) as Obj;
    return [{ ...o, apiVersion: m[1]!.replace(/^core\//, ""), kind: m[2]! }];
  });
}

// Names the component spells differently from the chart (with fullnameOverride): mapped before
// pairing, everywhere they occur (references too). Renaming live objects would replace them.
const renames: Record<string, string> = { "drv-agent": "drv", "drv-node-worker": "drv-worker" };

/** A pod template's owner, the role by which selectors are compared. */
function podTemplates(objects: Obj[]): { role: string; labels: Record<string, string> }[] {
  return objects.flatMap((o) => {
    if (["Deployment", "DaemonSet"].includes(o.kind))
      return [{ role: o.kind, labels: o.spec.template.metadata.labels }];
    if (o.kind === "AgentTask") return [{ role: "task pods", labels: o.spec.jobTemplate.template.metadata.labels }];
    return [];
  });
}
const selects = (sel: Record<string, string>, labels: Record<string, string> = {}) =>
  Object.entries(sel).every(([k, v]) => labels[k] === v);

/**
 * One side in a comparable form. Labels differ by design (the charts' `helm.sh/*` and
 * `app.kubernetes.io/name: <chart>`, the component's own), so every selector is replaced by the
 * roles of the pods it selects, and labels are dropped. Named lists become maps by name, env
 * vars set to the setting's own default count as unset, a container seccompProfile equal to the
 * pod's is redundant, and Helm's checksum annotations (restart on Secret change) are dropped.
 */
function normalize(objects: Obj[]): Map<string, Obj> {
  const pods = podTemplates(objects);
  const roles = (sel: Record<string, string> = {}) => pods.filter((p) => selects(sel, p.labels)).map((p) => p.role);
  const out = new Map<string, Obj>();
  for (const raw of objects) {
    const o = structuredClone(raw);
    if (o.spec?.selector) o.spec.selector = { selects: roles(o.spec.selector.matchLabels ?? o.spec.selector) };
    if (o.spec?.podSelector) o.spec.podSelector = { selects: roles(o.spec.podSelector.matchLabels) };
    const n = walk(o, "") as Obj;
    delete n.metadata.namespace;
    out.set(`${n.kind}/${n.metadata.name}`, n);
  }
  return out;
}

const byName = new Set(["containers", "initContainers", "env", "volumes", "ports", "subjects"]);
function walk(v: unknown, key: string, podSeccomp?: unknown): unknown {
  if (typeof v === "string") return renames[v] ?? v;
  if (Array.isArray(v)) {
    if (byName.has(key) && v.every((x) => x && typeof x === "object" && "name" in x)) {
      const entries = v.map((x: Obj) => [renames[x.name] ?? x.name, walk(x, "", podSeccomp)] as [string, Obj]);
      return Object.fromEntries(entries.filter(([name, x]) => !(key === "env" && isDefault(name, x))));
    }
    if (key === "volumeMounts") return Object.fromEntries(v.map((x: Obj) => [x.mountPath, walk(x, "", podSeccomp)]));
    return v.map((x) => walk(x, "", podSeccomp));
  }
  if (!v || typeof v !== "object") return v;
  const o = v as Obj;
  // A pod's security context is the one with fsGroup; its containers' contexts come below it.
  const isPod = o.securityContext && "fsGroup" in o.securityContext;
  const seccomp = isPod ? JSON.stringify(o.securityContext.seccompProfile) : podSeccomp;
  const r: Obj = {};
  for (const [k, x] of Object.entries(o)) {
    if (k === "labels") continue;
    if (k === "annotations") {
      const kept = Object.fromEntries(Object.entries(x as Obj).filter(([a]) => !a.startsWith("checksum/")));
      if (Object.keys(kept).length > 0) r[k] = kept;
      continue;
    }
    r[k] = walk(x, k, seccomp);
  }
  if (r.capabilities && r.seccompProfile && JSON.stringify(r.seccompProfile) === podSeccomp) delete r.seccompProfile;
  return r;
}

function isDefault(name: string, env: Obj): boolean {
  const s = (settings as Record<string, { default?: unknown }>)[name];
  return s !== undefined && s.default !== undefined && env.valueFrom === undefined && String(s.default) === env.value;
}

/** Every leaf where the two differ, as `Kind/name path: chart=… pulumi=…`. */
function diff(chart: unknown, mine: unknown, path: string, out: string[]): void {
  const isObj = (x: unknown): x is Obj => !!x && typeof x === "object" && !Array.isArray(x);
  // Down to the leaves, also where one side lacks the object, so each line names one field.
  if ((isObj(chart) || chart === undefined) && (isObj(mine) || mine === undefined) && chart !== mine) {
    const [a, b] = [chart ?? {}, mine ?? {}];
    for (const k of new Set([...Object.keys(a), ...Object.keys(b)])) diff(a[k], b[k], `${path}.${k}`, out);
    return;
  }
  if (Array.isArray(chart) && Array.isArray(mine)) {
    for (let i = 0; i < Math.max(chart.length, mine.length); i++) diff(chart[i], mine[i], `${path}[${i}]`, out);
    return;
  }
  const [a, b] = [JSON.stringify(chart), JSON.stringify(mine)];
  if (a !== b) out.push(`${path}: chart=${a} pulumi=${b}`);
}

/**
 * The intended differences: a mode (or every mode), a pattern of `Kind/name path` and why.
 * Keep it short: every line here is drift a user would see between a chart and the component.
 */
const allowed: { modes: Mode[]; path: RegExp; why: string }[] = [
  {
    modes: ["local", "job", "node"],
    path: /^PodDisruptionBudget\//,
    why: "the component's PDB is opt-in (podDisruptionBudget); the charts render maxUnavailable 1 by default",
  },
  {
    modes: ["local", "job", "node"],
    path: /^Deployment\/drv(-controller)?\.spec\.template\.metadata\.annotations\.prometheus\.io\//,
    why: "the component also annotates its pods for annotation-based scraping (the Service has them in both)",
  },
  {
    modes: ["job", "node"],
    path: /env\.(DROVER_AGENT_NAME|DROVER_AGENT_CONTROLLER_NAME)\.value: chart="drv" pulumi="drv-controller"/,
    why: "the controller's name labels its Jobs: the component keeps `<name>-controller`, so installations keep theirs",
  },
  {
    modes: ["job", "node"],
    path: /^Role\/drv-controller\.rules\[\d+\]\.resourceNames\[0\]: chart="drv-leader" pulumi="drv-controller-leader"$/,
    why: "the leader Lease is `<DROVER_AGENT_NAME>-leader`, so it follows the controller's name (the entry above)",
  },
  {
    modes: ["job", "node"],
    path: /^AgentTask\/drv-task-template\.spec\.jobTemplate\.template\.spec\.initContainers\.drover-init\.command:/,
    why: "the controller sets drover-init's command itself (job-spec.ts); the charts spell it out",
  },
];

const cases: { name: string; inputs: Inputs }[] = [
  { name: "defaults", inputs: defaults },
  { name: "a CA bundle, a proxy and a URL", inputs: withCaAndProxy },
];
const used = new Set<number>();

describe("the Pulumi component renders what the charts render", () => {
  for (const mode of ["local", "job", "node"] as const) {
    for (const c of cases) {
      test(`${mode} mode = ${charts[mode]}, ${c.name}`, async () => {
        const chart = normalize(renderChart(mode, c.inputs));
        const mine = normalize(await renderPulumi(mode, c.inputs));
        const main = mode === "local" ? "Deployment/drv" : "Deployment/drv-controller";
        assert.ok(chart.has(main) && mine.has(main), [...chart.keys(), ...mine.keys()].join(", "));
        const found: string[] = [];
        for (const key of new Set([...chart.keys(), ...mine.keys()])) {
          const [a, b] = [chart.get(key), mine.get(key)];
          if (!a || !b) found.push(`${key}: only in ${a ? "the chart" : "the component"}`);
          else diff(a, b, key, found);
        }
        const left = found.filter((line) => {
          const i = allowed.findIndex((x) => x.modes.includes(mode) && x.path.test(line));
          if (i >= 0) used.add(i);
          return i < 0;
        });
        const what = `drift between ${charts[mode]} and the Pulumi component (fix one side, or allow it with a reason)`;
        assert.deepEqual(left, [], what);
      });
    }
  }

  test("every allow-list entry still matches a difference (a fixed drift leaves the list)", () => {
    assert.deepEqual(
      allowed.filter((_, i) => !used.has(i)).map((x) => x.why),
      [],
    );
  });
});
