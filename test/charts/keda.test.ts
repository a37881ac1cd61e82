// agent-local's KEDA objects, checked as far as they can be without KEDA itself:
//
// 1. Schema: the rendered ScaledObject and TriggerAuthentication are created on the test
//    cluster under CRDs carrying the part of KEDA's schema (keda.sh/v1alpha1) they use, written
//    down below from KEDA's ScaledObject specification and its metrics-api scaler docs; nothing
//    is pruned (every field we render is a field KEDA knows) and wrong types are refused.
// 2. Behaviour: this file plays KEDA's metrics-api scaler as KEDA documents and implements it
//    — GET the trigger's url with `Authorization: Bearer <token>` from the TriggerAuthentication's
//    `token` parameter, refuse a non-200 answer, read `valueLocation` from the JSON body, call
//    the scaler active when the value is above `activationTargetValue`, scale to zero when it is
//    not and minReplicaCount is 0, else give the HPA an AverageValue target of `targetValue`
//    (desired = ceil(value / targetValue), clamped to [max(1, minReplicaCount), maxReplicaCount])
//    — against the real server, with the token and URL the chart rendered.
//
// Not proven here (no KEDA, no registry): KEDA's operator accepting these objects, its polling
// and cooldown timers, the HPA it creates, and its stabilization windows.
import assert from "node:assert/strict";
import { join } from "node:path";
import { after, before, test } from "node:test";
import { parseAllDocuments } from "yaml";
import { repo } from "../support/chart-cluster.js";
import { startStack, writeConfig, type Stack } from "../support/stack.js";
import { kube, startTestCluster, type TestCluster } from "../kube/cluster.js";
import { routes } from "@drover/protocol";
import { helmTemplate } from "../support/helm.js";

const chart = join(repo, "charts", "agent-local");
const ns = "drover";

const int32 = { type: "integer", format: "int32" };
const str = { type: "string" };
/**
 * The fields of keda.sh/v1alpha1 ScaledObject our chart renders, with KEDA's types: spec
 * requires scaleTargetRef (name required; apiVersion, kind, envSourceContainerName optional) and
 * triggers (each: type and metadata required, metadata a map of strings; name, metricType,
 * useCachedMetrics and authenticationRef {name required, kind} optional); pollingInterval,
 * cooldownPeriod, idleReplicaCount, minReplicaCount and maxReplicaCount are int32;
 * advanced.horizontalPodAutoscalerConfig.behavior is an autoscaling/v2 HPA behavior.
 */
const scaledObjectSchema = {
  type: "object",
  properties: {
    spec: {
      type: "object",
      required: ["scaleTargetRef", "triggers"],
      properties: {
        scaleTargetRef: {
          type: "object",
          required: ["name"],
          properties: { name: str, apiVersion: str, kind: str, envSourceContainerName: str },
        },
        pollingInterval: int32,
        cooldownPeriod: int32,
        idleReplicaCount: int32,
        minReplicaCount: int32,
        maxReplicaCount: int32,
        advanced: {
          type: "object",
          properties: {
            restoreToOriginalReplicaCount: { type: "boolean" },
            horizontalPodAutoscalerConfig: {
              type: "object",
              properties: {
                name: str,
                behavior: {
                  type: "object",
                  properties: Object.fromEntries(
                    ["scaleUp", "scaleDown"].map((k) => [
                      k,
                      {
                        type: "object",
                        properties: {
                          stabilizationWindowSeconds: int32,
                          selectPolicy: str,
                          policies: {
                            type: "array",
                            items: {
                              type: "object",
                              required: ["type", "value", "periodSeconds"],
                              properties: { type: str, value: int32, periodSeconds: int32 },
                            },
                          },
                        },
                      },
                    ]),
                  ),
                },
              },
            },
          },
        },
        triggers: {
          type: "array",
          items: {
            type: "object",
            required: ["type", "metadata"],
            properties: {
              type: str,
              name: str,
              metricType: { type: "string", enum: ["AverageValue", "Value", "Utilization"] },
              useCachedMetrics: { type: "boolean" },
              metadata: { type: "object", additionalProperties: str },
              authenticationRef: { type: "object", required: ["name"], properties: { name: str, kind: str } },
            },
          },
        },
      },
    },
  },
};
/** keda.sh/v1alpha1 TriggerAuthentication: spec.secretTargetRef items need parameter, name and key (strings). */
const triggerAuthenticationSchema = {
  type: "object",
  properties: {
    spec: {
      type: "object",
      properties: {
        secretTargetRef: {
          type: "array",
          items: {
            type: "object",
            required: ["parameter", "name", "key"],
            properties: { parameter: str, name: str, key: str },
          },
        },
      },
    },
  },
};

function crd(kind: string, plural: string, schema: object) {
  return {
    apiVersion: "apiextensions.k8s.io/v1",
    kind: "CustomResourceDefinition",
    metadata: { name: `${plural}.keda.sh` },
    spec: {
      group: "keda.sh",
      scope: "Namespaced",
      names: { kind, plural, singular: kind.toLowerCase(), listKind: `${kind}List` },
      versions: [{ name: "v1alpha1", served: true, storage: true, schema: { openAPIV3Schema: schema } }],
    },
  };
}

let cluster: TestCluster;
let stack: Stack;
before(async () => {
  [cluster, stack] = await Promise.all([startTestCluster(), startStack()]);
  assert.equal(
    (await kube(cluster, "POST", "/api/v1/namespaces", { apiVersion: "v1", kind: "Namespace", metadata: { name: ns } }))
      .status,
    201,
  );
  for (const c of [
    crd("ScaledObject", "scaledobjects", scaledObjectSchema),
    crd("TriggerAuthentication", "triggerauthentications", triggerAuthenticationSchema),
  ]) {
    assert.equal(
      (await kube(cluster, "POST", "/apis/apiextensions.k8s.io/v1/customresourcedefinitions", c)).status,
      201,
    );
  }
});
after(async () => {
  await stack?.stop();
  await cluster?.close();
});

function render(args: string[]): any[] {
  const out = helmTemplate([
    "template",
    "rel",
    chart,
    "--namespace",
    ns,
    "--set",
    `agent.token=${stack.poolToken}`,
    "--set",
    "autoscaling.keda.enabled=true",
    ...args,
  ]);
  return parseAllDocuments(out)
    .map((d) => d.toJSON())
    .filter((o) => o !== null);
}
const one = (objects: any[], kind: string) => objects.find((o) => o.kind === kind);

/** Creates `obj` on the test cluster until its CRD is served; returns the answer. */
async function create(obj: any, plural: string) {
  for (let i = 0; ; i++) {
    const res = await kube(cluster, "POST", `/apis/keda.sh/v1alpha1/namespaces/${ns}/${plural}`, obj);
    if (res.status !== 404 || i > 50) return res;
    await new Promise((r) => setTimeout(r, 100));
  }
}

test("the rendered ScaledObject and TriggerAuthentication fit KEDA's schema: created, nothing pruned, wrong types refused", async () => {
  const objects = render(["--set", `agent.url=${stack.server.url}`]);
  for (const [kind, plural] of [
    ["ScaledObject", "scaledobjects"],
    ["TriggerAuthentication", "triggerauthentications"],
  ] as const) {
    const rendered = one(objects, kind);
    const res = await create(rendered, plural);
    assert.equal(res.status, 201, JSON.stringify(res.body));
    assert.deepEqual(
      res.body.spec,
      rendered.spec,
      `${kind}: every rendered field is one KEDA's schema has (unknown ones would be pruned)`,
    );
  }
  const so = one(objects, "ScaledObject");
  const broken = [
    { ...so, metadata: { name: "bad-count" }, spec: { ...so.spec, maxReplicaCount: "10" } },
    {
      ...so,
      metadata: { name: "bad-metadata" },
      spec: {
        ...so.spec,
        triggers: [{ ...so.spec.triggers[0], metadata: { ...so.spec.triggers[0].metadata, targetValue: 1 } }],
      },
    },
    {
      ...so,
      metadata: { name: "no-trigger-type" },
      spec: { ...so.spec, triggers: [{ metadata: so.spec.triggers[0].metadata }] },
    },
  ];
  for (const b of broken) assert.equal((await create(b, "scaledobjects")).status, 422, b.metadata.name);
});

/** What KEDA's metrics-api scaler and the HPA it drives make of one poll, `current` replicas now. */
async function kedaPoll(
  objects: any[],
  current: number,
): Promise<{ value: number; active: boolean; replicas: number } | { error: string }> {
  const so = one(objects, "ScaledObject");
  const trigger = so.spec.triggers[0];
  assert.equal(trigger.type, "metrics-api");
  const m = trigger.metadata as Record<string, string>;
  assert.equal(m.format, "json");
  assert.equal(m.authMode, "bearer");
  // authenticationRef → TriggerAuthentication → its `token` parameter → the Secret's key.
  const auth = objects.find(
    (o) => o.kind === "TriggerAuthentication" && o.metadata.name === trigger.authenticationRef.name,
  );
  const ref = auth.spec.secretTargetRef.find((r: any) => r.parameter === "token");
  const secret = objects.find((o) => o.kind === "Secret" && o.metadata.name === ref.name);
  const token = secret.stringData[ref.key] as string;
  // eslint-disable-next-line no-restricted-globals -- KEDA's own request: the URL exactly as the chart wrote it
  const res = await fetch(m.url!, { method: "GET", headers: { authorization: `Bearer ${token}` } });
  if (res.status !== 200) return { error: `api returned ${res.status}` };
  // valueLocation is a GJSON path: dot-separated keys here.
  let v: unknown = await res.json();
  for (const key of m.valueLocation!.split(".")) v = (v as Record<string, unknown>)[key];
  if (typeof v !== "number") return { error: `valueLocation points to ${typeof v}` };
  const active = v > Number(m.activationTargetValue ?? "0");
  const min = so.spec.minReplicaCount ?? 0;
  const max = so.spec.maxReplicaCount ?? 100;
  if (!active) return { value: v, active, replicas: min === 0 ? 0 : Math.max(min, current) };
  const desired = Math.ceil(v / Number(m.targetValue));
  return { value: v, active, replicas: Math.min(max, Math.max(1, min, desired)) };
}

async function queueRuns(prefix: string, n: number): Promise<void> {
  for (let i = 0; i < n; i++) {
    const ws = `${prefix}-${i}`;
    await stack.server.api(routes.createWorkspace, { body: { name: ws, pool: stack.pool } });
    await stack.startRun(writeConfig(stack.dir, ws, { "main.tf": 'resource "terraform_data" "x" {}\n' }), ws, [
      "--plan-only",
    ]);
  }
}

test("KEDA's metrics-api scaler against the real server: zero demand scales to zero, queued runs scale out by desiredAgents / targetValue within maxReplicaCount, a refused token is a scaler error", async () => {
  const base = ["--set", `agent.url=${stack.server.url}`];
  assert.deepEqual(
    await kedaPoll(render(base), 2),
    { value: 0, active: false, replicas: 0 },
    "an idle pool: inactive, scaled to zero",
  );
  await queueRuns("keda", 4);
  assert.deepEqual(
    await kedaPoll(render(base), 0),
    { value: 4, active: true, replicas: 4 },
    "four queued plan-only runs, one job per agent",
  );
  assert.deepEqual(
    await kedaPoll(render([...base, "--set", "agent.concurrency=3"]), 0),
    { value: 2, active: true, replicas: 2 },
    "three jobs per agent: the server's desiredAgents is ceil(4 / 3)",
  );
  assert.deepEqual(
    await kedaPoll(render([...base, "--set", "autoscaling.keda.maxReplicaCount=3"]), 0),
    { value: 4, active: true, replicas: 3 },
    "clamped to maxReplicaCount",
  );
  assert.deepEqual(await kedaPoll(render([...base, "--set", "autoscaling.keda.minReplicaCount=2"]), 0), {
    value: 4,
    active: true,
    replicas: 4,
  });
  // A revoked pool token: the server answers 401 and KEDA reports a scaler error (no replica change from it).
  assert.equal((await stack.server.api(routes.revokePoolToken, { params: { id: stack.poolTokenId } })).status, 200);
  assert.deepEqual(await kedaPoll(render(base), 4), { error: "api returned 401" });
});
