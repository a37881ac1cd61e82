import assert from "node:assert/strict";
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { after, before, test } from "node:test";
import { runLog, startStack, type Stack } from "../support/stack.js";
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
import { eventually, fastTimings, kube, startTestCluster, type TestCluster } from "../kube/cluster.js";
import { routes } from "@drover/protocol";

// agent-k8s as installed: the controller Deployment and the per-node worker DaemonSet run in
// the test cluster (hostPaths are this machine's paths), in a namespace at the privileged Pod
// Security level its hostPath needs. examples/hello completes; then `helm upgrade` with a new
// token restarts the controller and leaves the worker alone (OnDelete), and the next run
// completes too. Where podman runs here, the pods are real containers of the locally built drover
// and runner images; elsewhere the host-process shim stands in (chartImages).

const ns = "drover-k8s";
let cluster: TestCluster;
let stack: Stack;
let home: string;
let images: ChartImages;
const startedAt = new Date();

const podsOf = async (component: string) =>
  (
    await kube(
      cluster,
      "GET",
      `/api/v1/namespaces/${ns}/pods?labelSelector=${encodeURIComponent(`app.kubernetes.io/component=${component}`)}`,
    )
  ).body.items as any[];

before(
  async () => {
    images = await chartImages(join(repo, "test", "dist", ".chart-node-install"));
    cluster = await startTestCluster({
      timings: { ...fastTimings, ...chartProbeTimings },
      hostPaths: "real",
      ...images.options,
    });
    stack = await startStack();
    home = mkdtempSync(join(tmpdir(), "drover-k8s-install-"));
    rmSync(home, { recursive: true });
    await namespace(cluster, ns, "privileged");
    await applyAgentTaskCrd(cluster, ns);
  },
  { timeout: 20 * 60_000 },
);

after(async () => {
  await stack?.stop();
  await cluster?.close();
  if (home) rmSync(home, { recursive: true, force: true });
});

test("agent-k8s installed: examples/hello completes through the node's worker; helm upgrade with a new token restarts the controller only, and runs go on", async () => {
  const render = (token: string) =>
    template(
      "agent-k8s",
      ns,
      [
        "--set",
        `agent.token=${token}`,
        "--set",
        `agent.url=${stack.server.url}`,
        "--set",
        "image.tag=test",
        // Pods share this machine's network here: no health port, so no two processes bind one.
        "--set",
        "agent.healthPort=0",
        "--set",
        `workerDaemonSet.dataHome=${home}`,
        "--set",
        "workerDaemonSet.prepareDataHome=true",
        ...runnerValues(images),
      ],
      { release: "rel", crds: false },
    );
  const apply = async (token: string) => {
    const r = await kubectlOut(cluster, ["apply", "-n", ns, "-f", "-"], render(token));
    assert.equal(r.code, 0, r.out);
  };
  const diagnose = async () =>
    `${(await kubectlOut(cluster, ["get", "pods,events", "-n", ns, "-o", "wide"])).out}\n${(await kubectlOut(cluster, ["logs", "-n", ns, "-l", "app.kubernetes.io/component=worker", "--tail=40"])).out}\n${(await kubectlOut(cluster, ["logs", "-n", ns, "-l", "app.kubernetes.io/component=controller", "--tail=40"])).out}`;
  const hello = async (workspace: string) => {
    const runId = await stack.startRun(join(repo, "examples", "hello"), workspace, ["--auto-apply"]);
    // A run that never ends says why: the pods, events and both processes' logs.
    const run = await stack
      .waitForRun(runId, ["applied", "errored", "canceled"], 240_000)
      .catch(async (e: Error) => assert.fail(`${e.message}\n${await diagnose()}`));
    assert.equal(
      run.status,
      "applied",
      `${await runLog(stack.server, runId, "plan")}\n${await runLog(stack.server, runId, "apply")}\n${await diagnose()}`,
    );
  };

  await apply(stack.poolToken);
  await eventually(
    "the controller to register",
    async () =>
      (await stack.server.api(routes.listAgents, { query: { pool: stack.pool } })).body.items.some(
        (a: any) => a.driver === "kubernetes" && a.status !== "offline",
      ),
    60_000,
  ).catch(async (e: Error) => assert.fail(`${e.message}\n${await diagnose()}`));
  assert.equal(
    (await stack.server.api(routes.createWorkspace, { body: { name: "k8s-installed", pool: stack.pool } })).status,
    201,
  );
  await hello("k8s-installed");
  const [worker] = await podsOf("worker");
  const [controller] = await podsOf("controller");

  const rotated = (
    await stack.server.api(routes.createPoolToken, { params: { pool: stack.pool }, body: { description: "rotated" } })
  ).body.token as string;
  await apply(rotated);
  await eventually(
    "a new controller pod",
    async () => {
      const ps = await podsOf("controller");
      return ps.length === 1 && ps[0].metadata.uid !== controller.metadata.uid && ps[0].status?.phase === "Running";
    },
    60_000,
  );
  assert.deepEqual(
    (await podsOf("worker")).map((p) => p.metadata.uid),
    [worker.metadata.uid],
    "the node's worker was not restarted",
  );
  assert.equal(
    (await stack.server.api(routes.createWorkspace, { body: { name: "k8s-installed-2", pool: stack.pool } })).status,
    201,
  );
  await hello("k8s-installed-2");
  await assertRanFromImages(cluster, images, startedAt, [
    ["drover", "controller"],
    ["drover", "prepare-data-home"],
    ["drover", "worker"],
    ["runner", "runner"],
  ]);
});
