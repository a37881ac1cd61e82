import assert from "node:assert/strict";
import { join } from "node:path";
import { after, before, test } from "node:test";
import { runLog, startStack, writeConfig, type Stack } from "../support/stack.js";
import {
  applyAgentTaskCrd,
  chartProbeTimings,
  assertRanFromImages,
  chartImages,
  isReady,
  kubectlOut,
  namespace,
  repo,
  runnerValues,
  template,
  type ChartImages,
} from "../support/chart-cluster.js";
import { startRunGates, type RunGates } from "../support/run-gate.js";
import { eventually, fastTimings, kube, startTestCluster, type TestCluster } from "../kube/cluster.js";
import { routes } from "@drover/protocol";

// Drains and upgrades on the test cluster (two nodes, PDBs enforced by the eviction API,
// Deployment and DaemonSet controllers): `helm upgrade` is the re-applied rendering.
//  - a new pool token replaces the controller pod (checksum annotation); the same values do not;
//  - kubectl drain completes with the chart's default PDB (it used to be minAvailable: 1 of 1);
//  - agent-k8s's per-node workers survive an upgrade (OnDelete) and come back on the new
//    template once deleted.
// Where podman runs here, the pods are real containers of the locally built drover and runner
// images; elsewhere the host-process shim stands in (chartImages).

let cluster: TestCluster;
let stack: Stack;
let images: ChartImages;
let gates: RunGates;
const startedAt = new Date();

/** `helm upgrade`: the chart's rendering (release `rel`) re-applied. */
async function apply(ns: string, chart: string, args: string[]): Promise<void> {
  const r = await kubectlOut(
    cluster,
    ["apply", "-n", ns, "-f", "-"],
    template(chart, ns, args, { release: "rel", crds: false }),
  );
  assert.equal(r.code, 0, r.out);
}

const podsOf = async (ns: string, component: string) =>
  (
    await kube(
      cluster,
      "GET",
      `/api/v1/namespaces/${ns}/pods?labelSelector=${encodeURIComponent(`app.kubernetes.io/component=${component}`)}`,
    )
  ).body.items as any[];

/** Waits until the workload's controller has acted on its latest spec. */
async function observed(path: string): Promise<void> {
  await eventually(`${path} to observe its spec`, async () => {
    const o = (await kube(cluster, "GET", path)).body;
    return o.status?.observedGeneration === o.metadata.generation;
  });
}

before(
  async () => {
    images = await chartImages(join(repo, "test", "dist", ".chart-upgrade"));
    cluster = await startTestCluster({
      timings: { ...fastTimings, ...chartProbeTimings },
      ...images.options,
      nodes: [{ name: "node-a" }, { name: "node-b" }],
    });
    stack = await startStack();
    gates = await startRunGates();
    await applyAgentTaskCrd(cluster);
  },
  { timeout: 20 * 60_000 },
);

after(async () => {
  await gates?.close();
  await stack?.stop();
  await cluster?.close();
});

test("agent-job: a new token restarts the controller, the same values do not; kubectl drain completes under the default PDB; runs complete after both and across a controller deleted mid-run", async () => {
  const ns = "upgrade-job";
  await namespace(cluster, ns);
  const port = 20000 + Math.floor(Math.random() * 20000);
  const values = (token: string) => [
    "--set",
    `agent.token=${token}`,
    "--set",
    `agent.url=${stack.server.url}`,
    "--set",
    "image.tag=test",
    "--set",
    `agent.healthPort=${port}`,
    ...runnerValues(images),
  ];
  await apply(ns, "agent-job", values(stack.poolToken));
  const diagnose = async () =>
    `${(await kubectlOut(cluster, ["get", "pods,events", "-n", ns, "-o", "wide"])).out}\n${(await kubectlOut(cluster, ["logs", "-n", ns, "-l", "app.kubernetes.io/component=controller", "--tail=40"])).out}`;
  const [first] = await eventually("the controller Ready (registered, watches synced)", async () => {
    const ps = await podsOf(ns, "controller");
    return ps.length === 1 && isReady(ps[0]) ? ps : undefined;
  }).catch(async (e: Error) => assert.fail(`${e.message}\n${await diagnose()}`));

  await apply(ns, "agent-job", values(stack.poolToken));
  await observed(`/apis/apps/v1/namespaces/${ns}/deployments/rel-agent-job-controller`);
  assert.deepEqual(
    (await podsOf(ns, "controller")).map((p) => p.metadata.uid),
    [first.metadata.uid],
    "the same values leave the pod alone",
  );

  const second = (
    await stack.server.api(routes.createPoolToken, { params: { pool: stack.pool }, body: { description: "rotated" } })
  ).body.token as string;
  await apply(ns, "agent-job", values(second));
  const [replaced] = await eventually("a new controller pod, Ready", async () => {
    const ps = await podsOf(ns, "controller");
    return ps.length === 1 && ps[0].metadata.uid !== first.metadata.uid && isReady(ps[0]) ? ps : undefined;
  });

  const pdb = (
    await kube(cluster, "GET", `/apis/policy/v1/namespaces/${ns}/poddisruptionbudgets/rel-agent-job-controller`)
  ).body;
  assert.equal(pdb.spec.maxUnavailable, 1);
  const node = replaced.spec.nodeName as string;
  const drained = await kubectlOut(cluster, [
    "drain",
    node,
    "--ignore-daemonsets",
    "--delete-emptydir-data",
    "--timeout=30s",
  ]);
  assert.equal(drained.code, 0, drained.out);
  await eventually("the controller back, Ready, on the other node", async () => {
    const ps = await podsOf(ns, "controller");
    return ps.length === 1 && ps[0].spec.nodeName !== node && isReady(ps[0]);
  });
  assert.equal((await kubectlOut(cluster, ["uncordon", node])).code, 0);

  // After the token rotation and the drain, runs complete.
  assert.equal(
    (await stack.server.api(routes.createWorkspace, { body: { name: "upgraded", pool: stack.pool } })).status,
    201,
  );
  const hello = await stack.startRun(join(repo, "examples", "hello"), "upgraded", ["--auto-apply"]);
  const done = await stack.waitForRun(hello, ["applied", "errored", "canceled"], 120_000);
  assert.equal(done.status, "applied", await runLog(stack.server, hello, "apply"));

  // The controller pod deleted mid-apply (the apply held at a gate): its replacement finds the
  // Job; once the gate opens the run completes once.
  const long = {
    "main.tf": `resource "terraform_data" "long" {\n  input = timestamp()\n${gates.provisioner("long")}}\n`,
  };
  const runId = await stack.startRun(writeConfig(stack.dir, "upgraded-long", long), "upgraded", ["--auto-apply"]);
  await eventually(
    "the apply to run",
    async () => (await runLog(stack.server, runId, "apply")).includes("started-long"),
    90_000,
  );
  await eventually("the apply held at its gate", async () => gates.waiting("long") === 1, 30_000);
  const [current] = await podsOf(ns, "controller");
  assert.equal(
    (await kube(cluster, "DELETE", `/api/v1/namespaces/${ns}/pods/${current.metadata.name as string}`)).status,
    200,
  );
  await eventually(
    "the replacement controller Ready",
    async () => {
      const ps = await podsOf(ns, "controller");
      return ps.length === 1 && ps[0].metadata.uid !== current.metadata.uid && isReady(ps[0]);
    },
    90_000,
  );
  assert.equal(gates.waiting("long"), 1, "the apply went on while the controller was replaced");
  gates.open("long");
  const finished = await stack.waitForRun(runId, ["applied", "errored", "canceled"], 120_000);
  assert.equal(finished.status, "applied", await runLog(stack.server, runId, "apply"));
  const jobs = (
    await kube(
      cluster,
      "GET",
      `/apis/batch/v1/namespaces/${ns}/jobs?labelSelector=${encodeURIComponent(`drover.dev/run-id=${runId}`)}`,
    )
  ).body.items as any[];
  assert.deepEqual(
    jobs.map((j) => j.metadata.labels["drover.dev/phase"]).sort(),
    ["apply", "plan"],
    "one Job per phase: nothing ran twice",
  );
  await assertRanFromImages(cluster, images, startedAt, [
    ["drover", "controller"],
    ["drover", "worker"],
    ["runner", "runner"],
  ]);
});

test("agent-k8s: an upgrade leaves every per-node worker running (OnDelete); a deleted one comes back on the new template", async () => {
  const ns = "upgrade-k8s";
  await namespace(cluster, ns);
  // Workers only: the controller is scaled away by pointing it at no nodes.
  const values = (format: string) => [
    "--set",
    `agent.token=${stack.poolToken}`,
    "--set",
    "image.tag=test",
    "--set",
    "agent.healthPort=0",
    "--set",
    `agent.logFormat=${format}`,
    "--set",
    "nodeSelector.none=none",
  ];
  const ds = `/apis/apps/v1/namespaces/${ns}/daemonsets/rel-agent-k8s-worker`;
  const env = (p: any) => p.spec.containers[0].env.find((e: any) => e.name === "DROVER_AGENT_LOG_FORMAT").value;
  await apply(ns, "agent-k8s", values("json"));
  const before = await eventually("a worker on each node", async () => {
    const ps = await podsOf(ns, "worker");
    return ps.length === 2 ? ps : undefined;
  });

  await apply(ns, "agent-k8s", values("plain"));
  await observed(ds);
  const after = await podsOf(ns, "worker");
  assert.deepEqual(
    after.map((p) => p.metadata.uid).sort(),
    before.map((p) => p.metadata.uid).sort(),
    "no worker was restarted by the upgrade",
  );
  assert.ok(after.every((p) => env(p) === "json"));

  assert.equal(
    (
      await kube(
        cluster,
        "DELETE",
        `/api/v1/namespaces/${ns}/pods/${before[0].metadata.name as string}?gracePeriodSeconds=0`,
      )
    ).status,
    200,
  );
  const handedOver = await eventually("the deleted worker replaced on the new template", async () => {
    const ps = await podsOf(ns, "worker");
    return ps.length === 2 &&
      ps.some((p) => p.metadata.uid !== before[0].metadata.uid && p.metadata.uid !== before[1].metadata.uid)
      ? ps
      : undefined;
  });
  assert.equal(env(handedOver.find((p) => p.spec.nodeName === before[0].spec.nodeName)), "plain");
  assert.equal(
    env(handedOver.find((p) => p.metadata.uid === before[1].metadata.uid)),
    "json",
    "the other node's worker is untouched",
  );
  await assertRanFromImages(cluster, images, startedAt, [["drover", "worker"]]);
});
