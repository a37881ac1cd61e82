import assert from "node:assert/strict";
import { join } from "node:path";
import { after, before, test } from "node:test";
import { startStack, type Stack } from "../support/stack.js";
import {
  applyRendered,
  assertRanFromImages,
  chartImages,
  createServiceMonitorCrd,
  kubectlOut,
  namespace,
  repo,
  runnerValues,
  template,
  type ChartImages,
} from "../support/chart-cluster.js";
import { fastTimings, kube, startTestCluster, until, type TestCluster } from "../kube/cluster.js";
import { routes } from "@drover/protocol";

// The charts installed on the test cluster with kubectl apply; agent-job's controller then runs
// in the cluster (a Deployment pod) and completes examples/hello against the real server. Where
// podman runs here, the pods are real containers of the locally built drover and runner images.

let cluster: TestCluster;
let stack: Stack;
let images: ChartImages;
const startedAt = new Date();

before(
  async () => {
    images = await chartImages(join(repo, "test", "dist", ".chart-install"));
    cluster = await startTestCluster({
      timings: fastTimings,
      ...images.options,
      // Room for every chart's pods at once: the first test leaves them all applied, and the
      // scheduler counts their requests against the node's allocatable.
      nodes: [{ name: "ktc-node", allocatable: { cpu: "64", memory: "256Gi", pods: "500" } }],
    });
    stack = await startStack();
    // The Prometheus Operator's CRD, so the maximal values (ServiceMonitor on) apply too.
    await createServiceMonitorCrd(cluster);
  },
  { timeout: 20 * 60_000 },
);

after(async () => {
  await stack?.stop();
  await cluster?.close();
});

test("every chart, with default and maximal values, applies with kubectl to the test cluster", async () => {
  let n = 0;
  for (const chart of ["agent-local", "agent-job", "agent-k8s"]) {
    for (const args of [
      ["--set", "agent.token=drv_p_eyJ1cmwiOiJodHRwOi8veCIsInBvb2wiOiJwIn0.eA"],
      ["-f", join(repo, "charts", chart, "ci", "max-values.yaml")],
    ]) {
      const ns = `apply-${++n}`;
      await namespace(cluster, ns);
      const res = await applyRendered(cluster, ns, template(chart, ns, args));
      assert.equal(res.code, 0, `${chart} ${args.join(" ")}:\n${res.out}`);
      assert.doesNotMatch(res.out, /error/i);
      // Its pods hold cpu/memory requests on the node (the scheduler counts them) and would only crash-loop.
      await kube(cluster, "DELETE", `/api/v1/namespaces/${ns}`);
    }
  }
});

test("agent-job installed on the test cluster completes examples/hello end to end", async () => {
  // The controller reaches the API in-cluster, with its ServiceAccount's token under the chart's RBAC.
  const rendered = template("agent-job", "drover", [
    "--set",
    `agent.token=${stack.poolToken}`,
    "--set",
    `agent.url=${stack.server.url}`,
    "--set",
    "image.tag=test",
    "--set",
    `agent.healthPort=${20000 + Math.floor(Math.random() * 20000)}`,
    "--set",
    "agent.imagePullGracePeriodSeconds=5",
    ...runnerValues(images),
  ]);
  await namespace(cluster, "drover");
  const applied = await applyRendered(cluster, "drover", rendered);
  assert.equal(applied.code, 0, applied.out);
  // The controller runs as the Deployment's pod and registers with the server.
  await until(
    "the controller to register",
    async () => (await stack.server.api(routes.listAgents, { query: { pool: stack.pool } })).body.items as any[],
    (agents) => agents.some((a) => a.driver === "kubernetes" && a.status !== "offline"),
    30_000,
  ).catch(async () => {
    const pods = await kubectlOut(cluster, ["get", "pods,events", "-n", "drover", "-o", "wide"]);
    const logs = await kubectlOut(cluster, ["logs", "-n", "drover", "-l", "app.kubernetes.io/component=controller"]);
    assert.fail(`the controller did not register:\n${pods.out}\n${logs.out}`);
  });
  await stack.server.api(routes.createWorkspace, { body: { name: "chart-hello", pool: stack.pool } });
  const res = await stack.cli([
    "run",
    "start",
    join(repo, "examples", "hello"),
    "--workspace",
    "chart-hello",
    "--auto-apply",
  ]);
  assert.equal(res.code, 0, `${res.stdout}\n${res.stderr}`);
  assert.match(res.stdout, /Hello from Drover/);
  assert.match(res.stdout, /Apply complete!/);
  const jobs = await kubectlOut(cluster, [
    "get",
    "jobs",
    "-n",
    "drover",
    "-l",
    "drover.dev/controller=d-job-agent-job",
    "-o",
    "name",
  ]);
  assert.equal(jobs.out.trim().split("\n").length, 2, jobs.out);
  await assertRanFromImages(cluster, images, startedAt, [
    ["drover", "controller"],
    ["drover", "worker"],
    ["runner", "runner"],
  ]);
});
