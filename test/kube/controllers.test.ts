// The test cluster's scheduler (several nodes: nodeSelector, affinity, taints, requests
// vs allocatable, Unschedulable), DaemonSets (RollingUpdate and OnDelete), Deployments'
// rollouts, and the eviction API honouring PodDisruptionBudgets, with kubectl drain
// blocking or succeeding as on a real cluster.
import { after, before, describe, it } from "node:test";
import assert from "node:assert/strict";
import {
  fastTimings,
  freshNamespace,
  hasKubectl,
  kube,
  kubectl,
  pod,
  startTestCluster,
  until,
  type TestCluster,
} from "./cluster.js";

const sleeper = (extra: Record<string, unknown> = {}) => ({
  name: "main",
  image: "busybox:1.36",
  command: ["sh", "-c", "exec sleep 1000"],
  ...extra,
});
const ready = (p: any) => (p?.status?.conditions ?? []).some((x: any) => x.type === "Ready" && x.status === "True");

describe("test cluster scheduler and controllers", () => {
  let c: TestCluster;
  let ns: string;
  before(async () => {
    c = await startTestCluster({
      timings: fastTimings,
      nodes: [
        { name: "node-a", labels: { zone: "a" }, allocatable: { cpu: "1", memory: "2Gi", pods: "20" } },
        { name: "node-b", labels: { zone: "b" }, taints: [{ key: "dedicated", value: "infra", effect: "NoSchedule" }] },
        { name: "node-c", labels: { zone: "c" }, allocatable: { cpu: "1", memory: "2Gi", pods: "20" } },
      ],
    });
    ns = await freshNamespace(c, "ctl");
  });
  after(async () => {
    await c.close();
    assert.deepEqual(c.errors, []);
  });

  const create = async (path: string, body: unknown) => {
    const r = await kube(c, "POST", path, body);
    assert.equal(r.status, 201, JSON.stringify(r.body));
    return r.body;
  };
  const createPod = (name: string, spec: Record<string, unknown>) =>
    create(`/api/v1/namespaces/${ns}/pods`, {
      metadata: { name },
      spec: { terminationGracePeriodSeconds: 1, containers: [sleeper()], ...spec },
    });
  const scheduledTo = async (name: string) =>
    (
      await until(
        `${name} scheduled`,
        () => pod(c, ns, name),
        (p) => Boolean(p?.spec?.nodeName),
      )
    ).spec.nodeName as string;

  it("places pods by nodeSelector, required affinity, taints and tolerations, and requests vs allocatable; else PodScheduled=False/Unschedulable until something changes", async () => {
    await createPod("in-c", { nodeSelector: { zone: "c" } });
    assert.equal(await scheduledTo("in-c"), "node-c");
    await createPod("on-b", {
      tolerations: [{ key: "dedicated", operator: "Equal", value: "infra", effect: "NoSchedule" }],
      affinity: {
        nodeAffinity: {
          requiredDuringSchedulingIgnoredDuringExecution: {
            nodeSelectorTerms: [{ matchExpressions: [{ key: "zone", operator: "In", values: ["b"] }] }],
          },
        },
      },
    });
    assert.equal(await scheduledTo("on-b"), "node-b");
    await createPod("too-big", {
      nodeSelector: { zone: "a" },
      containers: [sleeper({ resources: { requests: { cpu: "1500m" } } })],
    });
    const pending = await until(
      "Unschedulable",
      () => pod(c, ns, "too-big"),
      (p) => (p?.status?.conditions ?? []).some((x: any) => x.type === "PodScheduled" && x.status === "False"),
    );
    const cond = pending.status.conditions.find((x: any) => x.type === "PodScheduled");
    assert.equal(cond.reason, "Unschedulable");
    assert.equal(
      cond.message,
      "0/3 nodes are available: 1 Insufficient cpu, 1 node(s) didn't match Pod's node affinity/selector, 1 node(s) had untolerated taint {dedicated: infra}. preemption: 0/3 nodes are available: 3 Preemption is not helpful for scheduling.",
    );
    assert.equal(pending.status.phase, "Pending");
    const events = await kube(c, "GET", `/api/v1/namespaces/${ns}/events?fieldSelector=involvedObject.name%3Dtoo-big`);
    assert.ok(events.body.items.some((e: any) => e.reason === "FailedScheduling" && e.type === "Warning"));
    await createPod("nowhere", { nodeSelector: { zone: "x" } });
    await until(
      "Unschedulable",
      () => pod(c, ns, "nowhere"),
      (p) => (p?.status?.conditions ?? []).some((x: any) => x.type === "PodScheduled" && x.status === "False"),
    );
    await kube(
      c,
      "PATCH",
      "/api/v1/nodes/node-c",
      { metadata: { labels: { zone: "x" } } },
      "application/merge-patch+json",
    );
    assert.equal(await scheduledTo("nowhere"), "node-c", "a Node change retries pending pods");
    await kube(
      c,
      "PATCH",
      "/api/v1/nodes/node-c",
      { metadata: { labels: { zone: "c" } } },
      "application/merge-patch+json",
    );
    for (const p of ["in-c", "on-b", "too-big", "nowhere"])
      await kube(c, "DELETE", `/api/v1/namespaces/${ns}/pods/${p}?gracePeriodSeconds=0`);
  });

  it(
    "runs a DaemonSet on every eligible node; RollingUpdate replaces pods, OnDelete waits for deletes; kubectl rollout status follows",
    { skip: !hasKubectl && "kubectl not installed" },
    async () => {
      const ds = (name: string, strategy: unknown, value: string) => ({
        apiVersion: "apps/v1",
        kind: "DaemonSet",
        metadata: { name },
        spec: {
          selector: { matchLabels: { app: name } },
          updateStrategy: strategy,
          template: {
            metadata: { labels: { app: name } },
            spec: { terminationGracePeriodSeconds: 1, containers: [sleeper({ env: [{ name: "V", value }] })] },
          },
        },
      });
      const podsOf = async (name: string) =>
        (await kube(c, "GET", `/api/v1/namespaces/${ns}/pods?labelSelector=app%3D${name}`)).body.items as any[];
      await create(
        `/apis/apps/v1/namespaces/${ns}/daemonsets`,
        ds("roll", { type: "RollingUpdate", rollingUpdate: { maxUnavailable: 1 } }, "1"),
      );
      const first = await until(
        "a pod on each untainted node",
        () => podsOf("roll"),
        (ps) => ps.length === 2 && ps.every(ready),
      );
      assert.deepEqual(
        first.map((p) => p.spec.nodeName).sort(),
        ["node-a", "node-c"],
        "node-b's taint is not tolerated",
      );
      const status = await kubectl(c, ["rollout", "status", "daemonset/roll", "-n", ns, "--timeout=20s"]);
      assert.equal(status.code, 0, status.stderr);
      const ds1 = (await kube(c, "GET", `/apis/apps/v1/namespaces/${ns}/daemonsets/roll`)).body;
      assert.equal(ds1.status.desiredNumberScheduled, 2);
      assert.equal(ds1.status.numberReady, 2);
      await kube(
        c,
        "PATCH",
        `/apis/apps/v1/namespaces/${ns}/daemonsets/roll`,
        { spec: { template: { spec: { containers: [{ name: "main", env: [{ name: "V", value: "2" }] }] } } } },
        "application/strategic-merge-patch+json",
      );
      const rolled = await kubectl(c, ["rollout", "status", "daemonset/roll", "-n", ns, "--timeout=30s"]);
      assert.equal(rolled.code, 0, rolled.stderr);
      const second = await until(
        "every pod replaced",
        () => podsOf("roll"),
        (ps) =>
          ps.length === 2 && ps.every((p) => !first.some((f) => f.metadata.uid === p.metadata.uid)) && ps.every(ready),
      );
      assert.ok(second.every((p) => p.spec.containers[0].env[0].value === "2"));

      await create(`/apis/apps/v1/namespaces/${ns}/daemonsets`, ds("manual", { type: "OnDelete" }, "1"));
      const before = await until(
        "pods",
        () => podsOf("manual"),
        (ps) => ps.length === 2 && ps.every(ready),
      );
      await kube(
        c,
        "PATCH",
        `/apis/apps/v1/namespaces/${ns}/daemonsets/manual`,
        { spec: { template: { spec: { containers: [{ name: "main", env: [{ name: "V", value: "2" }] }] } } } },
        "application/strategic-merge-patch+json",
      );
      await until(
        "the new generation observed",
        () => kube(c, "GET", `/apis/apps/v1/namespaces/${ns}/daemonsets/manual`),
        (r) => r.body.status.observedGeneration === 2,
      );
      assert.deepEqual(
        (await podsOf("manual")).map((p) => p.metadata.uid).sort(),
        before.map((p) => p.metadata.uid).sort(),
        "OnDelete leaves running pods alone",
      );
      const victim = before[0];
      await kube(c, "DELETE", `/api/v1/namespaces/${ns}/pods/${victim.metadata.name as string}`);
      const after = await until(
        "the deleted one replaced with the new template",
        () => podsOf("manual"),
        (ps) =>
          ps.length === 2 &&
          ps.some((p) => p.spec.nodeName === victim.spec.nodeName && p.spec.containers[0].env[0].value === "2"),
      );
      assert.ok(
        after.some((p) => p.metadata.uid === before[1].metadata.uid),
        "the other pod is untouched",
      );
      await kube(c, "DELETE", `/apis/apps/v1/namespaces/${ns}/daemonsets/roll`);
      await kube(c, "DELETE", `/apis/apps/v1/namespaces/${ns}/daemonsets/manual`);
    },
  );

  it(
    "answers 429 to evictions that would violate a PodDisruptionBudget: kubectl drain blocks, then drains once the budget allows",
    { skip: !hasKubectl && "kubectl not installed" },
    async () => {
      await create(`/apis/apps/v1/namespaces/${ns}/deployments`, {
        apiVersion: "apps/v1",
        kind: "Deployment",
        metadata: { name: "web" },
        spec: {
          replicas: 1,
          selector: { matchLabels: { app: "web" } },
          template: {
            metadata: { labels: { app: "web" } },
            spec: { terminationGracePeriodSeconds: 1, nodeSelector: { zone: "a" }, containers: [sleeper()] },
          },
        },
      });
      await create(`/apis/policy/v1/namespaces/${ns}/poddisruptionbudgets`, {
        apiVersion: "policy/v1",
        kind: "PodDisruptionBudget",
        metadata: { name: "web" },
        spec: { minAvailable: 1, selector: { matchLabels: { app: "web" } } },
      });
      const podsOf = async () =>
        (await kube(c, "GET", `/api/v1/namespaces/${ns}/pods?labelSelector=app%3Dweb`)).body.items as any[];
      const [web] = await until("the web pod Ready", podsOf, (ps) => ps.length === 1 && ready(ps[0]));
      const pdb = await until(
        "PDB status",
        () => kube(c, "GET", `/apis/policy/v1/namespaces/${ns}/poddisruptionbudgets/web`),
        (r) => r.body.status?.currentHealthy === 1,
      );
      assert.equal(pdb.body.status.disruptionsAllowed, 0);
      const refused = await kube(c, "POST", `/api/v1/namespaces/${ns}/pods/${web.metadata.name as string}/eviction`, {
        apiVersion: "policy/v1",
        kind: "Eviction",
        metadata: { name: web.metadata.name },
      });
      assert.equal(refused.status, 429);
      assert.equal(refused.body.message, "Cannot evict pod as it would violate the pod's disruption budget.");
      assert.deepEqual(refused.body.details.causes, [
        { reason: "DisruptionBudget", message: "The disruption budget web needs 1 healthy pods and has 1 currently" },
      ]);
      const blocked = await kubectl(c, [
        "drain",
        "node-a",
        "--ignore-daemonsets",
        "--delete-emptydir-data",
        "--timeout=2s",
      ]);
      assert.notEqual(blocked.code, 0);
      assert.match(blocked.stderr + blocked.stdout, /Cannot evict pod as it would violate the pod's disruption budget/);
      assert.equal((await pod(c, ns, web.metadata.name)).metadata.uid, web.metadata.uid, "still running");
      // The cordon stays: the replacement must land elsewhere once the selector allows it.
      await kube(
        c,
        "PATCH",
        `/apis/policy/v1/namespaces/${ns}/poddisruptionbudgets/web`,
        { spec: { minAvailable: 0 } },
        "application/merge-patch+json",
      );
      const drained = await kubectl(c, [
        "drain",
        "node-a",
        "--ignore-daemonsets",
        "--delete-emptydir-data",
        "--timeout=20s",
      ]);
      assert.equal(drained.code, 0, drained.stderr);
      assert.match(drained.stdout, /node\/node-a drained/);
      const evicted = await kube(c, "GET", `/api/v1/namespaces/${ns}/pods/${web.metadata.name as string}`);
      assert.equal(evicted.status, 404);
      const [replacement] = await until("a replacement", podsOf, (ps) => ps.length === 1);
      assert.equal(
        (replacement.status.conditions ?? []).find((x: any) => x.type === "PodScheduled")?.status,
        "False",
        "node-a is cordoned and nothing else matches zone a",
      );
      const nodes = await kubectl(c, ["get", "nodes"]);
      assert.match(nodes.stdout, /node-a\s+Ready,SchedulingDisabled/);
      await kubectl(c, ["uncordon", "node-a"]);
      await until(
        "scheduled after uncordon",
        () => pod(c, ns, replacement.metadata.name),
        (p) => p?.spec?.nodeName === "node-a",
      );
    },
  );
});
