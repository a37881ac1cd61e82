import assert from "node:assert/strict";
import { mkdirSync } from "node:fs";
import { join } from "node:path";
import { after, before, test } from "node:test";
import { runLog, startStack, writeConfig, type Stack } from "../support/stack.js";
import { remoteStateConfig, startPrivateTlsStateServer, type PrivateTlsStateServer } from "../support/private-ca.js";
import {
  applyAgentTaskCrd,
  chartProbeTimings,
  assertRanFromImages,
  chartImages,
  kubectlOut,
  namespace,
  repo,
  runnerValues,
  template,
  type ChartImages,
} from "../support/chart-cluster.js";
import { startRunGates, type RunGates } from "../support/run-gate.js";
import { eventually, fastTimings, kube, startTestCluster, watch, type TestCluster } from "../kube/cluster.js";
import { routes } from "@drover/protocol";

// agent-k8s in node mode, installed on a two-node test cluster (a worker per node, each node its
// own hostPath data home), under the disruptions agent-job's upgrade test puts it through:
//  - the controller pod deleted mid-apply: its replacement adopts the Jobs from the cluster, the
//    node worker goes on driving the run pod, the run completes once (one Job per phase);
//  - `kubectl drain` of the run's node mid-apply: the eviction API honours the controller's PDB,
//    the DaemonSet worker stays (drain ignores DaemonSets), the run pod is evicted and the run ends
//    errored with the reason — never a silent success — and nothing is left behind;
//  - the seed's container_task_ca_cert (task.caBundle): in node mode too, a run reading state
//    over TLS from a server with a private CA fails without it and succeeds with it; and
//    global.podLabels reach the workers and run pods.
// Where podman runs here, the pods are real containers of the locally built drover and runner
// images; elsewhere the host-process shim stands in (chartImages). Runs are held mid-apply at run
// gates, which answer over the network, so they hold inside containers too.

const ns = "node-disruptions";
let cluster: TestCluster;
let stack: Stack;
let tls: PrivateTlsStateServer;
let render: (extra: string[]) => string;
let images: ChartImages;
let gates: RunGates;
const startedAt = new Date();

const podsOf = async (component: string) =>
  (
    await kube(
      cluster,
      "GET",
      `/api/v1/namespaces/${ns}/pods?labelSelector=${encodeURIComponent(`app.kubernetes.io/component=${component}`)}`,
    )
  ).body.items as any[];
const jobsOf = async (runId: string) =>
  (
    await kube(
      cluster,
      "GET",
      `/apis/batch/v1/namespaces/${ns}/jobs?labelSelector=${encodeURIComponent(`drover.dev/run-id=${runId}`)}`,
    )
  ).body.items as any[];
const diagnose = async () =>
  `${(await kubectlOut(cluster, ["get", "pods,jobs,events", "-n", ns, "-o", "wide"])).out}\n${(await kubectlOut(cluster, ["logs", "-n", ns, "-l", "app.kubernetes.io/component=worker", "--tail=30"])).out}\n${(await kubectlOut(cluster, ["logs", "-n", ns, "-l", "app.kubernetes.io/component=controller", "--tail=30"])).out}`;

before(
  async () => {
    images = await chartImages(join(repo, "test", "dist", ".chart-node-disruptions"));
    cluster = await startTestCluster({
      timings: { ...fastTimings, ...chartProbeTimings },
      ...images.options,
      nodes: [{ name: "node-a" }, { name: "node-b" }],
    });
    stack = await startStack();
    gates = await startRunGates();
    // A run pod that reaches a node before its worker has the kubelet create the init container's
    // subPath ready/ root-owned (seen as runs stuck in Init on node-b): the chart's node
    // preparation must hand it to the worker, which otherwise can never mark a run ready there.
    for (const node of ["node-a", "node-b"])
      mkdirSync(cluster.hostPath("/var/lib/drover-agent/ready", node), { recursive: true, mode: 0o755 });
    await namespace(cluster, ns, "privileged");
    await applyAgentTaskCrd(cluster, ns);
    tls = await startPrivateTlsStateServer("hello from a node over private TLS");
    render = (extra) =>
      template(
        "agent-k8s",
        ns,
        [
          "--set",
          `agent.token=${stack.poolToken}`,
          "--set",
          `agent.url=${stack.server.url}`,
          "--set",
          "image.tag=test",
          // Pods share this machine's network here: no health port, so no two processes bind one.
          "--set",
          "agent.healthPort=0",
          "--set",
          "workerDaemonSet.prepareDataHome=true",
          ...runnerValues(images),
          "--set",
          "global.podLabels.tier=infra",
          ...extra,
        ],
        { release: "rel", crds: false },
      );
    const r = await kubectlOut(cluster, ["apply", "-n", ns, "-f", "-"], render([]));
    assert.equal(r.code, 0, r.out);
    await eventually(
      "a worker on each node and the controller registered",
      async () => {
        const workers = await podsOf("worker");
        const agents = (await stack.server.api(routes.listAgents, { query: { pool: stack.pool } })).body.items as any[];
        return (
          workers.length === 2 &&
          workers.every((p) => p.status?.phase === "Running") &&
          agents.some((a) => a.driver === "kubernetes" && a.status !== "offline")
        );
      },
      120_000,
    ).catch(async (e: Error) => assert.fail(`${e.message}\n${await diagnose()}`));
  },
  { timeout: 20 * 60_000 },
);

after(async () => {
  await gates?.close();
  tls?.close();
  await stack?.stop();
  await cluster?.close();
});

/** A run whose apply prints `started-<name>` and then waits at gate `name` (until gates.open(name)). */
async function longRun(name: string): Promise<string> {
  assert.equal((await stack.server.api(routes.createWorkspace, { body: { name, pool: stack.pool } })).status, 201);
  const dir = writeConfig(stack.dir, name, {
    "main.tf": `resource "terraform_data" "long" {\n  input = timestamp()\n${gates.provisioner(name)}}\n`,
  });
  const runId = await stack.startRun(dir, name, ["--auto-apply"]);
  await eventually(
    "the apply to run",
    async () => (await runLog(stack.server, runId, "apply").catch(() => "")).includes(`started-${name}`),
    240_000,
  ).catch(async (e: Error) => assert.fail(`${e.message}\n${await diagnose()}`));
  await eventually("the apply held at its gate", async () => gates.waiting(name) === 1, 30_000);
  return runId;
}

test("agent-k8s: the controller pod deleted mid-apply — the new controller adopts the Job, the run completes once, nothing is orphaned", async () => {
  const runId = await longRun("node-ctl-deleted");
  const [controller] = await podsOf("controller");
  assert.equal(
    (await kube(cluster, "DELETE", `/api/v1/namespaces/${ns}/pods/${controller.metadata.name as string}`)).status,
    200,
  );
  const [replacement] = await eventually(
    "a new controller pod running",
    async () => {
      const ps = await podsOf("controller");
      return ps.length === 1 && ps[0].metadata.uid !== controller.metadata.uid && ps[0].status?.phase === "Running"
        ? ps
        : undefined;
    },
    120_000,
  );
  assert.ok(replacement);
  assert.equal(gates.waiting("node-ctl-deleted"), 1, "the apply went on while the controller was replaced");
  gates.open("node-ctl-deleted");
  const done = await stack.waitForRun(runId, ["applied", "errored", "canceled"], 120_000);
  assert.equal(done.status, "applied", `${await runLog(stack.server, runId, "apply")}\n${await diagnose()}`);
  assert.deepEqual(
    (await jobsOf(runId)).map((j) => j.metadata.labels["drover.dev/phase"]).sort(),
    ["apply", "plan"],
    "one Job per phase: nothing ran twice",
  );
  // The run pods finished; no run pod of this run is still running.
  await eventually("the run's pods finished", async () => {
    const pods = (
      await kube(
        cluster,
        "GET",
        `/api/v1/namespaces/${ns}/pods?labelSelector=${encodeURIComponent(`drover.dev/run-id=${runId}`)}`,
      )
    ).body.items as any[];
    return pods.every((p) => p.status?.phase === "Succeeded" || p.status?.phase === "Failed");
  });
});

test("agent-k8s: kubectl drain of the run's node mid-apply honours the PDB, keeps the node's worker, and ends the run errored with the reason", async () => {
  // Its gate never opens: only the drain ends it.
  const runId = await longRun("node-drained");
  const [runPod] = (
    await kube(
      cluster,
      "GET",
      `/api/v1/namespaces/${ns}/pods?labelSelector=${encodeURIComponent(`drover.dev/run-id=${runId},drover.dev/phase=apply`)}`,
    )
  ).body.items as any[];
  const node = runPod.spec.nodeName as string;
  const workerBefore = (await podsOf("worker")).find((p) => p.spec.nodeName === node);
  assert.ok(workerBefore, "a worker on the run's node");
  const pdb = (
    await kube(cluster, "GET", `/apis/policy/v1/namespaces/${ns}/poddisruptionbudgets/rel-agent-k8s-controller`)
  ).body;
  assert.equal(pdb.spec.maxUnavailable, 1);
  // Every pod of the run that ever exists, from before the drain on.
  const runPods = await watch(
    cluster,
    `/api/v1/namespaces/${ns}/pods?watch=true&labelSelector=${encodeURIComponent(`drover.dev/run-id=${runId},drover.dev/phase=apply`)}`,
  );
  const drained = await kubectlOut(cluster, [
    "drain",
    node,
    "--ignore-daemonsets",
    "--delete-emptydir-data",
    "--timeout=90s",
  ]);
  assert.equal(drained.code, 0, `${drained.out}\n${await diagnose()}`);
  try {
    const ended = await stack.waitForRun(runId, ["applied", "errored", "canceled"], 120_000);
    const log = await runLog(stack.server, runId, "apply");
    const pods = async () =>
      JSON.stringify(
        (
          (
            await kube(
              cluster,
              "GET",
              `/api/v1/namespaces/${ns}/pods?labelSelector=${encodeURIComponent(`drover.dev/run-id=${runId}`)}`,
            )
          ).body.items as any[]
        ).map((p) => [p.metadata.name, p.spec.nodeName, p.status?.phase, p.metadata.creationTimestamp]),
      );
    assert.equal(ended.status, "errored", `an interrupted run never ends as a success:\n${log}`);
    // e.g. "pod drover-run-…-apply-1-… was evicted: Eviction API: evicting", in the error and the log.
    assert.match(
      String(ended.errorMessage ?? ""),
      /was evicted/,
      `the run's end names why:\n${log}\n${JSON.stringify(ended)}\n${await pods()}\n${await diagnose()}`,
    );
    assert.match(log, /\[drover\] pod \S+ was evicted/, log);
    // drain ignores DaemonSets: the node's worker was not evicted under its runs.
    const workerAfter = (await podsOf("worker")).find((p) => p.spec.nodeName === node);
    assert.equal(workerAfter?.metadata.uid, workerBefore.metadata.uid);
    // The controller runs (moved off the node if it was there) and the run's Jobs end: nothing orphaned.
    await eventually(
      "the controller running off the drained node",
      async () => {
        const ps = await podsOf("controller");
        return ps.length === 1 && ps[0].spec.nodeName !== node && ps[0].status?.phase === "Running";
      },
      60_000,
    );
    await eventually(
      "no pod of the run still running",
      async () => {
        const pods = (
          await kube(
            cluster,
            "GET",
            `/api/v1/namespaces/${ns}/pods?labelSelector=${encodeURIComponent(`drover.dev/run-id=${runId}`)}`,
          )
        ).body.items as any[];
        return pods.every((p) => p.status?.phase !== "Running" && p.status?.phase !== "Pending");
      },
      60_000,
    ).catch(async (e: Error) => assert.fail(`${e.message}\n${await pods()}\n${await diagnose()}`));
    // A Job replaces a terminating pod at once unless told to wait until it has failed: the
    // evicted run pod must not get a second one (a pod of a run that has already ended).
    const applyPods = new Set(
      runPods.events.filter((e) => e.type === "ADDED").map((e) => e.object.metadata.name as string),
    );
    assert.deepEqual([...applyPods], [runPod.metadata.name], "the evicted pod was not replaced");
  } finally {
    runPods.close();
    await kubectlOut(cluster, ["uncordon", node]);
  }
  // After the drain the cluster takes runs again.
  assert.equal(
    (await stack.server.api(routes.createWorkspace, { body: { name: "after-drain", pool: stack.pool } })).status,
    201,
  );
  const hello = await stack.startRun(join(repo, "examples", "hello"), "after-drain", ["--auto-apply"]);
  const done = await stack.waitForRun(hello, ["applied", "errored", "canceled"], 120_000);
  assert.equal(done.status, "applied", `${await runLog(stack.server, hello, "apply")}\n${await diagnose()}`);
});

test("agent-k8s node mode: task.caBundle makes runs trust a private CA (the seed's container_task_ca_cert); global.podLabels reach workers and run pods", async () => {
  assert.equal(
    (await stack.server.api(routes.createWorkspace, { body: { name: "node-private-tls", pool: stack.pool } })).status,
    201,
  );
  const config = writeConfig(stack.dir, "node-private-tls", remoteStateConfig(tls.url));
  const untrusted = await stack.startRun(config, "node-private-tls", ["--auto-apply"]);
  const failed = await stack.waitForRun(untrusted, ["applied", "errored", "canceled"], 120_000);
  const failedLog = await runLog(stack.server, untrusted, "plan");
  assert.equal(failed.status, "errored", `${failedLog}\n${await diagnose()}`);
  assert.match(failedLog, /x509|certificate/i, failedLog);

  const r = await kubectlOut(
    cluster,
    ["apply", "-n", ns, "-f", "-"],
    render(["--set-string", `task.caBundle=${tls.caPem}`]),
  );
  assert.equal(r.code, 0, r.out);
  const trusted = await stack.startRun(config, "node-private-tls", ["--auto-apply"]);
  const done = await stack.waitForRun(trusted, ["applied", "errored", "canceled"], 120_000);
  const log = `${await runLog(stack.server, trusted, "plan")}\n${await runLog(stack.server, trusted, "apply")}`;
  assert.equal(done.status, "applied", `${log}\n${await diagnose()}`);
  assert.match(log, /hello from a node over private TLS/);

  const runPods = await podsOf("task");
  assert.ok(runPods.length >= 2, `run pods: ${runPods.length}`);
  for (const p of [...(await podsOf("worker")), ...runPods])
    assert.equal(p.metadata.labels.tier, "infra", p.metadata.name);
  await assertRanFromImages(cluster, images, startedAt, [
    ["drover", "controller"],
    ["drover", "prepare-data-home"],
    ["drover", "worker"],
    ["runner", "runner"],
  ]);
});
