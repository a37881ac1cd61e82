// Scale-in while one agent is busy, on the test cluster: agent-local with busy-pod protection
// and two replicas in a restricted namespace. While one agent applies a run, its pod carries
// the pod-deletion-cost and do-not-evict annotations; scaling the Deployment to one replica
// (what KEDA's HPA does when demand falls) deletes the idle pod, never the busy one, and the
// run completes. The sidecar's RBAC covers its calls and grants nothing beyond get/patch pods.
// Where podman runs here, the agents and sidecars are real containers of the locally built drover
// image, which carries no terraform: the agents download it, verified, from a test release server.
import assert from "node:assert/strict";
import { join } from "node:path";
import { after, before, test } from "node:test";
import { runLog, startStack, type Stack } from "../support/stack.js";
import {
  applyRendered,
  assertRanFromImages,
  chartImages,
  isReady,
  kubectlOut,
  localEngineValues,
  namespace,
  repo,
  template,
  chartTimings,
  type ChartImages,
} from "../support/chart-cluster.js";
import { kube, startTestCluster, until, type TestCluster } from "../kube/cluster.js";
import { callOk } from "../support/fault-runs.js";
import { rawTarGz } from "../support/archives.js";
import { startReleaseServer, type TestReleaseServer } from "../support/engine-releases.js";
import { startRunGates, type RunGates } from "../support/run-gate.js";
import { routes } from "@drover/protocol";

let cluster: TestCluster;
let stack: Stack;
let images: ChartImages;
let releases: TestReleaseServer;
let gates: RunGates;
const startedAt = new Date();

before(
  async () => {
    images = await chartImages(join(repo, "test", "dist", ".autoscaling-cluster"));
    cluster = await startTestCluster({ timings: chartTimings, ...images.options });
    stack = await startStack();
    releases = await startReleaseServer([
      { engine: "terraform", version: "1.11.4", binary: "/usr/local/bin/terraform" },
    ]);
    gates = await startRunGates();
  },
  { timeout: 20 * 60_000 },
);

after(async () => {
  await gates?.close();
  await releases?.close();
  await stack?.stop();
  await cluster?.close();
});

test("scale-in while one agent is busy: its pod is annotated busy, the idle pod goes, its run completes", async () => {
  const ns = "drover-scale";
  await namespace(cluster, ns, "restricted");
  const rendered = template("agent-local", ns, [
    "--set",
    `agent.token=${stack.poolToken}`,
    "--set",
    `agent.url=${stack.server.url}`,
    "--set",
    "image.tag=test",
    // Pods share this machine's network here: no health port, so two agents do not collide.
    "--set",
    "agent.healthPort=0",
    "--set",
    "agent.shutdownMode=drain",
    "--set",
    "replicaCount=2",
    "--set",
    "busyPodProtection.enabled=true",
    ...Object.entries(images.runnerEnv).flatMap(([name, value]) => ["--set-string", `extraEnv.${name}=${value}`]),
    ...localEngineValues(images, releases),
  ]);
  const applied = await applyRendered(cluster, ns, rendered);
  assert.equal(applied.code, 0, applied.out);
  const pods = async () =>
    ((await kube(cluster, "GET", `/api/v1/namespaces/${ns}/pods`)).body.items as any[]).filter(
      (p) => !p.metadata.deletionTimestamp,
    );
  const diagnose = async () =>
    `${(await kubectlOut(cluster, ["get", "pods,events", "-n", ns, "-o", "wide"])).out}\n${(await kubectlOut(cluster, ["logs", "-n", ns, "-l", "app.kubernetes.io/name=agent-local", "--all-containers", "--tail=30"])).out}`;
  const busyOf = (p: any) => p.metadata.annotations?.["drover.dev/agent-busy"];
  try {
    await until(
      "two agent pods Ready, each annotated idle by its sidecar",
      pods,
      (ps) => ps.length === 2 && ps.every(isReady) && ps.every((p) => busyOf(p) === "false"),
      60_000,
    );
    await until(
      "both agents registered",
      async () =>
        (await stack.server.api(routes.listAgents, { query: { pool: stack.pool } })).body.items.filter(
          (a: any) => a.status !== "offline",
        ),
      (as) => as.length === 2,
      30_000,
    );
  } catch (e) {
    assert.fail(`${(e as Error).message}\n${await diagnose()}`);
  }

  // An auto-applied run whose apply waits for the gate: one agent busy, the other idle.
  const ws = "busy-scale-in";
  await callOk(stack.server.url, routes.createWorkspace, stack.server.adminToken, {
    body: { name: ws, pool: stack.pool },
  });
  const config = `resource "terraform_data" "wait" {\n${gates.provisioner("busy")}}\n`;
  const cv = await callOk(stack.server.url, routes.uploadConfiguration, stack.server.adminToken, {
    params: { ws },
    body: rawTarGz([{ path: "main.tf", content: config }]),
  });
  const run = await callOk(stack.server.url, routes.createRun, stack.server.adminToken, {
    body: { workspace: ws, configurationVersionId: cv.id, autoApply: true },
  });
  let busyPod: any;
  try {
    await until(
      "the apply running",
      () => runLog(stack.server, run.id, "apply").catch(() => ""),
      (l) => l.includes("started-busy"),
      120_000,
    );
    await until(
      "the apply waiting at its gate",
      async () => gates.waiting("busy"),
      (n) => n === 1,
      30_000,
    );
    const annotated = await until(
      "the busy agent's pod annotated",
      pods,
      (ps) => ps.filter((p) => busyOf(p) === "true").length === 1,
      30_000,
    );
    busyPod = annotated.find((p) => busyOf(p) === "true");
  } catch (e) {
    assert.fail(`${(e as Error).message}\n${await diagnose()}`);
  }
  const busyAgent = (await stack.server.api(routes.listRunJobs, { params: { id: run.id } })).body.items.find(
    (j: any) => j.phase === "apply",
  ).agentId;
  const agentName = (await stack.server.api(routes.listAgents, { query: { pool: stack.pool } })).body.items.find(
    (a: any) => a.id === busyAgent,
  ).name;
  assert.equal(agentName, busyPod.metadata.name, "the annotated pod is the one running the job");
  assert.equal(busyPod.metadata.annotations["controller.kubernetes.io/pod-deletion-cost"], "1000");
  assert.equal(busyPod.metadata.annotations["cluster-autoscaler.kubernetes.io/safe-to-evict"], "false");
  assert.equal(busyPod.metadata.annotations["karpenter.sh/do-not-disrupt"], "true");
  const idlePod = (await pods()).find((p) => p.metadata.name !== busyPod.metadata.name);
  assert.equal(idlePod.metadata.annotations["controller.kubernetes.io/pod-deletion-cost"], undefined);
  assert.equal(idlePod.metadata.annotations["cluster-autoscaler.kubernetes.io/safe-to-evict"], undefined);

  // Demand falls to one agent: the HPA sets replicas 1. The idle pod goes; the busy one stays.
  const [deployment] = (await kube(cluster, "GET", `/apis/apps/v1/namespaces/${ns}/deployments`)).body.items as any[];
  const scaled = await kube(
    cluster,
    "PATCH",
    `/apis/apps/v1/namespaces/${ns}/deployments/${deployment.metadata.name}`,
    { spec: { replicas: 1 } },
    "application/merge-patch+json",
  );
  assert.equal(scaled.status, 200, JSON.stringify(scaled.body));
  const left = await until(
    "one pod left",
    async () => (await kube(cluster, "GET", `/api/v1/namespaces/${ns}/pods`)).body.items as any[],
    (ps) => ps.length === 1,
    60_000,
  );
  assert.equal(left[0].metadata.name, busyPod.metadata.name, "scale-in never picks the busy agent");

  gates.open("busy");
  const done = await stack.waitForRun(run.id, ["applied", "errored", "canceled"], 120_000);
  assert.equal(done.status, "applied", `${await runLog(stack.server, run.id, "apply")}\n${await diagnose()}`);
  const idleAgain = await until(
    "the pod annotated idle again",
    pods,
    (ps) => ps.length === 1 && busyOf(ps[0]) === "false",
    30_000,
  );
  assert.equal(idleAgain[0].metadata.annotations["controller.kubernetes.io/pod-deletion-cost"], undefined);
  assert.equal(idleAgain[0].metadata.annotations["cluster-autoscaler.kubernetes.io/safe-to-evict"], undefined);

  // With the built images: the agents and their sidecars were real containers, and terraform came from the releases.
  await assertRanFromImages(cluster, images, startedAt, [
    ["drover", "agent"],
    ["drover", "pod-annotator"],
  ]);
  if (images.built)
    assert.ok(
      (releases.downloads.get("terraform_1.11.4_linux_amd64.zip") ?? 0) >= 1,
      "the busy agent downloaded terraform from the releases",
    );
  // The chart's RBAC covered every call; the sidecar's ServiceAccount may patch pods (it never reads one), nothing more.
  assert.deepEqual(
    cluster.denials.filter((d) => d.user.startsWith(`system:serviceaccount:${ns}:`)),
    [],
  );
  const sa = `system:serviceaccount:${ns}:${busyPod.spec.serviceAccountName}`;
  for (const [verb, resource, allowed] of [
    ["patch", "pods", "yes"],
    ["get", "pods", "no"],
    ["delete", "pods", "no"],
    ["create", "pods", "no"],
    ["list", "pods", "no"],
    ["get", "secrets", "no"],
    ["patch", "deployments", "no"],
  ] as const) {
    const r = await kubectlOut(cluster, ["auth", "can-i", verb, resource, "-n", ns, `--as=${sa}`]);
    assert.equal(r.out.trim(), allowed, `${verb} ${resource}: ${r.out}`);
  }
});
