import assert from "node:assert/strict";
import { spawnSync } from "node:child_process";
import { existsSync, mkdirSync, readdirSync, readFileSync, writeFileSync } from "node:fs";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";
import { after, before, test } from "node:test";
import { runLog, startStack, type Stack } from "../support/stack.js";
import { freePort, spawnDrover } from "../support/processes.js";
import { eventually, fastTimings, kube, startTestCluster, type TestCluster } from "./cluster.js";
import {
  createAgentTask,
  prepareNamespace,
  startNodeModeAgents,
  terraformRunner,
  type NodeModeAgents,
} from "./agents.js";
import { routes } from "@drover/protocol";

// agent-k8s's node-worker design end to end: the controller launches run pods that hold only
// the runner; the worker of the node they land on (one per node, a DaemonSet in the chart)
// prepares their directory in its hostPath data home and owns the run.

const repo = join(dirname(fileURLToPath(import.meta.url)), "..", "..", "..");
const ns = "drover-nodes";
let cluster: TestCluster;
let stack: Stack;
let agents: NodeModeAgents;
let home: string;
let healthPort: number;

before(async () => {
  cluster = await startTestCluster({ timings: fastTimings, hostPaths: "real" });
  stack = await startStack();
  healthPort = await freePort();
  await prepareNamespace(cluster, ns);
  await createAgentTask(cluster, ns, "task-template", [terraformRunner(stack)]);
  agents = await startNodeModeAgents(cluster, stack, {
    ns,
    name: "node-ctl",
    template: "task-template",
    workerEnv: { DROVER_AGENT_HEALTH_PORT: String(healthPort), DROVER_WORKER_RUNNER_STALE_SECONDS: "10" },
  });
  home = agents.home;
});

after(async () => {
  await agents?.stop();
  await stack?.stop();
  await cluster?.close();
});

test("node-worker mode: examples/hello plan+apply in runner-only pods driven by the node's worker", async () => {
  assert.equal(
    (await stack.server.api(routes.createWorkspace, { body: { name: "node-hello", pool: stack.pool } })).status,
    201,
  );
  const runId = await stack.startRun(join(repo, "examples", "hello"), "node-hello", ["--auto-apply"]);
  const run = await stack.waitForRun(runId, ["applied", "errored", "canceled"], 180_000).catch(async (err: Error) => {
    const pods = (await kube(cluster, "GET", `/api/v1/namespaces/${ns}/pods`)).body.items.map((p: any) => ({
      name: p.metadata.name,
      phase: p.status?.phase,
      init: p.status?.initContainerStatuses,
      containers: p.status?.containerStatuses,
    }));
    throw new Error(
      `${err.message}\npods: ${JSON.stringify(pods, null, 1)}\nnode worker:\n${agents.nodeWorker.output()}\ncontroller:\n${agents.controller.output()}`,
    );
  });
  const plan = await runLog(stack.server, runId, "plan");
  const apply = await runLog(stack.server, runId, "apply");
  assert.equal(
    run.status,
    "applied",
    `${plan}\n${apply}\n${agents.controller.output()}\n${agents.nodeWorker.output()}`,
  );
  const order = [
    "[drover] plan of run",
    "$ terraform init",
    "$ terraform plan",
    "Plan: 2 to add",
    "[drover] plan succeeded",
  ].map((s) => plan.indexOf(s));
  assert.ok(
    order.every((v, i) => v >= 0 && (i === 0 || v > order[i - 1]!)),
    `plan log out of order: ${order}`,
  );
  assert.match(apply, /Apply complete! Resources: 2 added/);
  const planJson = await stack.server.api(routes.runPlan, { params: { id: runId } });
  assert.equal(planJson.status, 200);
  assert.match(agents.nodeWorker.output(), /supervising a run pod on this node/);

  const pods = (
    await kube(
      cluster,
      "GET",
      `/api/v1/namespaces/${ns}/pods?labelSelector=${encodeURIComponent(`drover.dev/run-id=${runId}`)}`,
    )
  ).body.items;
  assert.equal(pods.length, 2, "one pod per phase");
  for (const pod of pods) {
    assert.deepEqual(
      pod.spec.containers.map((c: any) => c.name),
      ["runner"],
      "no worker container in the run pod",
    );
    assert.equal(pod.spec.automountServiceAccountToken, false, "run pods get no API access");
    const job = pod.metadata.labels["drover.dev/k8s-job"];
    const runnerMounts = pod.spec.containers[0].volumeMounts.filter((m: any) => m.name === "drover-home");
    assert.deepEqual(
      runnerMounts.map((m: any) => [m.subPath, m.readOnly ?? false]),
      [
        [`runs/${job}`, false],
        ["cache", true],
      ],
      "the runner sees its own run directory and, read-only, the node's caches",
    );
    const initMounts = pod.spec.initContainers[0].volumeMounts.filter((m: any) => m.name === "drover-home");
    assert.deepEqual(
      initMounts.map((m: any) => [m.subPath, m.readOnly]),
      [["ready", true]],
      "the init container sees the ready marks only, no run's files",
    );
    assert.ok(!JSON.stringify(pod).includes("drv_j_"), "no job token in the pod spec");
  }
  await eventually(
    "the node's run directories and ready marks to be removed",
    async () => readdirSync(join(home, "runs")).length === 0 && readdirSync(join(home, "ready")).length === 0,
    60_000,
  );
  assert.ok(existsSync(join(home, "runs")));
});

test("a node worker killed mid-run: its replacement ends that run errored with the reason, and takes new runs", async () => {
  assert.equal(
    (await stack.server.api(routes.createWorkspace, { body: { name: "node-restart", pool: stack.pool } })).status,
    201,
  );
  const dir = join(stack.dir, "node-restart");
  mkdirSync(dir, { recursive: true });
  writeFileSync(
    join(dir, "main.tf"),
    'resource "terraform_data" "long" {\n  input = timestamp()\n  provisioner "local-exec" {\n    command = "echo started-long; sleep 20"\n  }\n}\n',
  );
  const runId = await stack.startRun(dir, "node-restart", ["--auto-apply"]);
  await eventually(
    "the apply to be running",
    async () => /started-long/.test(await runLog(stack.server, runId, "apply")),
    90_000,
  );
  await agents.restartNodeWorker();
  const run = await stack.waitForRun(runId, ["errored", "applied", "canceled"], 60_000);
  assert.equal(run.status, "errored");
  assert.match(run.errorMessage ?? "", /worker restarted while the run was in progress/);
  const ws = (await stack.server.api(routes.getWorkspace, { params: { ws: "node-restart" } })).body;
  assert.equal(ws.stateLocked, false, "the workspace is usable again");

  writeFileSync(join(dir, "main.tf"), 'resource "terraform_data" "ok" {}\n');
  const next = await stack.startRun(dir, "node-restart", ["--auto-apply"]);
  assert.equal((await stack.waitForRun(next, ["applied", "errored"], 90_000)).status, "applied");
});

/** How often `needle` occurs in `text`. */
const count = (text: string, needle: string) => text.split(needle).length - 1;

/**
 * A workspace whose apply appends a line to `counter` (each real execution of the apply shows
 * there), then waits until the file `release` exists (the test decides when the apply ends).
 */
function countingConfig(name: string): { dir: string; counter: string; release: string } {
  const dir = join(stack.dir, name);
  mkdirSync(dir, { recursive: true });
  const counter = join(dir, "applied.count");
  const release = join(dir, "release");
  writeFileSync(
    join(dir, "main.tf"),
    `resource "terraform_data" "counted" {\n  provisioner "local-exec" {\n    command = "echo applied >>${counter}; echo started-${name}; until [ -e ${release} ]; do sleep 0.2; done"\n  }\n}\n`,
  );
  return { dir, counter, release };
}

/** How many runs the node worker has started driving (its /metrics counter). */
async function supervisorsStarted(): Promise<number> {
  // eslint-disable-next-line no-restricted-globals -- the node worker's /metrics, not the server
  const text = await (await fetch(`http://127.0.0.1:${healthPort}/metrics`)).text();
  return Number(/^drover_node_worker_supervisors_started_total (\d+)$/m.exec(text)?.[1] ?? NaN);
}

/**
 * The run applied, and each of its steps ran exactly once: one supervisor per phase's pod (from
 * `before`, the counter's value when the run started), one init and plan, one apply, one
 * execution of the apply's provisioner.
 */
async function assertRanOnce(runId: string, counter: string, before: number): Promise<void> {
  const run = await stack.waitForRun(runId, ["applied", "errored", "canceled"], 120_000);
  const plan = await runLog(stack.server, runId, "plan");
  const apply = await runLog(stack.server, runId, "apply");
  const context = `${plan}\n${apply}\nnode worker:\n${agents.nodeWorker.output().slice(-6000)}`;
  assert.equal(run.status, "applied", context);
  assert.equal(
    (await supervisorsStarted()) - before,
    2,
    `one supervisor for each of the plan's and the apply's pod:\n${context}`,
  );
  assert.equal(count(plan, "$ terraform init"), 1, `one init in the plan:\n${context}`);
  assert.equal(count(plan, "$ terraform plan"), 1, `one plan:\n${context}`);
  assert.equal(count(apply, "$ terraform apply"), 1, `one apply:\n${context}`);
  assert.equal(count(apply, "Apply complete!"), 1, context);
  assert.equal(readFileSync(counter, "utf8"), "applied\n", `the apply's provisioner ran once:\n${context}`);
}

test("a ready mark the node worker cannot write at first (EPERM): the run is taken again once it can, and each step runs exactly once", async (t) => {
  // Seen once under load: the ready mark failed (EACCES) after the run's supervisor had started,
  // so the run was taken again from a fresh directory and its apply ran twice. An immutable
  // ready/ fails that write for this root-run worker exactly as a foreign-owned one does.
  const ready = join(home, "ready");
  await eventually("no ready mark of an earlier run left", async () => readdirSync(ready).length === 0, 30_000);
  const immutable = (on: boolean) => spawnSync("chattr", [on ? "+i" : "-i", ready], { encoding: "utf8" });
  const set = immutable(true);
  if (set.status !== 0) {
    t.skip(`chattr +i does not work on ${ready} here: ${set.stderr || set.error?.message}`);
    return;
  }
  let locked = true;
  try {
    assert.equal(
      (await stack.server.api(routes.createWorkspace, { body: { name: "node-ready-fails", pool: stack.pool } })).status,
      201,
    );
    const { dir, counter, release } = countingConfig("node-ready-fails");
    const seen = agents.nodeWorker.output().length;
    const before = await supervisorsStarted();
    const runId = await stack.startRun(dir, "node-ready-fails", ["--auto-apply"]);
    await eventually(
      "the node worker to fail the ready mark",
      async () => /cannot take the run pod yet.*(EPERM|not permitted)/.test(agents.nodeWorker.output().slice(seen)),
      60_000,
    );
    assert.equal(immutable(false).status, 0);
    locked = false;
    writeFileSync(release, "");
    await assertRanOnce(runId, counter, before);
  } finally {
    if (locked) immutable(false);
  }
});

test("a second pod of a run's Job on the node (a Job pod started twice): its runner refuses the run directory, and the apply runs once", async () => {
  assert.equal(
    (await stack.server.api(routes.createWorkspace, { body: { name: "node-twin", pool: stack.pool } })).status,
    201,
  );
  const { dir, counter, release } = countingConfig("node-twin");
  const before = await supervisorsStarted();
  const runId = await stack.startRun(dir, "node-twin", ["--auto-apply"]);
  await eventually(
    "the apply to be running",
    async () => /started-node-twin/.test(await runLog(stack.server, runId, "apply")),
    90_000,
  );
  const podsPath = `/api/v1/namespaces/${ns}/pods`;
  const [original] = (
    await kube(
      cluster,
      "GET",
      `${podsPath}?labelSelector=${encodeURIComponent(`drover.dev/run-id=${runId},drover.dev/phase=apply`)}`,
    )
  ).body.items as any[];
  // The same Job's pod again: same labels and spec, so the same run directory on this node.
  const spec = { ...original.spec };
  delete spec.nodeName;
  const twin = {
    metadata: { name: `${original.metadata.name as string}-twin`, labels: original.metadata.labels },
    spec,
  };
  assert.equal((await kube(cluster, "POST", podsPath, twin)).status, 201);
  try {
    const runner = await eventually(
      "the twin's runner to end",
      async () => {
        const p = (await kube(cluster, "GET", `${podsPath}/${twin.metadata.name}`)).body;
        return (p.status?.containerStatuses as any[] | undefined)?.find(
          (c) => c.name === "runner" && c.state?.terminated,
        )?.state.terminated;
      },
      60_000,
    ).catch(async (err: Error) =>
      assert.fail(
        `${err.message}: ${JSON.stringify((await kube(cluster, "GET", `${podsPath}/${twin.metadata.name}`)).body.status)}`,
      ),
    );
    const log = (await kube(cluster, "GET", `${podsPath}/${twin.metadata.name}/log?container=runner`)).body as string;
    assert.equal(runner.exitCode, 73, log);
    assert.match(
      log,
      /is already driven by another runner \(pod drover-[^,]+, pid \d+\); refusing to run its steps a second time/,
    );
    writeFileSync(release, "");
    await assertRanOnce(runId, counter, before);
  } finally {
    writeFileSync(release, "");
    await kube(cluster, "DELETE", `${podsPath}/${twin.metadata.name}?gracePeriodSeconds=0`);
  }
});

test("node-worker settings: a missing data home is one clear line and exit 2", async () => {
  const proc = spawnDrover(["agent", "node-worker"], {
    PATH: process.env.PATH,
    DROVER_URL: "http://127.0.0.1:9",
    DROVER_AGENT_NODE_NAME: "n",
  });
  const exit = await proc.exited;
  assert.equal(exit.code, 2);
  assert.match(proc.output().trim(), /^drover agent node-worker: DROVER_AGENT_NODE_HOME is not set/);
});
