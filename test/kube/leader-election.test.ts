import assert from "node:assert/strict";
import { after, before, test } from "node:test";
import { startStack, writeConfig, runLog, type Stack } from "../support/stack.js";
import { startRunGates, type RunGates } from "../support/run-gate.js";
import type { Proc } from "../support/processes.js";
import { eventually, fastTimings, kube, startTestCluster, type TestCluster } from "./cluster.js";
import { createAgentTask, podWorker, prepareNamespace, startJobModeController, terraformRunner } from "./agents.js";
import { routes } from "@drover/protocol";

// I5: two controllers of one release (one name) hold one coordination.k8s.io Lease between
// them: only its holder claims work. Each has a concurrency of 1, so without the lease the
// second would launch the queued run while the first one's apply is held: two Jobs at once.
// The leader is SIGKILLed mid-apply; the standby takes the lease once it expires, adopts the
// running Job, and both runs complete, each with one Job per phase.

const ns = "drover-leader";
const name = "leader-ctl";
let cluster: TestCluster;
let stack: Stack;
let gates: RunGates;
const procs: Proc[] = [];

before(async () => {
  cluster = await startTestCluster({ timings: fastTimings });
  stack = await startStack();
  gates = await startRunGates();
  await prepareNamespace(cluster, ns);
  await createAgentTask(cluster, ns, "task-template", [podWorker(), terraformRunner(stack)]);
});

after(async () => {
  await Promise.all(procs.map((p) => p.stop("SIGKILL")));
  await gates?.close();
  await stack?.stop();
  await cluster?.close();
});

const finished = (job: any) =>
  (job.status?.conditions ?? []).some(
    (c: any) => (c.type === "Complete" || c.type === "Failed") && c.status === "True",
  );

test("two controllers, one lease: the standby claims nothing while the leader lives, takes over when it is killed mid-run, and every run completes once", async () => {
  // Every Job of the release as the API server stores it: how many were unfinished at once.
  const unfinished = new Set<string>();
  let mostAtOnce = 0;
  const unsubscribe = cluster.api.store.subscribe((e) => {
    if (e.typeKey !== "batch/jobs" || e.object.metadata.namespace !== ns) return;
    const job = e.object.metadata.name ?? "";
    if (e.type === "DELETED" || finished(e.object)) unfinished.delete(job);
    else unfinished.add(job);
    mostAtOnce = Math.max(mostAtOnce, unfinished.size);
  });
  try {
    const env = {
      DROVER_AGENT_CONCURRENCY: "1",
      DROVER_AGENT_KUBERNETES_LEADER_ELECTION: "true",
      DROVER_AGENT_KUBERNETES_LEASE_DURATION_MS: "3000",
    };
    const first = startJobModeController(cluster, stack, { ns, name, env });
    procs.push(first);
    await first.waitFor(/leader lease acquired/);
    const second = startJobModeController(cluster, stack, { ns, name, env });
    procs.push(second);
    await second.waitFor(/standing by/);

    for (const ws of ["leader-held", "leader-queued"])
      assert.equal(
        (await stack.server.api(routes.createWorkspace, { body: { name: ws, pool: stack.pool } })).status,
        201,
      );
    const held = writeConfig(stack.dir, "leader-held", {
      "main.tf": `resource "terraform_data" "held" {\n  input = timestamp()\n${gates.provisioner("held")}}\n`,
    });
    const heldRun = await stack.startRun(held, "leader-held", ["--auto-apply"]);
    await eventually("the apply held at its gate", async () => gates.waiting("held") === 1, 90_000);
    const queued = writeConfig(stack.dir, "leader-queued", {
      "main.tf": `resource "terraform_data" "queued" {\n  input = "q"\n}\n`,
    });
    const queuedRun = await stack.startRun(queued, "leader-queued", ["--auto-apply"]);
    // The queued run waits for the one slot: the standby, idle, has not claimed it.
    const lease = (await kube(cluster, "GET", `/apis/coordination.k8s.io/v1/namespaces/${ns}/leases/${name}-leader`))
      .body;
    assert.match(first.output(), new RegExp(lease.spec.holderIdentity as string));

    await first.stop("SIGKILL");
    await second.waitFor(/leader lease acquired/, 30_000);
    await second.waitFor(/rebuilt in-flight Jobs from the cluster/, 30_000);
    assert.equal(gates.waiting("held"), 1, "the apply went on while the leader changed");
    gates.open("held");
    for (const runId of [heldRun, queuedRun]) {
      const run = await stack.waitForRun(runId, ["applied", "errored", "canceled"], 120_000);
      assert.equal(run.status, "applied", `${await runLog(stack.server, runId, "apply")}\n${second.output()}`);
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
        "one Job per phase: nothing launched twice",
      );
    }
    assert.equal(mostAtOnce, 1, "never two Jobs at once: only the lease holder launches");
  } finally {
    unsubscribe();
  }
});
