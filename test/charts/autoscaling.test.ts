// agent-local's autoscaling, rendered: the KEDA ScaledObject reads desiredAgents from the
// pool-token demand endpoint with scale-to-zero, the HPA owns the replica count, and busy-pod
// protection puts the API token in the pod-annotator sidecar only, under a Role that gets and
// patches pods and nothing else.
import assert from "node:assert/strict";
import { spawnSync } from "node:child_process";
import { join } from "node:path";
import { pathToFileURL } from "node:url";
import { test } from "node:test";
import { parseAllDocuments } from "yaml";
import { repo } from "../support/chart-cluster.js";
import { helmTemplate } from "../support/helm.js";

const { tools } = (await import(pathToFileURL(join(repo, "scripts", "tools.mjs")).href)) as {
  tools(): { helm: string };
};
const { helm } = tools();
const token = "drv_p_eyJ1cmwiOiJodHRwczovL2QuZXhhbXBsZSIsInBvb2wiOiJwIn0.c2VjcmV0";
const chart = join(repo, "charts", "agent-local");

function render(args: string[]): any[] {
  const out = helmTemplate([
    "template",
    "rel",
    chart,
    "--namespace",
    "drover",
    "--set",
    `agent.token=${token}`,
    ...args,
  ]);
  const docs = parseAllDocuments(out, { uniqueKeys: true, strict: true });
  assert.ok(!("empty" in docs));
  return docs.map((d) => d.toJSON()).filter((o) => o !== null);
}
const one = (objects: any[], kind: string) => {
  const found = objects.filter((o) => o.kind === kind);
  assert.equal(found.length, 1, `one ${kind}`);
  return found[0];
};
const keda = ["--set", "autoscaling.keda.enabled=true", "--set", "agent.url=https://drover.example/"];

test("KEDA: a metrics-api trigger on desiredAgents with the pool token, scale to zero, and no replica count of the Deployment's own", () => {
  const lint = spawnSync(helm, ["lint", chart, "--set", `agent.token=${token}`, ...keda], { encoding: "utf8" });
  assert.equal(lint.status, 0, lint.stdout + lint.stderr);
  const objects = render([...keda, "--set", "agent.concurrency=3", "--set", "autoscaling.keda.maxReplicaCount=7"]);
  const so = one(objects, "ScaledObject");
  assert.equal(so.apiVersion, "keda.sh/v1alpha1");
  assert.equal(so.spec.scaleTargetRef.name, one(objects, "Deployment").metadata.name);
  assert.equal(so.spec.minReplicaCount, 0);
  assert.equal(so.spec.maxReplicaCount, 7);
  assert.equal(so.spec.advanced.horizontalPodAutoscalerConfig.behavior.scaleDown.stabilizationWindowSeconds, 60);
  assert.deepEqual(so.spec.triggers, [
    {
      type: "metrics-api",
      metadata: {
        url: "https://drover.example/api/agent/v1/demand?jobsPerAgent=3",
        format: "json",
        valueLocation: "desiredAgents",
        targetValue: "1",
        activationTargetValue: "0",
        authMode: "bearer",
      },
      authenticationRef: { name: "rel-agent-local-demand" },
    },
  ]);
  const auth = one(objects, "TriggerAuthentication");
  assert.equal(auth.metadata.name, "rel-agent-local-demand");
  const secret = one(objects, "Secret");
  assert.deepEqual(auth.spec.secretTargetRef, [{ parameter: "token", name: secret.metadata.name, key: "token" }]);
  assert.ok(!("replicas" in one(objects, "Deployment").spec), "the HPA owns the replica count");
  assert.ok(!JSON.stringify(so).includes("drv_p_") && !JSON.stringify(auth).includes("drv_p_"));

  // An existing token Secret and a separate URL for KEDA.
  const existing = render([
    "--set",
    "autoscaling.keda.enabled=true",
    "--set",
    "autoscaling.keda.serverUrl=http://drover.svc:8080",
    "--set",
    "agent.tokenExistingSecret.name=pool",
    "--set",
    "agent.tokenExistingSecret.key=t",
  ]);
  assert.deepEqual(one(existing, "TriggerAuthentication").spec.secretTargetRef, [
    { parameter: "token", name: "pool", key: "t" },
  ]);
  assert.equal(
    one(existing, "ScaledObject").spec.triggers[0].metadata.url,
    "http://drover.svc:8080/api/agent/v1/demand?jobsPerAgent=1",
  );

  // Off by default.
  const plain = render([]);
  assert.equal(plain.filter((o) => o.kind === "ScaledObject" || o.kind === "TriggerAuthentication").length, 0);
  assert.equal(one(plain, "Deployment").spec.replicas, 1);
});

test("KEDA refusals: no URL to call, min above max", () => {
  const noUrl = spawnSync(
    helm,
    ["template", "rel", chart, "--set", `agent.token=${token}`, "--set", "autoscaling.keda.enabled=true"],
    { encoding: "utf8" },
  );
  assert.notEqual(noUrl.status, 0);
  assert.match(noUrl.stderr, /autoscaling.keda.serverUrl or agent.url/);
  const inverted = spawnSync(
    helm,
    [
      "template",
      "rel",
      chart,
      "--set",
      `agent.token=${token}`,
      ...keda,
      "--set",
      "autoscaling.keda.minReplicaCount=3",
      "--set",
      "autoscaling.keda.maxReplicaCount=2",
    ],
    { encoding: "utf8" },
  );
  assert.notEqual(inverted.status, 0);
  assert.match(inverted.stderr, /minReplicaCount is above maxReplicaCount/);
});

test("busy-pod protection: the sidecar alone holds an API token, the Role gets and patches pods only, idle pods lose the static do-not-evict annotations", () => {
  const objects = render(["--set", "busyPodProtection.enabled=true"]);
  const d = one(objects, "Deployment");
  const spec = d.spec.template.spec;
  assert.equal(spec.automountServiceAccountToken, false, "no token in the agent container");
  const [agent, sidecar] = spec.containers;
  assert.equal(agent.name, "agent");
  assert.equal(sidecar.name, "pod-annotator");
  assert.deepEqual(sidecar.args, ["agent", "pod-annotator"]);
  assert.ok(
    !agent.volumeMounts.some((m: any) => m.mountPath.startsWith("/var/run/secrets")),
    "the agent (and its runs) cannot read the token",
  );
  assert.ok(
    sidecar.volumeMounts.some(
      (m: any) => m.mountPath === "/var/run/secrets/kubernetes.io/serviceaccount" && m.readOnly,
    ),
  );
  const env = (c: any) =>
    Object.fromEntries(c.env.map((e: any) => [e.name, e.value ?? e.valueFrom?.fieldRef?.fieldPath]));
  assert.equal(env(agent).DROVER_AGENT_STATUS_FILE, "/run/drover-status/agent.json");
  assert.equal(env(sidecar).DROVER_AGENT_STATUS_FILE, "/run/drover-status/agent.json");
  assert.equal(env(sidecar).DROVER_AGENT_POD_NAME, "metadata.name");
  assert.equal(env(sidecar).DROVER_AGENT_POD_NAMESPACE, "metadata.namespace");
  assert.equal(sidecar.securityContext.readOnlyRootFilesystem, true);
  assert.equal(sidecar.securityContext.runAsNonRoot, true);
  const annotations = d.spec.template.metadata.annotations;
  assert.ok(
    !("cluster-autoscaler.kubernetes.io/safe-to-evict" in annotations) &&
      !("karpenter.sh/do-not-disrupt" in annotations),
    "the sidecar sets them while busy only",
  );
  assert.deepEqual(one(objects, "Role").rules, [{ apiGroups: [""], resources: ["pods"], verbs: ["patch"] }]);
  const binding = one(objects, "RoleBinding");
  assert.deepEqual(binding.subjects, [{ kind: "ServiceAccount", name: spec.serviceAccountName, namespace: "drover" }]);
  // Without it: no Role, one container, and no do-not-evict annotations (static ones would pin idle pods' nodes).
  const plain = render([]);
  assert.equal(plain.filter((o) => o.kind === "Role" || o.kind === "RoleBinding").length, 0);
  assert.equal(one(plain, "Deployment").spec.template.spec.containers.length, 1);
  assert.equal(
    one(plain, "Deployment").spec.template.metadata.annotations["cluster-autoscaler.kubernetes.io/safe-to-evict"],
    undefined,
  );
  // The status file variable is the chart's own.
  const extra = spawnSync(
    helm,
    ["template", "rel", chart, "--set", `agent.token=${token}`, "--set", "extraEnv.DROVER_AGENT_STATUS_FILE=/x"],
    { encoding: "utf8" },
  );
  assert.notEqual(extra.status, 0);
});
