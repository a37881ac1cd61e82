// The charts installed through the raised test cluster the way a real cluster would take
// them: every chart with its defaults and each ci/ values file applied with kubectl into a
// namespace enforcing PodSecurity (restricted; agent-k8s privileged: its worker DaemonSet
// mounts a hostPath, which even baseline forbids, and prepares it as root) — every pod
// must pass admission. Then agent-job under its own ServiceAccount: the controller becomes
// Ready through its probes, runs examples/hello, and `kubectl drain` of its node
// succeeds within the grace period while a run is in flight, which ends with a reason. The
// server closes every watch after 1.5 s throughout, so the controller's re-watch paths run.
// And agent-k8s: controller and per-node worker Ready through their probes, the worker's
// root init container prepares the hostPath data home, examples/hello completes.
// Where podman runs here (root, podman, runc), every pod is a real container of the locally built
// drover and runner images (UID 1000, read-only roots, the chart's volumes and env); elsewhere the
// host-process shim stands in (chartImages).
import assert from "node:assert/strict";
import { readdirSync } from "node:fs";
import { join } from "node:path";
import { after, before, test } from "node:test";
import { runLog, startStack, writeConfig, type Stack } from "../support/stack.js";
import {
  applyRendered,
  assertRanFromImages,
  chartImages,
  createServiceMonitorCrd,
  isReady,
  kubectlOut,
  namespace,
  repo,
  runnerValues,
  template,
  templateAgentK8s,
  chartTimings,
  type ChartImages,
} from "../support/chart-cluster.js";
import { startRunGates, type RunGates } from "../support/run-gate.js";
import { kube, startTestCluster, until, type TestCluster } from "../kube/cluster.js";
import { routes } from "@drover/protocol";

const fakeToken = "drv_p_eyJ1cmwiOiJodHRwOi8veCIsInBvb2wiOiJwIn0.eA";
let cluster: TestCluster;
let stack: Stack;
let images: ChartImages;
let gates: RunGates;
let watches = 0;
const shared = join(repo, "test", "dist", ".chart-cluster");

before(
  async () => {
    images = await chartImages(shared);
    cluster = await startTestCluster({
      timings: chartTimings,
      ...images.options,
      // The server ends every watch after 1.5 s, so the controller's re-list/re-watch runs many times per test.
      watchTimeoutMs: 1500,
      onRequest: (_m, url) => {
        if (/[?&]watch=(true|1)/.test(url)) watches++;
      },
    });
    stack = await startStack();
    gates = await startRunGates();
    await createServiceMonitorCrd(cluster);
  },
  { timeout: 20 * 60_000 },
);

after(async () => {
  await gates?.close();
  await stack?.stop();
  await cluster?.close();
});

test("every chart, with defaults and each ci/ values file, passes PodSecurity admission on the test cluster", async (t) => {
  // Admission happens when a controller creates a pod, not when it runs: the node is cordoned, so the
  // Deployments' pods wait unscheduled instead of crash-looping against a server that does not exist
  // (each start of one is a Node process, seconds of CPU on a busy machine). DaemonSet pods tolerate
  // the cordon, as on a real cluster.
  const nodes = (await kube(cluster, "GET", "/api/v1/nodes")).body.items as any[];
  for (const node of nodes) assert.equal((await kubectlOut(cluster, ["cordon", node.metadata.name])).code, 0);
  t.after(async () => {
    for (const node of nodes) await kubectlOut(cluster, ["uncordon", node.metadata.name]);
  });
  let n = 0;
  for (const chart of ["agent-local", "agent-job", "agent-k8s"]) {
    const level = chart === "agent-k8s" ? "privileged" : "restricted";
    const ciFiles = readdirSync(join(repo, "charts", chart, "ci")).filter((f) => f.endsWith(".yaml"));
    for (const args of [
      ["--set", `agent.token=${fakeToken}`],
      ...ciFiles.map((f) => ["-f", join(repo, "charts", chart, "ci", f)]),
    ]) {
      const ns = `psa-${++n}`;
      await namespace(cluster, ns, level);
      const what = `${chart} ${args.join(" ")} in a ${level} namespace`;
      const res = await applyRendered(cluster, ns, template(chart, ns, args));
      assert.equal(res.code, 0, `${what}:\n${res.out}`);
      const workloads = [
        ...((await kube(cluster, "GET", `/apis/apps/v1/namespaces/${ns}/deployments`)).body.items as any[]),
        ...((await kube(cluster, "GET", `/apis/apps/v1/namespaces/${ns}/daemonsets`)).body.items as any[]),
      ].filter((w) => (w.spec.replicas ?? 1) > 0);
      // Each workload's controller tried: a pod exists, a FailedCreate says why not, or (a
      // DaemonSet whose nodeSelector matches no node here) there is nothing to create.
      const settled = await until(
        `${what}: pods or refusals`,
        async () => ({
          pods: (await kube(cluster, "GET", `/api/v1/namespaces/${ns}/pods`)).body.items as any[],
          events: (await kube(cluster, "GET", `/api/v1/namespaces/${ns}/events?fieldSelector=reason%3DFailedCreate`))
            .body.items as any[],
          daemonSets: (await kube(cluster, "GET", `/apis/apps/v1/namespaces/${ns}/daemonsets`)).body.items as any[],
        }),
        (s) =>
          workloads.every(
            (w) =>
              s.events.some((e) => e.involvedObject.uid === w.metadata.uid) ||
              s.pods.some((p) => (p.metadata.ownerReferences ?? []).some((r: any) => r.uid === w.metadata.uid)) ||
              s.daemonSets.some(
                (d) =>
                  d.metadata.uid === w.metadata.uid &&
                  d.status?.observedGeneration >= 1 &&
                  d.status.desiredNumberScheduled === 0,
              ),
          ),
      );
      assert.deepEqual(
        settled.events.map((e) => e.message),
        [],
        what,
      );
      // Done with it: its pods would only crash-loop against a server that does not exist.
      await kube(cluster, "DELETE", `/api/v1/namespaces/${ns}`);
    }
  }
});

test("agent-job in a restricted namespace: Ready through its probes, examples/hello completes, and a drain of its node ends the run in flight with a reason", async () => {
  const ns = "drover-job";
  await namespace(cluster, ns, "restricted");
  const since = new Date();
  const healthPort = 20000 + Math.floor(Math.random() * 20000);
  const rendered = template("agent-job", ns, [
    "--set",
    `agent.token=${stack.poolToken}`,
    "--set",
    `agent.url=${stack.server.url}`,
    "--set",
    "image.tag=test",
    "--set",
    `agent.healthPort=${healthPort}`,
    "--set",
    "agent.imagePullGracePeriodSeconds=5",
    ...runnerValues(images),
  ]);
  const applied = await applyRendered(cluster, ns, rendered);
  assert.equal(applied.code, 0, applied.out);
  const controllerPods = async () =>
    (
      await kube(
        cluster,
        "GET",
        `/api/v1/namespaces/${ns}/pods?labelSelector=app.kubernetes.io%2Fcomponent%3Dcontroller`,
      )
    ).body.items as any[];
  const diagnose = async () =>
    `${(await kubectlOut(cluster, ["get", "pods,events", "-n", ns, "-o", "wide"])).out}\n${(await kubectlOut(cluster, ["logs", "-n", ns, "-l", "app.kubernetes.io/component=controller", "--tail=50"])).out}`;
  let ready: any[];
  try {
    ready = await until(
      "the controller Ready through its readiness probe",
      controllerPods,
      (ps) => ps.length === 1 && isReady(ps[0]),
      120_000,
    );
  } catch (e) {
    assert.fail(`${(e as Error).message}\n${await diagnose()}`);
  }
  assert.equal(ready[0].status.containerStatuses[0].restartCount, 0, "never restarted by its liveness probe");
  // The liveness probe's own answer: with its period stretched (chartProbeTimings) a failing
  // /healthz would restart the pod only long after this test, so ask the health port itself.
  // eslint-disable-next-line no-restricted-globals -- the controller's health port, not the Drover server
  const live = await fetch(`http://127.0.0.1:${healthPort}/healthz`);
  assert.equal(live.status, 200, `/healthz on the controller's health port: ${await live.text()}`);
  const rollout = await kubectlOut(cluster, [
    "rollout",
    "status",
    "deployment",
    "-n",
    ns,
    "-l",
    "app.kubernetes.io/component=controller",
    "--timeout=30s",
  ]);
  assert.equal(rollout.code, 0, rollout.out);

  await stack.server.api(routes.createWorkspace, { body: { name: "cluster-hello", pool: stack.pool } });
  const hello = await stack.startRun(join(repo, "examples", "hello"), "cluster-hello", ["--auto-apply"]);
  const done = await stack.waitForRun(hello, ["applied", "errored", "canceled"], 240_000);
  assert.equal(
    done.status,
    "applied",
    `${await runLog(stack.server, hello, "plan")}\n${await runLog(stack.server, hello, "apply")}\n${await diagnose()}`,
  );
  assert.match(await runLog(stack.server, hello, "apply"), /Hello from Drover/);
  // With the built images: the controller, the task pods' drover-init and worker, and their runners were real containers.
  await assertRanFromImages(cluster, images, since, [
    ["drover", "controller"],
    ["drover", "drover-init"],
    ["drover", "worker"],
    ["runner", "runner"],
  ]);

  // A run in flight on the node (held at a gate never opened), then the node drained.
  await stack.server.api(routes.createWorkspace, { body: { name: "cluster-drain", pool: stack.pool } });
  const dir = writeConfig(shared, "long", {
    "main.tf": `resource "terraform_data" "long" {\n  input = timestamp()\n${gates.provisioner("long")}}\n`,
  });
  const long = await stack.startRun(dir, "cluster-drain", ["--auto-apply"]);
  await until(
    "the long apply running",
    () => runLog(stack.server, long, "apply").catch(() => ""),
    (l) => l.includes("started-long"),
    120_000,
  );
  await until(
    "the long apply held at its gate",
    async () => gates.waiting("long"),
    (n) => n === 1,
    60_000,
  );
  const node = ready[0].spec.nodeName as string;
  const started = Date.now();
  const drain = await kubectlOut(cluster, [
    "drain",
    node,
    "--ignore-daemonsets",
    "--delete-emptydir-data",
    "--timeout=60s",
  ]);
  assert.equal(drain.code, 0, `${drain.out}\n${await diagnose()}`);
  assert.ok(
    Date.now() - started < 35_000,
    `drain took ${Date.now() - started} ms, beyond the controller's 30 s grace period`,
  );
  const ended = await stack.waitForRun(long, ["applied", "errored", "canceled"], 60_000);
  assert.equal(ended.status, "errored", "an interrupted run never ends as a success");
  // The evicted pod's worker stops gracefully and says so (e.g. "agent stopped (graceful stop) while the apply ran").
  assert.match(
    String(ended.errorMessage ?? ""),
    /stopped|evict|disrupt|drain|terminat|interrupt/i,
    `the run's end names why:\n${await runLog(stack.server, long, "apply")}\n${JSON.stringify(ended)}`,
  );
  await kubectlOut(cluster, ["uncordon", node]);
  // The chart's RBAC covers every call the product made under its ServiceAccounts.
  assert.deepEqual(
    cluster.denials.filter((d) => d.user.startsWith(`system:serviceaccount:${ns}:`)),
    [],
  );
  // The controller watches its own task template, by name, and no other AgentTask.
  const controllerSa = `system:serviceaccount:${ns}:${ready[0].spec.serviceAccountName}`;
  const tasks = (await kube(cluster, "GET", `/apis/drover.dev/v1alpha1/namespaces/${ns}/agenttasks`)).body
    .items as any[];
  assert.equal(tasks.length, 1);
  const task = `agenttasks.drover.dev/${tasks[0].metadata.name}`;
  for (const [verb, resource, allowed] of [
    ["watch", task, "yes"],
    ["list", task, "yes"],
    ["get", task, "yes"],
    ["list", "agenttasks.drover.dev", "no"],
    ["watch", "agenttasks.drover.dev/other", "no"],
  ] as const) {
    const r = await kubectlOut(cluster, ["auth", "can-i", verb, resource, "-n", ns, `--as=${controllerSa}`]);
    assert.equal(r.out.trim(), allowed, `${verb} ${resource}: ${r.out}`);
  }
  assert.ok(watches > 20, `the controller re-watched after the server closed its watches (${watches} watch requests)`);
});

test("agent-k8s in a privileged namespace: the controller and the per-node worker become Ready through their probes, the worker prepares the hostPath data home, and examples/hello completes", async () => {
  const ns = "drover-nodes";
  await namespace(cluster, ns, "privileged");
  const since = new Date();
  const rendered = templateAgentK8s(ns, 20000 + Math.floor(Math.random() * 20000), [
    "--set",
    `agent.token=${stack.poolToken}`,
    "--set",
    `agent.url=${stack.server.url}`,
    "--set",
    "image.tag=test",
    "--set",
    "workerDaemonSet.prepareDataHome=true",
    ...runnerValues(images),
  ]);
  const applied = await applyRendered(cluster, ns, rendered);
  assert.equal(applied.code, 0, applied.out);
  const pods = async () => (await kube(cluster, "GET", `/api/v1/namespaces/${ns}/pods`)).body.items as any[];
  const diagnose = async () =>
    `${(await kubectlOut(cluster, ["get", "pods,events", "-n", ns, "-o", "wide"])).out}\n${(await kubectlOut(cluster, ["logs", "-n", ns, "-l", "app.kubernetes.io/component=worker", "--tail=40"])).out}\n${(await kubectlOut(cluster, ["logs", "-n", ns, "-l", "app.kubernetes.io/component=controller", "--tail=40"])).out}`;
  const component = (ps: any[], c: string) =>
    ps.filter((p) => p.metadata.labels?.["app.kubernetes.io/component"] === c);
  try {
    await until(
      "the controller and the worker Ready through their probes",
      pods,
      (ps) => component(ps, "controller").some(isReady) && component(ps, "worker").some(isReady),
      120_000,
    );
  } catch (e) {
    assert.fail(`${(e as Error).message}\n${await diagnose()}`);
  }
  // OnDelete (the chart's default): kubectl rollout status refuses it, as on a real cluster; the status says it all.
  const [ds] = (await kube(cluster, "GET", `/apis/apps/v1/namespaces/${ns}/daemonsets`)).body.items as any[];
  assert.deepEqual(
    [ds.status.desiredNumberScheduled, ds.status.numberReady, ds.status.updatedNumberScheduled],
    [1, 1, 1],
  );
  await stack.server.api(routes.createWorkspace, { body: { name: "nodes-hello", pool: stack.pool } });
  const hello = await stack.startRun(join(repo, "examples", "hello"), "nodes-hello", ["--auto-apply"]);
  const done = await stack.waitForRun(hello, ["applied", "errored", "canceled"], 240_000);
  assert.equal(
    done.status,
    "applied",
    `${JSON.stringify(done)}\n${await runLog(stack.server, hello, "plan")}\n${await diagnose()}`,
  );
  assert.match(await runLog(stack.server, hello, "apply"), /Hello from Drover/);
  // With the built images: the controller, the node's worker and its prepare-data-home init container, and the run pods' runners were real containers.
  await assertRanFromImages(cluster, images, since, [
    ["drover", "controller"],
    ["drover", "prepare-data-home"],
    ["drover", "worker"],
    ["runner", "runner"],
  ]);
  // The controller grants the worker `get` on each run's job Secret by name, per run (decision 0009); a
  // worker that reads it before that RoleBinding exists is refused and retries — the only 403 allowed.
  const perRunRace = (d: { verb: string; resource: string; name?: string }) =>
    d.verb === "get" && d.resource === "secrets" && /-job$/.test(d.name ?? "");
  assert.deepEqual(
    cluster.denials.filter((d) => d.user.startsWith(`system:serviceaccount:${ns}:`) && !perRunRace(d)),
    [],
    "the chart's RBAC covers every call the controller and the worker made",
  );
});
