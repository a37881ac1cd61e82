// agent-job installed through the test cluster in podman mode: the controller, the task pod's
// worker and its runner are real containers of the locally built drover and runner images
// (UID 1000, read-only roots, the chart's volumes and env), in a namespace enforcing the
// restricted PodSecurity level, and a run of examples/hello completes through them.
import assert from "node:assert/strict";
import { join } from "node:path";
import { after, before, test } from "node:test";
import { runLog, startStack, type Stack } from "../support/stack.js";
import { applyRendered, droverImage, isReady, kubectlOut, namespace, repo, template } from "../support/chart-cluster.js";
import { ensureImages, podmanOk, podmanUnavailable, type BuiltImages } from "../support/podman.js";
import { kube, startTestCluster, until, type TestCluster } from "../kube/cluster.js";

const unavailable = podmanUnavailable();
const runnerImage = "ghcr.io/drover-dev/drover-runner:test";
let cluster: TestCluster | undefined;
let stack: Stack | undefined;
let built: BuiltImages;
const startedAt = new Date();

before(async () => {
  if (unavailable) return;
  built = await ensureImages();
  cluster = await startTestCluster({
    timings: { imagePullBackoffMs: 150, crashLoopBackoffMs: 500, configRetryMs: 100, podBackoffMs: 100, namespaceRetryMs: 20 },
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

  await s.server.api("POST", "/api/v1/workspaces", { name: "podman-hello", pool: s.pool });
  const hello = await s.startRun(join(repo, "examples", "hello"), "podman-hello", ["--auto-apply"]);
  const done = await s.waitForRun(hello, ["applied", "errored", "canceled"], 240_000);
  assert.equal(done.status, "applied", `${await runLog(s.server, hello, "plan")}\n${await runLog(s.server, hello, "apply")}\n${await diagnose()}`);
  assert.match(await runLog(s.server, hello, "apply"), /Hello from Drover/);
  // The controller, the task pods' drover-init and worker, and their runners were real containers.
  const started = await podmanOk(["events", "--stream=false", "--since", startedAt.toISOString(), "--filter", "event=start", "--filter", "label=dev.drover.kube-test-cluster=1", "--format", "{{.Image}} {{.Name}}"]);
  for (const [image, container] of [[built.images.drover, "controller"], [built.images.drover, "drover-init"], [built.images.drover, "worker"], [built.images.runner, "runner"]] as const) {
    assert.match(started, new RegExp(`^${image.replace(/[.*+?^${}()|[\]\\]/g, "\\$&")} ktc-\\S*-${container}-\\d+-`, "m"), `${container} ran from ${image}:\n${started}`);
  }
  assert.deepEqual(c.denials.filter((d) => d.user.startsWith(`system:serviceaccount:${ns}:`)), []);
});
