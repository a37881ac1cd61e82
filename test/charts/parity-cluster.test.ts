// The seed charts' values, installed on the test cluster and checked where a running pod shows
// them (test/charts/parity.test.ts checks the rendered objects):
// - agent-job under an existing ServiceAccount (serviceAccount.create=false): the Role is bound to
//   it, the controller runs examples-like work under it with no 403;
// - global.podLabels/podAnnotations reach the controller pod and the task pods the controller's
//   Jobs create; secret.labels reach the token Secret;
// - task.caBundle: a run that reads state over TLS from a server with a private CA fails without
//   it (x509) and succeeds once the value is set;
// - extraEnvFrom: a ConfigMap's variable reaches the controller process (a value it refuses makes
//   it exit naming the variable).
// Where podman runs here, the pods are real containers of the locally built drover and runner
// images; elsewhere the host-process shim stands in (chartImages).
import assert from "node:assert/strict";
import { mkdirSync } from "node:fs";
import { join } from "node:path";
import { after, before, test } from "node:test";
import { runLog, startStack, writeConfig, type Stack } from "../support/stack.js";
import { remoteStateConfig, startPrivateTlsStateServer, type PrivateTlsStateServer } from "../support/private-ca.js";
import {
  applyRendered,
  assertRanFromImages,
  chartImages,
  isReady,
  kubectlOut,
  namespace,
  repo,
  runnerValues,
  template,
  chartTimings,
  type ChartImages,
} from "../support/chart-cluster.js";
import { kube, startTestCluster, until, type TestCluster } from "../kube/cluster.js";
import { routes } from "@drover/protocol";

let cluster: TestCluster;
let stack: Stack;
let tls: PrivateTlsStateServer;
let images: ChartImages;
const startedAt = new Date();
const shared = join(repo, "test", "dist", ".chart-cluster-parity");

before(
  async () => {
    images = await chartImages(shared);
    cluster = await startTestCluster({
      timings: chartTimings,
      ...images.options,
    });
    stack = await startStack();
    tls = await startPrivateTlsStateServer("hello over private TLS");
  },
  { timeout: 20 * 60_000 },
);

after(async () => {
  tls?.close();
  await stack?.stop();
  await cluster?.close();
});

function baseArgs(ns: string): string[] {
  return [
    "--set",
    `agent.token=${stack.poolToken}`,
    "--set",
    `agent.url=${stack.server.url}`,
    "--set",
    "image.tag=test",
    "--set",
    `agent.healthPort=${20000 + Math.floor(Math.random() * 20000)}`,
    ...runnerValues(images),
    "--namespace",
    ns,
  ];
}

test("agent-job under an existing ServiceAccount, with global pod labels and annotations and secret labels; task.caBundle makes a run trust a private CA", async () => {
  const ns = "parity-job";
  await namespace(cluster, ns, "restricted");
  const sa = await kube(cluster, "POST", `/api/v1/namespaces/${ns}/serviceaccounts`, {
    metadata: { name: "platform-sa" },
  });
  assert.equal(sa.status, 201, JSON.stringify(sa.body));
  mkdirSync(shared, { recursive: true });
  const args = [
    ...baseArgs(ns),
    "--set",
    "serviceAccount.create=false",
    "--set",
    "serviceAccount.name=platform-sa",
    "--set",
    "global.podLabels.tier=infra",
    "--set",
    "global.podAnnotations.owner=platform",
    "--set",
    "secret.labels.backup=no",
  ];
  const applied = await applyRendered(cluster, ns, template("agent-job", ns, args));
  assert.equal(applied.code, 0, applied.out);
  const diagnose = async () =>
    `${(await kubectlOut(cluster, ["get", "pods,events", "-n", ns, "-o", "wide"])).out}\n${(await kubectlOut(cluster, ["logs", "-n", ns, "-l", "app.kubernetes.io/component=controller", "--tail=40"])).out}`;
  const controllerPods = async () =>
    (
      await kube(
        cluster,
        "GET",
        `/api/v1/namespaces/${ns}/pods?labelSelector=app.kubernetes.io%2Fcomponent%3Dcontroller`,
      )
    ).body.items as any[];
  let controller: any;
  try {
    [controller] = await until(
      "the controller Ready",
      controllerPods,
      (ps) => ps.length === 1 && isReady(ps[0]),
      120_000,
    );
  } catch (e) {
    assert.fail(`${(e as Error).message}\n${await diagnose()}`);
  }
  assert.equal(controller.spec.serviceAccountName, "platform-sa");
  assert.equal(controller.metadata.labels.tier, "infra");
  assert.equal(controller.metadata.annotations.owner, "platform");
  const secrets = (await kube(cluster, "GET", `/api/v1/namespaces/${ns}/secrets`)).body.items as any[];
  assert.equal(secrets.find((s) => s.metadata.name === "d-job-agent-job-token")?.metadata.labels.backup, "no");

  const config = writeConfig(shared, "private-tls", remoteStateConfig(tls.url));
  await stack.server.api(routes.createWorkspace, { body: { name: "private-tls", pool: stack.pool } });

  // Without task.caBundle the run's terraform does not trust the private CA.
  const untrusted = await stack.startRun(config, "private-tls", ["--auto-apply"]);
  const failed = await stack.waitForRun(untrusted, ["applied", "errored", "canceled"], 120_000);
  const failedLog = await runLog(stack.server, untrusted, "plan");
  assert.equal(failed.status, "errored", `${failedLog}\n${await diagnose()}`);
  assert.match(failedLog, /x509|certificate/i, failedLog);

  // The same chart with task.caBundle: the next run trusts it.
  const withCa = await applyRendered(
    cluster,
    ns,
    template("agent-job", ns, [...args, "--set-string", `task.caBundle=${tls.caPem}`])
      .split(/^---$/m)
      .filter((d) => !/^kind: CustomResourceDefinition$/m.test(d))
      .join("---"),
  );
  assert.equal(withCa.code, 0, withCa.out);
  const trusted = await stack.startRun(config, "private-tls", ["--auto-apply"]);
  const done = await stack.waitForRun(trusted, ["applied", "errored", "canceled"], 120_000);
  const log = `${await runLog(stack.server, trusted, "plan")}\n${await runLog(stack.server, trusted, "apply")}`;
  assert.equal(done.status, "applied", `${log}\n${await diagnose()}`);
  assert.match(log, /hello over private TLS/);

  // The task pods the controller's Jobs made carry the global labels and annotations.
  const tasks = (
    await kube(cluster, "GET", `/api/v1/namespaces/${ns}/pods?labelSelector=app.kubernetes.io%2Fcomponent%3Dtask`)
  ).body.items as any[];
  assert.ok(tasks.length >= 2, `task pods: ${tasks.length}`);
  for (const p of tasks) {
    assert.equal(p.metadata.labels.tier, "infra", p.metadata.name);
    assert.equal(p.metadata.annotations.owner, "platform", p.metadata.name);
  }
  // The chart's Role, bound to the existing account, covered every call the controller made.
  assert.deepEqual(
    cluster.denials.filter((d) => d.user.startsWith(`system:serviceaccount:${ns}:`)),
    [],
  );
  await assertRanFromImages(cluster, images, startedAt, [
    ["drover", "controller"],
    ["drover", "worker"],
    ["runner", "runner"],
  ]);
});

test("extraEnvFrom: a ConfigMap's variable reaches the controller process", async () => {
  const ns = "parity-envfrom";
  await namespace(cluster, ns, "restricted");
  // A value the controller refuses at start: it exits naming the variable, which it can only
  // have read from the ConfigMap.
  const cm = await kube(cluster, "POST", `/api/v1/namespaces/${ns}/configmaps`, {
    metadata: { name: "drover-extra" },
    data: { DROVER_AGENT_SWEEP_INTERVAL_SECONDS: "0" },
  });
  assert.equal(cm.status, 201, JSON.stringify(cm.body));
  const applied = await applyRendered(
    cluster,
    ns,
    template("agent-job", ns, [...baseArgs(ns), "--set", "extraEnvFrom[0].configMapRef.name=drover-extra"], {
      release: "envfrom",
    }),
  );
  assert.equal(applied.code, 0, applied.out);
  const logs = await until(
    "the controller refusing the ConfigMap's value",
    async () =>
      (await kubectlOut(cluster, ["logs", "-n", ns, "-l", "app.kubernetes.io/component=controller", "--tail=20"])).out,
    (out) => out.includes("DROVER_AGENT_SWEEP_INTERVAL_SECONDS"),
    60_000,
  );
  assert.match(logs, /DROVER_AGENT_SWEEP_INTERVAL_SECONDS must be a whole number/);
});
