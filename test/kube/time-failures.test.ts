import assert from "node:assert/strict";
import { readFileSync, writeFileSync } from "node:fs";
import { createServer } from "node:net";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";
import { after, before, test } from "node:test";
import { runLog, startStack, type Stack } from "../support/stack.js";
import type { Proc } from "../support/processes.js";
import { startTcpProxy, type TcpProxy } from "../support/tcp-proxy.js";
import { eventually, fastTimings, kube, startTestCluster, type TestCluster } from "./cluster.js";
import { createAgentTask, podWorker, prepareNamespace, startJobModeController, terraformRunner } from "./agents.js";
import { routes } from "@drover/protocol";

// Failures no event announces. The controller sweeps its in-flight Jobs on an interval, so a
// pod that never gets a node and a Job whose pod admission refuses end their runs with the
// real reason within the pending timeout (not at the next relist, not at the Job's 4 h
// deadline). And a Job deleted while the controller's watch was down frees its slot.

const repo = join(dirname(fileURLToPath(import.meta.url)), "..", "..", "..");
let cluster: TestCluster;
let stack: Stack;
const procs: Proc[] = [];

/** A pool of its own (so each test's controller takes only its own runs) and a workspace in it. */
async function poolWithWorkspace(name: string): Promise<string> {
  assert.equal((await stack.server.api(routes.createPool, { body: { name } })).status, 201);
  const tok = await stack.server.api(routes.createPoolToken, { params: { pool: name }, body: { description: name } });
  assert.equal((await stack.server.api(routes.createWorkspace, { body: { name, pool: name } })).status, 201);
  return tok.body.token as string;
}

/** `ns` with the AgentTask "task-template": a pod worker and a runner, plus `podSpec`. */
async function namespaceWithTemplate(
  ns: string,
  podSpec: Record<string, unknown>,
  labels: Record<string, string> = {},
): Promise<void> {
  await prepareNamespace(cluster, ns);
  if (Object.keys(labels).length)
    assert.equal(
      (
        await kube(
          cluster,
          "PATCH",
          `/api/v1/namespaces/${ns}`,
          { metadata: { labels } },
          "application/merge-patch+json",
        )
      ).status,
      200,
    );
  await createAgentTask(cluster, ns, "task-template", [podWorker(), terraformRunner(stack)], { podSpec });
}

function startController(ns: string, token: string, env: Record<string, string> = {}): Proc {
  const p = startJobModeController(cluster, stack, { ns, name: `ctl-${ns}`, env: { DROVER_TOKEN: token, ...env } });
  procs.push(p);
  return p;
}

before(async () => {
  cluster = await startTestCluster({ timings: fastTimings });
  stack = await startStack();
});

after(async () => {
  await Promise.all(procs.map((p) => p.stop("SIGKILL")));
  await stack?.stop();
  await cluster?.close();
});

test("an Unschedulable pod ends its run with the scheduler's reason within the pending timeout", async () => {
  const ns = "time-pending";
  // No node matches: the scheduler marks the pod Unschedulable once, then no pod event follows.
  await namespaceWithTemplate(ns, { nodeSelector: { "drover.dev/test-pool": "nowhere" } });
  const token = await poolWithWorkspace(ns);
  const controller = startController(ns, token, {
    DROVER_AGENT_POD_PENDING_TIMEOUT_SECONDS: "2",
    DROVER_AGENT_SWEEP_INTERVAL_SECONDS: "1",
  });
  const runId = await stack.startRun(join(repo, "examples", "hello"), ns, ["--auto-apply"]);
  const run = await stack
    .waitForRun(runId, ["errored", "planned", "applied"], 60_000)
    .catch((err: Error) => assert.fail(`${err.message}\n${controller.output()}`));
  assert.equal(run.status, "errored");
  assert.match(run.errorMessage ?? "", /was pending for more than 2 s \(PodScheduled: Unschedulable .*node/);
  assert.match(await runLog(stack.server, runId, "plan"), /\[drover\] pod .* was pending for more than 2 s/);
  await eventually(
    "the Job to be deleted",
    async () => (await kube(cluster, "GET", `/apis/batch/v1/namespaces/${ns}/jobs`)).body.items.length === 0,
    20_000,
  );
});

test("a Job whose pod admission refuses (no pod, FailedCreate) ends its run with that reason within the pending timeout", async () => {
  const ns = "time-admission";
  // The namespace enforces the restricted Pod Security level; this template's containers do
  // not run as non-root, so every pod the Job creates is refused.
  await namespaceWithTemplate(ns, {}, { "pod-security.kubernetes.io/enforce": "restricted" });
  const token = await poolWithWorkspace(ns);
  const controller = startController(ns, token, {
    DROVER_AGENT_POD_PENDING_TIMEOUT_SECONDS: "2",
    DROVER_AGENT_SWEEP_INTERVAL_SECONDS: "1",
  });
  const runId = await stack.startRun(join(repo, "examples", "hello"), ns, ["--auto-apply"]);
  const run = await stack
    .waitForRun(runId, ["errored", "planned", "applied"], 60_000)
    .catch((err: Error) => assert.fail(`${err.message}\n${controller.output()}`));
  assert.equal(run.status, "errored");
  assert.match(run.errorMessage ?? "", /created no pod within 2 s \(FailedCreate: .*violates PodSecurity "restricted/);
  assert.equal(
    (await kube(cluster, "GET", `/api/v1/namespaces/${ns}/pods`)).body.items.length,
    0,
    "no pod was ever admitted",
  );
});

test("a Job deleted while the controller's watch was down frees its concurrency slot when the watch resumes", async () => {
  const ns = "time-watch-gap";
  await namespaceWithTemplate(ns, { schedulerName: "no-such-scheduler" });
  const token = await poolWithWorkspace(ns);
  const proxy: TcpProxy = await startTcpProxy(cluster.url);
  const kubeconfig = join(stack.dir, "kubeconfig-gap");
  writeFileSync(kubeconfig, readFileSync(cluster.kubeconfigPath, "utf8").replace(cluster.url, proxy.url));
  const port = await new Promise<number>((resolve) => {
    const s = createServer().listen(0, "127.0.0.1", () => {
      const { port: p } = s.address() as { port: number };
      s.close(() => resolve(p));
    });
  });
  // One Job at a time; sweeps too rare to help: only the watch can free the slot.
  const controller = startController(ns, token, {
    KUBECONFIG: kubeconfig,
    DROVER_AGENT_CONCURRENCY: "1",
    DROVER_AGENT_SWEEP_INTERVAL_SECONDS: "3600",
    DROVER_AGENT_HEALTH_PORT: String(port),
  });
  try {
    const first = await stack.startRun(join(repo, "examples", "hello"), ns, ["--auto-apply"]);
    const jobs = () => kube(cluster, "GET", `/apis/batch/v1/namespaces/${ns}/jobs`).then((r) => r.body.items as any[]);
    const job = await eventually("the first run's Job", async () =>
      (await jobs()).find((j) => j.metadata.labels["drover.dev/run-id"] === first),
    );
    const inFlight = async () => {
      // eslint-disable-next-line no-restricted-globals -- the controller's /metrics, not the server
      const text = await (await fetch(`http://127.0.0.1:${port}/metrics`)).text();
      return /^drover_controller_jobs_in_flight (\d+)$/m.exec(text)?.[1];
    };
    // Launched: the Job and its token Secret both exist.
    await eventually(
      "the job Secret",
      async () =>
        (await kube(cluster, "GET", `/api/v1/namespaces/${ns}/secrets/${job.metadata.name}-job`)).status === 200,
    );
    assert.equal(await inFlight(), "1");

    proxy.set("refuse");
    assert.equal(
      (
        await kube(
          cluster,
          "DELETE",
          `/apis/batch/v1/namespaces/${ns}/jobs/${job.metadata.name}?propagationPolicy=Background`,
        )
      ).status,
      200,
    );
    // The deletion leaves the watch history: resuming from the old resourceVersion gets 410.
    cluster.compactWatchHistory();
    proxy.set("open");

    const run = await stack
      .waitForRun(first, ["errored", "planned", "applied"], 60_000)
      .catch((err: Error) => assert.fail(`${err.message}\n${controller.output()}`));
    assert.equal(run.status, "errored");
    assert.match(run.errorMessage ?? "", /was deleted before its worker started/);
    await eventually("the slot to be free", async () => (await inFlight()) === "0");
    const second = await stack.startRun(join(repo, "examples", "hello"), ns, ["--auto-apply"]);
    await eventually("the second run's Job", async () =>
      (await jobs()).some((j) => j.metadata.labels["drover.dev/run-id"] === second),
    );
  } finally {
    await proxy.close();
  }
});
