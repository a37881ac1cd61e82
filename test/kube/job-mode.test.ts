import assert from "node:assert/strict";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";
import { after, before, describe, test } from "node:test";
import { runLog, startStack, writeConfig, type Stack } from "../support/stack.js";
import { planWithWorkspaceVariables } from "../support/variable-precedence.js";
import { freePort, type Proc } from "../support/processes.js";
import { scrape } from "../support/metric-values.js";
import { eventually, fastTimings, kube, startTestCluster, type TestCluster } from "./cluster.js";
import {
  agentRegistered,
  createAgentTask,
  podWorker,
  prepareNamespace,
  startJobModeController,
  terraformRunner,
} from "./agents.js";
import { routes } from "@drover/protocol";

// Kubernetes job mode end to end: the real server, the real controller process, the test
// cluster running each task pod's worker and runner (terraform via the exec-loop) as processes.

const repo = join(dirname(fileURLToPath(import.meta.url)), "..", "..", "..");
const ns = "drover";
let cluster: TestCluster;
let stack: Stack;
let controller: Proc;

/** The controller's health port (each restarted controller takes it over): its /metrics. */
let controllerPort = 0;

function startController(name = "ctl", env: Record<string, string> = {}): Proc {
  // A short image pull grace, so the image pull failure test ends soon.
  return startJobModeController(cluster, stack, {
    ns,
    name,
    env: { DROVER_AGENT_IMAGE_PULL_GRACE_SECONDS: "6", DROVER_AGENT_HEALTH_PORT: String(controllerPort), ...env },
  });
}

async function jobsOf(runId: string): Promise<any[]> {
  const res = await kube(
    cluster,
    "GET",
    `/apis/batch/v1/namespaces/${ns}/jobs?labelSelector=${encodeURIComponent(`drover.dev/run-id=${runId}`)}`,
  );
  return res.body.items;
}

async function workspace(name: string) {
  const res = await stack.server.api(routes.createWorkspace, { body: { name, pool: stack.pool } });
  assert.equal(res.status, 201, JSON.stringify(res.body));
}

const longApply = (seconds: number) => ({
  "main.tf": `resource "terraform_data" "long" {\n  input = timestamp()\n  provisioner "local-exec" {\n    command = "echo started-long; sleep ${seconds}"\n  }\n}\n`,
});

before(async () => {
  cluster = await startTestCluster({ timings: fastTimings });
  stack = await startStack();
  await prepareNamespace(cluster, ns);
  await createAgentTask(
    cluster,
    ns,
    "task-template",
    [podWorker([{ name: "DROVER_WORKER_RUNNER_STALE_SECONDS", value: "10" }]), terraformRunner(stack)],
    { jobSpec: { ttlSecondsAfterFinished: 600 } },
  );
  controllerPort = await freePort();
  controller = startController();
  await agentRegistered(stack, "ctl");
});

after(async () => {
  await controller?.stop("SIGKILL");
  await stack?.stop();
  await cluster?.close();
});

describe("Kubernetes job mode", () => {
  test("examples/hello plan+apply runs through Jobs; the log is complete and ordered; state is in the server", async () => {
    await workspace("k8s-hello");
    const runId = await stack.startRun(join(repo, "examples", "hello"), "k8s-hello", ["--auto-apply"]);
    const run = await stack.waitForRun(runId, ["applied", "errored", "canceled"], 120_000);
    const plan = await runLog(stack.server, runId, "plan");
    const apply = await runLog(stack.server, runId, "apply");
    assert.equal(run.status, "applied", `${plan}\n${apply}\n${controller.output()}`);
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
    assert.match(apply, /Hello from Drover, from run run-/);
    assert.match(apply, /Apply complete! Resources: 2 added/);
    const ws = (await stack.server.api(routes.getWorkspace, { params: { ws: "k8s-hello" } })).body;
    assert.ok((await stack.server.api(routes.listStateVersions, { params: { ws: ws.id } })).body.items.length >= 1);
    const jobs = await jobsOf(runId);
    assert.deepEqual(
      jobs.map((j) => j.metadata.labels["drover.dev/phase"]).sort(),
      ["apply", "plan"],
      "one Job per phase",
    );
    for (const j of jobs) {
      assert.equal(j.spec.backoffLimit, 0);
      assert.equal(j.spec.template.spec.restartPolicy, "Never");
      assert.ok(j.spec.activeDeadlineSeconds > 0 && j.spec.ttlSecondsAfterFinished >= 0);
      assert.equal(j.spec.template.metadata.annotations["cluster-autoscaler.kubernetes.io/safe-to-evict"], "false");
      assert.equal(j.spec.template.metadata.annotations["karpenter.sh/do-not-disrupt"], "true");
      for (const l of ["drover.dev/run-id", "drover.dev/workspace-id", "drover.dev/phase", "drover.dev/controller"])
        assert.ok(j.metadata.labels[l], l);
    }
  });

  test("the workspace's variables reach terraform in the runner pod, over the configuration's *.auto.tfvars", async () => {
    await workspace("k8s-vars");
    await planWithWorkspaceVariables(stack, "k8s-vars", 120_000);
  });

  test("no token appears in any Job or pod spec read back through the API", async () => {
    const jobs = await kube(cluster, "GET", `/apis/batch/v1/namespaces/${ns}/jobs`);
    const pods = await kube(cluster, "GET", `/api/v1/namespaces/${ns}/pods`);
    assert.ok(jobs.body.items.length > 0 && pods.body.items.length > 0);
    const text = JSON.stringify([jobs.body, pods.body]);
    assert.ok(!/drv_[jpsu]_/.test(text), "a token leaked into a Job or pod spec");
    assert.ok(
      pods.body.items.every((p: any) => p.spec.volumes.some((v: any) => v.secret?.secretName?.endsWith("-job"))),
      "the job token reaches pods through a Secret volume",
    );
  });

  test("the controller killed and restarted mid-run: the run completes, no second Job appears", async () => {
    await workspace("k8s-restart");
    const runId = await stack.startRun(writeConfig(stack.dir, "k8s-restart", longApply(4)), "k8s-restart", [
      "--auto-apply",
    ]);
    await stack.waitForRun(runId, ["applying"], 60_000);
    await controller.stop("SIGKILL");
    controller = startController();
    const run = await stack.waitForRun(runId, ["applied", "errored", "canceled"], 120_000);
    assert.equal(run.status, "applied", await runLog(stack.server, runId, "apply"));
    const jobs = await jobsOf(runId);
    assert.equal(jobs.length, 2, `Jobs: ${jobs.map((j) => j.metadata.name).join(", ")}`);
  });

  test("cancel during apply interrupts terraform (SIGINT first); the run ends canceled with the lock released", async () => {
    await workspace("k8s-cancel");
    const runId = await stack.startRun(writeConfig(stack.dir, "k8s-cancel", longApply(120)), "k8s-cancel", [
      "--auto-apply",
    ]);
    await stack.waitForRun(runId, ["applying"], 60_000);
    await eventually("the provisioner to start", async () =>
      (await runLog(stack.server, runId, "apply")).includes("started-long"),
    );
    assert.equal((await stack.cli(["run", "cancel", runId])).code, 0);
    const run = await stack.waitForRun(runId, ["canceled", "errored", "applied"], 60_000);
    const log = await runLog(stack.server, runId, "apply");
    assert.equal(run.status, "canceled", log);
    assert.match(log, /Interrupt received/, "terraform got SIGINT and stopped gracefully");
    assert.equal(
      (await stack.server.api(routes.getWorkspace, { params: { ws: "k8s-cancel" } })).body.stateLocked,
      false,
    );
  });

  test("cancel before the worker starts deletes the Job", async () => {
    await workspace("k8s-early-cancel");
    // With the usual 6 s pull grace the run could end errored (pull failure) before a slow
    // machine delivers the cancel; a grace longer than the test leaves only the cancel.
    await controller.stop("SIGKILL");
    controller = startController("ctl", { DROVER_AGENT_IMAGE_PULL_GRACE_SECONDS: "3600" });
    cluster.setImagePullable("ghcr.io/drover-dev/drover:test", false);
    try {
      const runId = await stack.startRun(join(repo, "examples", "hello"), "k8s-early-cancel", ["--auto-apply"]);
      const job = await eventually("the Job", async () => (await jobsOf(runId))[0]);
      assert.ok(job);
      assert.equal((await stack.cli(["run", "cancel", runId])).code, 0);
      assert.equal((await stack.waitForRun(runId, ["canceled", "errored"], 30_000)).status, "canceled");
      await eventually("the Job to be deleted", async () => (await jobsOf(runId)).length === 0, 30_000);
    } finally {
      cluster.setImagePullable("ghcr.io/drover-dev/drover:test", true);
      await controller.stop("SIGKILL");
      controller = startController();
    }
  });
});

describe("pod failures reach the run log once, with specifics", () => {
  async function failingRun(name: string, cause: (podName: string) => void | Promise<void>, files = longApply(60)) {
    await workspace(name);
    const runId = await stack.startRun(writeConfig(stack.dir, name, files), name, ["--auto-apply"]);
    const pod = await eventually("a running task pod", async () => {
      const pods = await kube(
        cluster,
        "GET",
        `/api/v1/namespaces/${ns}/pods?labelSelector=${encodeURIComponent(`drover.dev/run-id=${runId}`)}`,
      );
      const running = pods.body.items.find(
        (p: any) => p.metadata.labels["drover.dev/phase"] === "apply" && p.status?.phase === "Running",
      );
      return running?.metadata.name as string | undefined;
    });
    await eventually("the provisioner to start", async () =>
      (await runLog(stack.server, runId, "apply")).includes("started-long"),
    );
    await cause(pod);
    const run = await stack.waitForRun(runId, ["errored", "applied", "canceled"], 60_000);
    return { run, log: await runLog(stack.server, runId, "apply") };
  }
  /** The controller's count of pod failures for `reason`. */
  const failures = (reason: string) =>
    // (A controller restarted by the test before may not serve its port yet.)
    eventually("the controller's /metrics", () =>
      scrape(`http://127.0.0.1:${controllerPort}/metrics`, "drover_controller_pod_failures_total", { reason }).then(
        (n) => ({ n: n ?? 0 }),
        () => undefined,
      ),
    ).then((r) => r.n);

  test("OOMKilled", async () => {
    const before = await failures("oom_killed");
    const { run, log } = await failingRun("k8s-oom", (pod) => {
      cluster.simulateOom(ns, pod, "runner");
    });
    assert.equal(run.status, "errored");
    // The controller's own lines say why a report did not land (seen once: "agent stopped" instead).
    assert.equal(
      log.match(/OOMKilled/g)?.length,
      1,
      `${log}\n--- the controller's output:\n${controller.output().slice(-4000)}`,
    );
    assert.equal(await failures("oom_killed"), before + 1, "counted once under its reason");
  });

  test("evicted", async () => {
    const { run, log } = await failingRun("k8s-evict", (pod) => {
      cluster.evict(ns, pod);
    });
    assert.equal(run.status, "errored");
    assert.equal(log.match(/evicted/g)?.length, 1, log);
    assert.equal(await failures("evicted"), 1);
  });

  test("image pull failure", async () => {
    const before = await failures("image_pull");
    await workspace("k8s-pull");
    cluster.setImagePullable("ghcr.io/drover-dev/drover-runner:test", false);
    try {
      const runId = await stack.startRun(join(repo, "examples", "hello"), "k8s-pull", ["--auto-apply"]);
      const run = await stack.waitForRun(runId, ["errored", "applied", "canceled"], 60_000);
      const log = await runLog(stack.server, runId, "plan");
      assert.equal(run.status, "errored");
      // One reason line; the kubelet's back-off message itself names ErrImagePull again.
      assert.equal(log.match(/^\[drover\] .*(ErrImagePull|ImagePullBackOff)/gm)?.length, 1, log);
      assert.match(log, /drover-runner:test/);
      assert.equal(await failures("image_pull"), before + 1);
    } finally {
      cluster.setImagePullable("ghcr.io/drover-dev/drover-runner:test", true);
    }
  });
});
