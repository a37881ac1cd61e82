// B8 end to end: agent-job installed into a test-cluster namespace that OpenShift's
// restricted-v2 SCC guards (the test cluster's SCC admission, opted into by the namespace's
// `openshift.io/sa.scc.uid-range` annotation). With the README's OpenShift flags the controller
// and a run's task pods are admitted, run as the namespace's first UID with its fsGroup, and
// examples/hello completes; with the defaults (UID/GID/fsGroup 1000) every pod is refused.
import assert from "node:assert/strict";
import { readFileSync } from "node:fs";
import { join } from "node:path";
import { after, before, test } from "node:test";
import { routes } from "@drover/protocol";
import { runLog, startStack, type Stack } from "../support/stack.js";
import {
  applyRendered,
  chartImages,
  chartTimings,
  isReady,
  kubectlOut,
  repo,
  runnerValues,
  template,
  type ChartImages,
} from "../support/chart-cluster.js";
import { kube, startTestCluster, until, type TestCluster } from "../kube/cluster.js";

const [first, size] = [1000680000, 10000];
let cluster: TestCluster;
let stack: Stack;
let images: ChartImages;

before(
  async () => {
    images = await chartImages(join(repo, "test", "dist", ".chart-cluster-openshift"));
    cluster = await startTestCluster({ timings: chartTimings, ...images.options });
    stack = await startStack();
  },
  { timeout: 20 * 60_000 },
);

after(async () => {
  await stack?.stop();
  await cluster?.close();
});

/** The `--set` flags of the chart README's OpenShift command, but the token Secret's (the test passes its token). */
function openShiftFlags(chart: string): string[] {
  const readme = readFileSync(join(repo, "charts", chart, "README.md"), "utf8");
  const block = /## OpenShift\n[\s\S]*?```sh\n([\s\S]*?)```/.exec(readme)?.[1] ?? "";
  const sets = [...block.matchAll(/--set ([^\s\\]+)/g)]
    .map((m) => m[1]!)
    .filter((v) => !v.startsWith("agent.tokenExistingSecret"));
  assert.ok(sets.length >= 3, `${chart}: the README's OpenShift command`);
  return sets.flatMap((v) => ["--set", v]);
}

async function sccNamespace(name: string): Promise<void> {
  const metadata = {
    name,
    labels: { "pod-security.kubernetes.io/enforce": "restricted" },
    annotations: {
      "openshift.io/sa.scc.uid-range": `${first}/${size}`,
      "openshift.io/sa.scc.supplemental-groups": `${first}/${size}`,
    },
  };
  const r = await kube(cluster, "POST", "/api/v1/namespaces", { metadata });
  assert.equal(r.status, 201, JSON.stringify(r.body));
}

const pods = async (ns: string) => (await kube(cluster, "GET", `/api/v1/namespaces/${ns}/pods`)).body.items as any[];
const component = (ps: any[], c: string) => ps.filter((p) => p.metadata.labels?.["app.kubernetes.io/component"] === c);

test("B8: agent-job with the README's OpenShift flags runs under the SCC's UID range; the defaults are refused", async () => {
  const ns = "drover-openshift";
  await sccNamespace(ns);
  const values = (extra: string[]) => [
    "--set",
    `agent.token=${stack.poolToken}`,
    "--set",
    `agent.url=${stack.server.url}`,
    "--set",
    "image.tag=test",
    "--set",
    `agent.healthPort=${20000 + Math.floor(Math.random() * 20000)}`,
    ...runnerValues(images),
    ...extra,
  ];
  const applied = await applyRendered(cluster, ns, template("agent-job", ns, values(openShiftFlags("agent-job"))));
  assert.equal(applied.code, 0, applied.out);
  const diagnose = async () =>
    `${(await kubectlOut(cluster, ["get", "pods,events", "-n", ns, "-o", "wide"])).out}\n${(await kubectlOut(cluster, ["logs", "-n", ns, "-l", "app.kubernetes.io/component=controller", "--tail=50"])).out}`;
  let controller: any;
  try {
    [controller] = component(
      await until(
        "the controller Ready",
        () => pods(ns),
        (ps) => component(ps, "controller").some(isReady),
        180_000,
      ),
      "controller",
    ).filter(isReady);
  } catch (e) {
    assert.fail(`${(e as Error).message}\n${await diagnose()}`);
  }
  const inRange = (uid: unknown) => typeof uid === "number" && uid >= first && uid < first + size;
  const uidsOf = (p: any) =>
    [...(p.spec.initContainers ?? []), ...p.spec.containers].map((c: any) => [c.name, c.securityContext?.runAsUser]);
  assert.ok(
    uidsOf(controller).every(([, uid]) => inRange(uid)),
    JSON.stringify(uidsOf(controller)),
  );
  assert.equal(controller.spec.securityContext.fsGroup, first, "the SCC's fsGroup owns the volumes");

  await stack.server.api(routes.createWorkspace, { body: { name: "openshift-hello", pool: stack.pool } });
  const hello = await stack.startRun(join(repo, "examples", "hello"), "openshift-hello", ["--auto-apply"]);
  const done = await stack.waitForRun(hello, ["applied", "errored", "canceled"], 240_000);
  assert.equal(
    done.status,
    "applied",
    `${await runLog(stack.server, hello, "plan")}\n${await runLog(stack.server, hello, "apply")}\n${await diagnose()}`,
  );
  assert.match(await runLog(stack.server, hello, "apply"), /Hello from Drover/);
  const tasks = component(await pods(ns), "task");
  assert.ok(tasks.length >= 1, "the run's task pods were admitted");
  for (const p of tasks) {
    assert.ok(
      uidsOf(p).every(([, uid]) => inRange(uid)),
      `${p.metadata.name}: ${JSON.stringify(uidsOf(p))}`,
    );
    assert.equal(
      p.spec.securityContext.fsGroup,
      first,
      `${p.metadata.name}: the worker reads its 0400 job Secret through it`,
    );
  }
  const refused = await kube(cluster, "GET", `/api/v1/namespaces/${ns}/events?fieldSelector=reason%3DFailedCreate`);
  assert.deepEqual(
    (refused.body.items as any[]).map((e) => e.message),
    [],
    "nothing refused with the OpenShift flags",
  );

  // The defaults (UID, GID and fsGroup 1000) in the same kind of namespace: the SCC refuses the controller's pod.
  const plain = "drover-openshift-defaults";
  await sccNamespace(plain);
  const again = await applyRendered(cluster, plain, template("agent-job", plain, values([]), { crds: false }));
  assert.equal(again.code, 0, again.out);
  const events = await until(
    "a FailedCreate of the controller's ReplicaSet",
    async () =>
      (await kube(cluster, "GET", `/api/v1/namespaces/${plain}/events?fieldSelector=reason%3DFailedCreate`)).body
        .items as any[],
    (es) => es.length > 0,
    60_000,
  );
  assert.match(
    events[0].message,
    /unable to validate against any security context constraint: .*fsGroup: Invalid value: \[\]int64\{1000\}.*runAsUser: Invalid value: 1000: must be in the ranges/,
  );
  assert.deepEqual(await pods(plain), [], "no pod of the defaults was admitted");
});
