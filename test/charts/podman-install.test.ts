// The charts installed through the test cluster in podman mode, their pods real containers of the
// locally built drover and runner images (UID 1000, read-only roots, the chart's volumes and env):
// agent-job in a namespace enforcing the restricted PodSecurity level (controller, task pods'
// worker and runner), and agent-k8s (controller, the per-node worker DaemonSet with its root
// init container preparing the hostPath data home, run pods holding only the runner). A run of
// examples/hello completes through each.
import assert from "node:assert/strict";
import { join } from "node:path";
import { after, before, test } from "node:test";
import { runLog, startStack, type Stack } from "../support/stack.js";
import { applyRendered, assertStarted, droverImage, isReady, kubectlOut, namespace, repo, runnerImage, startedContainers, template, templateAgentK8s, chartTimings } from "../support/chart-cluster.js";
import { ensureImages, podmanUnavailable, type BuiltImages } from "../support/podman.js";
import { kube, startTestCluster, until, type TestCluster } from "../kube/cluster.js";
import { routes } from "@drover/protocol";

const unavailable = podmanUnavailable();
let cluster: TestCluster | undefined;
let stack: Stack | undefined;
let built: BuiltImages;
const startedAt = new Date();

before(async () => {
  if (unavailable) return;
  built = await ensureImages();
  cluster = await startTestCluster({
    timings: chartTimings,
    podman: { env: built.env },
    images: { [droverImage]: { podman: built.images.drover }, [runnerImage]: { podman: built.images.runner } },
  });
  stack = await startStack();
}, { timeout: 20 * 60_000 });

after(async () => {
  await stack?.stop();
  await cluster?.close();
});

test("agent-job with the locally built images as real containers: the controller Ready through its probes, examples/hello applied by a worker and runner container", { skip: unavailable }, async () => {
  const c = cluster!;
  const s = stack!;
  const ns = "drover-podman";
  await namespace(c, ns, "restricted");
  const rendered = template("agent-job", ns, [
    "--set", `agent.token=${s.poolToken}`,
    "--set", `agent.url=${s.server.url}`,
    "--set", "image.tag=test",
    "--set", `agent.healthPort=${20000 + Math.floor(Math.random() * 20000)}`,
    "--set", `task.runner.image=${runnerImage}`,
    "--set", "task.runner.extraEnv.CHECKPOINT_DISABLE=1",
  ]);
  const applied = await applyRendered(c, ns, rendered);
  assert.equal(applied.code, 0, applied.out);
  const diagnose = async () => `${(await kubectlOut(c, ["get", "pods,events", "-n", ns, "-o", "wide"])).out}\n${(await kubectlOut(c, ["logs", "-n", ns, "-l", "app.kubernetes.io/component=controller", "--tail=50"])).out}`;
  const controllerPods = async () => (await kube(c, "GET", `/api/v1/namespaces/${ns}/pods?labelSelector=app.kubernetes.io%2Fcomponent%3Dcontroller`)).body.items as any[];
  try {
    await until("the controller Ready through its readiness probe", controllerPods, (ps) => ps.length === 1 && isReady(ps[0]), 120_000);
  } catch (e) {
    assert.fail(`${(e as Error).message}\n${await diagnose()}`);
  }

  await s.server.api(routes.createWorkspace, { body: { name: "podman-hello", pool: s.pool } });
  const hello = await s.startRun(join(repo, "examples", "hello"), "podman-hello", ["--auto-apply"]);
  const done = await s.waitForRun(hello, ["applied", "errored", "canceled"], 240_000);
  assert.equal(done.status, "applied", `${await runLog(s.server, hello, "plan")}\n${await runLog(s.server, hello, "apply")}\n${await diagnose()}`);
  assert.match(await runLog(s.server, hello, "apply"), /Hello from Drover/);
  // The controller, the task pods' drover-init and worker, and their runners were real containers.
  const started = await startedContainers(startedAt);
  for (const [image, container] of [[built.images.drover, "controller"], [built.images.drover, "drover-init"], [built.images.drover, "worker"], [built.images.runner, "runner"]] as const) assertStarted(started, image, container);
  assert.deepEqual(c.denials.filter((d) => d.user.startsWith(`system:serviceaccount:${ns}:`)), []);
});

test("agent-k8s with the locally built images as real containers: controller and node worker Ready through their probes, the root init container prepares the hostPath data home, examples/hello applied in a runner container", { skip: unavailable }, async () => {
  const c = cluster!;
  const s = stack!;
  const ns = "drover-podman-nodes";
  const since = new Date();
  // hostPath volumes: the privileged level, as on a real cluster.
  await namespace(c, ns, "privileged");
  // A pool of its own: agent-job's controller from the test above still serves the stack's pool.
  const pool = "podman-nodes";
  assert.equal((await s.server.api(routes.createPool, { body: { name: pool } })).status, 201);
  const token = await s.server.api(routes.createPoolToken, { params: { pool }, body: { description: "agent-k8s" } });
  assert.equal(token.status, 201, JSON.stringify(token.body));
  const rendered = templateAgentK8s(ns, 20000 + Math.floor(Math.random() * 20000), [
    "--set", `agent.token=${token.body.token as string}`,
    "--set", `agent.url=${s.server.url}`,
    "--set", "image.tag=test",
    "--set", "workerDaemonSet.prepareDataHome=true",
    "--set", `task.runner.image=${runnerImage}`,
    "--set", "task.runner.extraEnv.CHECKPOINT_DISABLE=1",
  ]);
  const applied = await applyRendered(c, ns, rendered);
  assert.equal(applied.code, 0, applied.out);
  const pods = async () => (await kube(c, "GET", `/api/v1/namespaces/${ns}/pods`)).body.items as any[];
  const component = (ps: any[], name: string) => ps.filter((p) => p.metadata.labels?.["app.kubernetes.io/component"] === name);
  const diagnose = async () => `${(await kubectlOut(c, ["get", "pods,events", "-n", ns, "-o", "wide"])).out}\n${(await kubectlOut(c, ["logs", "-n", ns, "-l", "app.kubernetes.io/component=worker", "--tail=40"])).out}\n${(await kubectlOut(c, ["logs", "-n", ns, "-l", "app.kubernetes.io/component=controller", "--tail=40"])).out}`;
  try {
    await until("the controller and the worker Ready through their probes", pods, (ps) => component(ps, "controller").some(isReady) && component(ps, "worker").some(isReady), 120_000);
  } catch (e) {
    assert.fail(`${(e as Error).message}\n${await diagnose()}`);
  }

  await s.server.api(routes.createWorkspace, { body: { name: "podman-nodes-hello", pool } });
  const hello = await s.startRun(join(repo, "examples", "hello"), "podman-nodes-hello", ["--auto-apply"]);
  const done = await s.waitForRun(hello, ["applied", "errored", "canceled"], 240_000);
  assert.equal(done.status, "applied", `${JSON.stringify(done)}\n${await runLog(s.server, hello, "plan")}\n${await runLog(s.server, hello, "apply")}\n${await diagnose()}`);
  assert.match(await runLog(s.server, hello, "apply"), /Hello from Drover/);
  const started = await startedContainers(since);
  for (const [image, container] of [[built.images.drover, "controller"], [built.images.drover, "worker"], [built.images.runner, "runner"]] as const) assertStarted(started, image, container);
  const perRunRace = (d: { verb: string; resource: string; name?: string }) => d.verb === "get" && d.resource === "secrets" && /-job$/.test(d.name ?? "");
  assert.deepEqual(c.denials.filter((d) => d.user.startsWith(`system:serviceaccount:${ns}:`) && !perRunRace(d)), []);
});
