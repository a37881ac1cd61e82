// B3: native sidecars (init containers with restartPolicy Always), as Kubernetes ≥ 1.29 runs
// them: started before the regular containers, restarted whatever the pod's policy, and never
// holding the pod open: once the regular containers end, they are stopped and the pod's phase
// follows the regular containers alone. A Job whose pod has a long-running sidecar completes.
import { after, before, describe, it } from "node:test";
import assert from "node:assert/strict";
import { fastTimings, freshNamespace, kube, pod, startTestCluster, until, type TestCluster } from "./cluster.js";

const sh = (name: string, script: string, extra: Record<string, unknown> = {}) => ({
  name,
  image: "busybox:1.36",
  command: ["sh", "-c", script],
  ...extra,
});

describe("test cluster: native sidecars", () => {
  let c: TestCluster;
  let ns: string;
  before(async () => {
    c = await startTestCluster({ timings: fastTimings });
    ns = await freshNamespace(c, "sidecars");
  });
  after(async () => {
    await c.close();
    assert.deepEqual(c.errors, []);
  });

  it("starts a sidecar before the regular containers, stops it once they end; the pod Succeeds", async () => {
    const r = await kube(c, "POST", `/api/v1/namespaces/${ns}/pods`, {
      metadata: { name: "with-sidecar" },
      spec: {
        restartPolicy: "Never",
        terminationGracePeriodSeconds: 5,
        initContainers: [sh("proxy", "trap 'exit 0' TERM; while :; do sleep 0.05; done", { restartPolicy: "Always" })],
        containers: [sh("main", "echo main-ran")],
      },
    });
    assert.equal(r.status, 201, JSON.stringify(r.body));
    const done = await until(
      "the pod to end",
      () => pod(c, ns, "with-sidecar"),
      (p) => ["Succeeded", "Failed"].includes(p?.status?.phase),
      20_000,
    );
    assert.equal(done.status.phase, "Succeeded", JSON.stringify(done.status));
    const sidecar = done.status.initContainerStatuses[0];
    assert.ok(sidecar.state.terminated, "the sidecar was stopped");
    const started = (s: any) => Date.parse(s.state.terminated.startedAt);
    assert.ok(started(sidecar) <= started(done.status.containerStatuses[0]), "the sidecar started first");
    const evs = (
      await kube(c, "GET", `/api/v1/namespaces/${ns}/events?fieldSelector=involvedObject.name%3Dwith-sidecar`)
    ).body.items as any[];
    assert.ok(evs.some((e) => e.reason === "Killing" && e.message === "Stopping container proxy"));
  });

  it("a Job whose pod has a sidecar that ignores SIGTERM completes once its worker ends (SIGKILL after the grace)", async () => {
    const r = await kube(c, "POST", `/apis/batch/v1/namespaces/${ns}/jobs`, {
      metadata: { name: "job-sidecar" },
      spec: {
        backoffLimit: 0,
        template: {
          spec: {
            restartPolicy: "Never",
            terminationGracePeriodSeconds: 1,
            initContainers: [sh("logger", "trap '' TERM; while :; do sleep 0.05; done", { restartPolicy: "Always" })],
            containers: [sh("worker", "exit 0")],
          },
        },
      },
    });
    assert.equal(r.status, 201, JSON.stringify(r.body));
    const job = await until(
      "the Job to finish",
      async () => (await kube(c, "GET", `/apis/batch/v1/namespaces/${ns}/jobs/job-sidecar`)).body,
      (j) =>
        (j.status?.conditions ?? []).some((x: any) => ["Complete", "Failed"].includes(x.type) && x.status === "True"),
      20_000,
    );
    assert.ok(
      job.status.conditions.some((x: any) => x.type === "Complete" && x.status === "True"),
      JSON.stringify(job.status),
    );
  });

  it("refuses restartPolicy on a regular container and any value but Always on an init container", async () => {
    const bad = await kube(c, "POST", `/api/v1/namespaces/${ns}/pods`, {
      metadata: { name: "bad" },
      spec: {
        initContainers: [sh("init", "true", { restartPolicy: "OnFailure" })],
        containers: [sh("main", "true", { restartPolicy: "Always" })],
      },
    });
    assert.equal(bad.status, 422);
    const fields = (bad.body.details.causes as any[]).map((x) => x.field).sort();
    assert.deepEqual(fields, ["spec.containers[0].restartPolicy", "spec.initContainers[0].restartPolicy"]);
  });
});
