// The node agent: pods' containers as local processes, exit codes and logs, init
// containers with a shared emptyDir, Secrets as env and volumes, Job deadlines and
// TTL, and the simulated failures (ImagePullBackOff, InvalidImageName, OOMKilled,
// eviction).
import { after, before, describe, it } from "node:test";
import assert from "node:assert/strict";
import {
  annotationOomKill,
  fastTimings,
  freshNamespace,
  jobPod,
  kube,
  pod,
  startTestCluster,
  until,
  watch,
  type TestCluster,
} from "./cluster.js";

function jobBody(
  name: string,
  podSpec: Record<string, unknown>,
  spec: Record<string, unknown> = {},
  podMeta: Record<string, unknown> = {},
) {
  return {
    apiVersion: "batch/v1",
    kind: "Job",
    metadata: { name },
    spec: { backoffLimit: 0, ...spec, template: { metadata: podMeta, spec: { restartPolicy: "Never", ...podSpec } } },
  };
}

const sh = (name: string, script: string, extra: Record<string, unknown> = {}) => ({
  name,
  image: "busybox:1.36",
  command: ["sh", "-c", script],
  ...extra,
});

describe("test cluster node agent", () => {
  let c: TestCluster;
  let ns: string;
  before(async () => {
    c = await startTestCluster({ timings: fastTimings });
    ns = await freshNamespace(c, "node");
  });
  after(async () => {
    await c.close();
    assert.deepEqual(c.errors, []);
  });

  const createJob = async (body: unknown) => {
    const r = await kube(c, "POST", `/apis/batch/v1/namespaces/${ns}/jobs`, body);
    assert.equal(r.status, 201, JSON.stringify(r.body));
    return r.body;
  };
  const job = (name: string) => kube(c, "GET", `/apis/batch/v1/namespaces/${ns}/jobs/${name}`).then((r) => r.body);
  const condition = (j: any, type: string) =>
    (j?.status?.conditions ?? []).find((x: any) => x.type === type && x.status === "True");

  it("runs a failing Job pod: exit code in containerStatuses, output in the log, Job Failed", async () => {
    const created = await createJob(jobBody("fails", { containers: [sh("main", "echo hi; exit 3")] }));
    const done = await until(
      "Job failure",
      () => job("fails"),
      (j) => condition(j, "Failed"),
    );
    assert.equal(condition(done, "Failed").reason, "BackoffLimitExceeded");
    assert.equal(done.status.failed, 1);
    const p = await jobPod(c, ns, "fails");
    assert.equal(p.status.phase, "Failed");
    assert.equal(p.metadata.labels["batch.kubernetes.io/job-name"], "fails");
    assert.equal(p.metadata.ownerReferences[0].uid, created.metadata.uid);
    assert.match(p.metadata.name, /^fails-[a-z0-9]{5}$/);
    assert.equal(p.spec.nodeName, "ktc-node");
    const term = p.status.containerStatuses[0].state.terminated;
    assert.deepEqual([term.exitCode, term.reason], [3, "Error"]);
    assert.ok(term.startedAt && term.finishedAt);
    const log = await kube(c, "GET", `/api/v1/namespaces/${ns}/pods/${p.metadata.name as string}/log`);
    assert.equal(log.body, "hi\n");
    const events = await kube(c, "GET", `/api/v1/namespaces/${ns}/events?fieldSelector=involvedObject.name%3Dfails`);
    assert.deepEqual(events.body.items.map((e: any) => e.reason).sort(), ["BackoffLimitExceeded", "SuccessfulCreate"]);
  });

  it("runs init containers first; they share an emptyDir with the main container; env and workingDir apply", async () => {
    await createJob(
      jobBody("init", {
        volumes: [{ name: "shared", emptyDir: {} }],
        initContainers: [
          sh("first", "echo one > /drover/shared/order", {
            volumeMounts: [{ name: "shared", mountPath: "/drover/shared" }],
          }),
          sh("second", "echo two >> /drover/shared/order", {
            volumeMounts: [{ name: "shared", mountPath: "/drover/shared" }],
          }),
        ],
        containers: [
          sh("main", "cat order; echo pod=$POD_NAME ns=$POD_NS greet=$GREETING; pwd", {
            workingDir: "/drover/shared",
            volumeMounts: [{ name: "shared", mountPath: "/drover/shared" }],
            env: [
              { name: "NAME", value: "world" },
              { name: "GREETING", value: "hello $(NAME)" },
              { name: "POD_NAME", valueFrom: { fieldRef: { fieldPath: "metadata.name" } } },
              { name: "POD_NS", valueFrom: { fieldRef: { fieldPath: "metadata.namespace" } } },
            ],
          }),
        ],
      }),
    );
    await until(
      "Job completion",
      () => job("init"),
      (j) => condition(j, "Complete"),
    );
    const p = await jobPod(c, ns, "init");
    assert.equal(p.status.phase, "Succeeded");
    assert.deepEqual(
      p.status.initContainerStatuses.map((s: any) => s.state.terminated.reason),
      ["Completed", "Completed"],
    );
    assert.equal(p.status.conditions.find((x: any) => x.type === "Initialized").status, "True");
    const log = await kube(c, "GET", `/api/v1/namespaces/${ns}/pods/${p.metadata.name as string}/log?container=main`);
    // Under path rewriting (no mount namespaces) pwd shows the volume's host directory.
    const cwd = c.isolation === "namespace" ? "/drover/shared" : (log.body as string).trim().split("\n").pop();
    assert.equal(log.body, `one\ntwo\npod=${p.metadata.name as string} ns=${ns} greet=hello world\n${cwd ?? ""}\n`);
    // With one main container the server picks it (init containers do not count).
    const defaulted = await kube(c, "GET", `/api/v1/namespaces/${ns}/pods/${p.metadata.name as string}/log`);
    assert.equal(defaulted.body, log.body);
    const initLog = await kube(
      c,
      "GET",
      `/api/v1/namespaces/${ns}/pods/${p.metadata.name as string}/log?container=first`,
    );
    assert.deepEqual([initLog.status, initLog.body], [200, ""]);
  });

  it("passes Secrets as env and as a volume; waits with CreateContainerConfigError while the Secret is missing", async () => {
    await createJob(
      jobBody("secrets", {
        volumes: [
          {
            name: "creds",
            secret: { secretName: "creds", items: [{ key: "token", path: "nested/token", mode: 0o400 }] },
          },
        ],
        containers: [
          sh(
            "main",
            "echo env=$TOKEN; cat /var/run/creds/nested/token; echo; stat -c %a /var/run/creds/nested/token; touch /var/run/creds/x 2>/dev/null || echo read-only",
            {
              env: [{ name: "TOKEN", valueFrom: { secretKeyRef: { name: "creds", key: "token" } } }],
              volumeMounts: [{ name: "creds", mountPath: "/var/run/creds" }],
            },
          ),
        ],
      }),
    );
    const waiting = await jobPod(c, ns, "secrets");
    await until(
      "FailedMount while the Secret is missing",
      () =>
        kube(
          c,
          "GET",
          `/api/v1/namespaces/${ns}/events?fieldSelector=involvedObject.name%3D${waiting.metadata.name as string}`,
        ),
      (r) => r.body.items.some((e: any) => e.reason === "FailedMount"),
    );
    await kube(c, "POST", `/api/v1/namespaces/${ns}/secrets`, {
      metadata: { name: "creds" },
      stringData: { token: "s3cret" },
    });
    await until(
      "Job completion",
      () => job("secrets"),
      (j) => condition(j, "Complete"),
    );
    const log = await kube(c, "GET", `/api/v1/namespaces/${ns}/pods/${waiting.metadata.name as string}/log`);
    assert.equal(log.body, "env=s3cret\ns3cret\n400\nread-only\n");

    await kube(c, "POST", `/api/v1/namespaces/${ns}/pods`, {
      metadata: { name: "needs-cm" },
      spec: {
        restartPolicy: "Never",
        containers: [
          sh("main", "echo $V", { env: [{ name: "V", valueFrom: { configMapKeyRef: { name: "later", key: "v" } } }] }),
        ],
      },
    });
    await until(
      "CreateContainerConfigError",
      () => pod(c, ns, "needs-cm"),
      (p) => p.status.containerStatuses?.[0]?.state?.waiting?.reason === "CreateContainerConfigError",
    );
    await kube(c, "POST", `/api/v1/namespaces/${ns}/configmaps`, { metadata: { name: "later" }, data: { v: "now" } });
    await until(
      "pod success",
      () => pod(c, ns, "needs-cm"),
      (p) => p.status.phase === "Succeeded",
    );
  });

  it("fails a Job at activeDeadlineSeconds: the pod is killed, reason DeadlineExceeded", async () => {
    await createJob(
      jobBody(
        "deadline",
        {
          terminationGracePeriodSeconds: 5,
          containers: [sh("main", "trap 'echo got TERM; exit 143' TERM; while true; do sleep 0.05; done")],
        },
        { activeDeadlineSeconds: 1 },
      ),
    );
    const started = Date.now();
    const j = await until(
      "DeadlineExceeded",
      () => job("deadline"),
      (x) => condition(x, "Failed"),
      5000,
    );
    assert.equal(condition(j, "Failed").reason, "DeadlineExceeded");
    assert.ok(Date.now() - started < 4000);
    const p = await until(
      "pod gone",
      () => kube(c, "GET", `/api/v1/namespaces/${ns}/pods?labelSelector=job-name%3Ddeadline`),
      (r) => r.body.items.length === 0,
    );
    assert.equal(p.body.items.length, 0);
  });

  it("deletes a finished Job after ttlSecondsAfterFinished, its pods with it", async () => {
    // Watched, not polled: the Job lives one second after it completes, which a poll on a busy machine can miss.
    const w = await watch(c, `/apis/batch/v1/namespaces/${ns}/jobs?watch=true&fieldSelector=metadata.name%3Dttl`);
    try {
      await createJob(jobBody("ttl", { containers: [sh("main", "true")] }, { ttlSecondsAfterFinished: 1 }));
      const completed = await w.waitFor((e) => e.type === "MODIFIED" && condition(e.object, "Complete"), 30_000);
      const deleted = await w.waitFor((e) => e.type === "DELETED", 10_000);
      assert.ok(w.events.indexOf(deleted) > w.events.indexOf(completed), "deleted after it completed");
    } finally {
      w.close();
    }
    await until(
      "pod deletion",
      () => kube(c, "GET", `/api/v1/namespaces/${ns}/pods?labelSelector=job-name%3Dttl`),
      (r) => r.body.items.length === 0,
    );
  });

  it("simulates ErrImagePull then ImagePullBackOff, and InvalidImageName", async () => {
    await kube(c, "POST", `/api/v1/namespaces/${ns}/pods`, {
      metadata: { name: "pull" },
      spec: {
        restartPolicy: "Never",
        containers: [{ ...sh("main", "true"), image: "registry.example.com/drover/runner:pull-fails" }],
      },
    });
    await until(
      "ErrImagePull",
      () => pod(c, ns, "pull"),
      (p) => p.status.containerStatuses?.[0]?.state?.waiting?.reason === "ErrImagePull",
    );
    const backoff = await until(
      "ImagePullBackOff",
      () => pod(c, ns, "pull"),
      (p) => p.status.containerStatuses?.[0]?.state?.waiting?.reason === "ImagePullBackOff",
    );
    assert.equal(backoff.status.phase, "Pending");
    const logs = await kube(c, "GET", `/api/v1/namespaces/${ns}/pods/pull/log`);
    assert.equal(logs.status, 400);

    c.setImagePullable("busybox:stuck", false);
    await kube(c, "POST", `/api/v1/namespaces/${ns}/pods`, {
      metadata: { name: "stuck" },
      spec: { restartPolicy: "Never", containers: [{ ...sh("main", "echo pulled"), image: "busybox:stuck" }] },
    });
    await until(
      "ImagePullBackOff",
      () => pod(c, ns, "stuck"),
      (p) => p.status.containerStatuses?.[0]?.state?.waiting?.reason === "ImagePullBackOff",
    );
    c.setImagePullable("busybox:stuck", true);
    await until(
      "pulled and run",
      () => pod(c, ns, "stuck"),
      (p) => p.status.phase === "Succeeded",
    );

    await kube(c, "POST", `/api/v1/namespaces/${ns}/pods`, {
      metadata: { name: "invalid" },
      spec: { restartPolicy: "Never", containers: [{ ...sh("main", "true"), image: "Not A//Valid:Image" }] },
    });
    const inv = await until(
      "InvalidImageName",
      () => pod(c, ns, "invalid"),
      (p) => p.status.containerStatuses?.[0]?.state?.waiting?.reason === "InvalidImageName",
    );
    assert.match(inv.status.containerStatuses[0].state.waiting.message, /invalid reference format/);
    const del = await kube(c, "DELETE", `/api/v1/namespaces/${ns}/pods/invalid`);
    assert.equal(del.status, 200);
    await until(
      "pod removal",
      () => kube(c, "GET", `/api/v1/namespaces/${ns}/pods/invalid`),
      (r) => r.status === 404,
    );
  });

  it("simulates OOMKilled, by the handle and by annotation", async () => {
    await kube(c, "POST", `/api/v1/namespaces/${ns}/pods`, {
      metadata: { name: "oom" },
      spec: { restartPolicy: "Never", containers: [sh("main", "echo started; sleep 30")] },
    });
    await until(
      "running",
      () => pod(c, ns, "oom"),
      (p) => p.status.containerStatuses?.[0]?.state?.running,
    );
    assert.equal(c.simulateOom(ns, "oom", "main"), true);
    const p = await until(
      "OOMKilled",
      () => pod(c, ns, "oom"),
      (x) => x.status.phase === "Failed",
    );
    const term = p.status.containerStatuses[0].state.terminated;
    assert.deepEqual([term.reason, term.exitCode], ["OOMKilled", 137]);

    await createJob(
      jobBody(
        "oom-job",
        { containers: [sh("worker", "sleep 30")] },
        {},
        { annotations: { [annotationOomKill]: "worker=50" } },
      ),
    );
    const j = await until(
      "Job failure",
      () => job("oom-job"),
      (x) => condition(x, "Failed"),
    );
    assert.equal(condition(j, "Failed").reason, "BackoffLimitExceeded");
    const jp = await jobPod(c, ns, "oom-job");
    assert.equal(jp.status.containerStatuses[0].state.terminated.reason, "OOMKilled");
  });

  it("simulates node-pressure eviction and serves the Eviction API", async () => {
    await createJob(jobBody("evicted", { containers: [sh("main", "sleep 30")] }));
    const running = await jobPod(c, ns, "evicted", (p) => p.status.phase === "Running");
    c.evict(ns, running.metadata.name);
    const p = await until(
      "Evicted",
      () => pod(c, ns, running.metadata.name),
      (x) => x.status.phase === "Failed",
    );
    assert.equal(p.status.reason, "Evicted");
    const dt = p.status.conditions.find((x: any) => x.type === "DisruptionTarget");
    assert.deepEqual([dt.status, dt.reason], ["True", "TerminationByKubelet"]);
    await until(
      "Job failure",
      () => job("evicted"),
      (x) => condition(x, "Failed"),
    );

    await kube(c, "POST", `/api/v1/namespaces/${ns}/pods`, {
      metadata: { name: "api-evicted" },
      spec: { restartPolicy: "Never", terminationGracePeriodSeconds: 1, containers: [sh("main", "sleep 30")] },
    });
    await until(
      "running",
      () => pod(c, ns, "api-evicted"),
      (x) => x.status.phase === "Running",
    );
    const ev = await kube(c, "POST", `/api/v1/namespaces/${ns}/pods/api-evicted/eviction`, {
      apiVersion: "policy/v1",
      kind: "Eviction",
      metadata: { name: "api-evicted", namespace: ns },
    });
    assert.equal(ev.status, 201);
    const terminating = await pod(c, ns, "api-evicted");
    assert.ok(terminating.metadata.deletionTimestamp);
    assert.equal(
      terminating.status.conditions.find((x: any) => x.type === "DisruptionTarget").reason,
      "EvictionByEvictionAPI",
    );
    await until(
      "pod removal",
      () => kube(c, "GET", `/api/v1/namespaces/${ns}/pods/api-evicted`),
      (r) => r.status === 404,
    );
  });

  it("a deleted Job pod counts as failed at once by default (backoffLimit 0: no second pod); under podReplacementPolicy Failed only once it has failed", async () => {
    const lingering = {
      terminationGracePeriodSeconds: 2,
      containers: [sh("main", "trap '' TERM; echo trapped; while true; do sleep 0.05; done")],
    };
    // Starts the Job, deletes its running pod and returns the watch of its pods (from before the deletion).
    const deleteFirst = async (name: string, spec: Record<string, unknown>, podSpec = lingering) => {
      await createJob(jobBody(name, podSpec, spec));
      const w = await watch(
        c,
        `/api/v1/namespaces/${ns}/pods?watch=true&labelSelector=${encodeURIComponent(`job-name=${name}`)}`,
      );
      const first = (await jobPod(c, ns, name, (p) => p.status.phase === "Running")).metadata.name as string;
      // Running comes when the process starts: on a busy machine the shell may not have set its
      // trap yet, and a SIGTERM then ends the pod before anything could replace it.
      await until(
        "the pod's trap of SIGTERM",
        () => kube(c, "GET", `/api/v1/namespaces/${ns}/pods/${first}/log`),
        (r) => String(r.body).includes("trapped"),
      );
      assert.equal((await kube(c, "DELETE", `/api/v1/namespaces/${ns}/pods/${first}`)).status, 200);
      return { w, first };
    };
    const at = (w: { events: { type: string; object: any }[] }, pred: (e: { type: string; object: any }) => boolean) =>
      w.events.findIndex(pred);

    // backoffLimit 0: the terminating pod is the Job's failure; nothing replaces it.
    // A longer grace here: the pod must still be terminating when the test reads it, however busy the machine.
    const none = await deleteFirst("deleted-no-retry", {}, { ...lingering, terminationGracePeriodSeconds: 10 });
    const target = await until(
      "FailureTarget",
      () => job("deleted-no-retry"),
      (x) => condition(x, "FailureTarget"),
    );
    assert.equal(target.status.failed, 1);
    assert.ok((await pod(c, ns, none.first)).metadata.deletionTimestamp, "counted failed while still terminating");
    await none.w.waitFor((e) => e.type === "DELETED" && e.object.metadata.name === none.first, 30_000);
    await until(
      "Job failure",
      () => job("deleted-no-retry"),
      (x) => condition(x, "Failed"),
    );
    assert.deepEqual(
      none.w.events.filter((e) => e.type === "ADDED").map((e) => e.object.metadata.name),
      [none.first],
      "no second pod",
    );
    none.w.close();

    // backoffLimit 1, the default policy: the second pod comes while the first still terminates.
    // The longer grace again: the replacement must come inside it, and a busy controller can take seconds.
    const eager = await deleteFirst(
      "replaced-eagerly",
      { backoffLimit: 1 },
      { ...lingering, terminationGracePeriodSeconds: 10 },
    );
    await eager.w.waitFor((e) => e.type === "ADDED" && e.object.metadata.name !== eager.first);
    await eager.w.waitFor((e) => e.type === "DELETED" && e.object.metadata.name === eager.first, 30_000);
    assert.ok(
      at(eager.w, (e) => e.type === "ADDED" && e.object.metadata.name !== eager.first) <
        at(eager.w, (e) => e.type === "DELETED" && e.object.metadata.name === eager.first),
    );
    eager.w.close();

    // backoffLimit 1, Failed: the second pod only once the first has reached Failed.
    const patient = await deleteFirst("replaced-when-failed", { backoffLimit: 1, podReplacementPolicy: "Failed" });
    await patient.w.waitFor((e) => e.type === "ADDED" && e.object.metadata.name !== patient.first, 15_000);
    const second = at(patient.w, (e) => e.type === "ADDED" && e.object.metadata.name !== patient.first);
    const firstBefore = patient.w.events
      .slice(0, second)
      .filter((e) => e.object.metadata.name === patient.first)
      .at(-1);
    assert.equal(firstBefore?.object.status.phase, "Failed", "no pod replaced the terminating one");
    patient.w.close();

    const bad = await kube(
      c,
      "POST",
      `/apis/batch/v1/namespaces/${ns}/jobs`,
      jobBody("bad-replacement", lingering, { podReplacementPolicy: "Sometimes" }),
    );
    assert.equal(bad.status, 422);
    assert.match(
      bad.body.message,
      /spec\.podReplacementPolicy: Unsupported value: "Sometimes": supported values: "Failed", "TerminatingOrFailed"/,
    );
  });

  it("stops a deleted pod with SIGTERM, and SIGKILL after the grace period", async () => {
    await kube(c, "POST", `/api/v1/namespaces/${ns}/pods`, {
      metadata: { name: "graceful" },
      spec: {
        restartPolicy: "Never",
        terminationGracePeriodSeconds: 1,
        containers: [
          sh("polite", "trap 'echo bye; exit 0' TERM; echo ready; while true; do sleep 0.05; done"),
          sh("stubborn", "trap '' TERM; echo ready; while true; do sleep 0.05; done"),
        ],
      },
    });
    // Running is not enough: on a busy machine a SIGTERM can reach a shell before it has set its trap.
    for (const container of ["polite", "stubborn"])
      await until(
        `${container} to have set its trap`,
        () => kube(c, "GET", `/api/v1/namespaces/${ns}/pods/graceful/log?container=${container}`),
        (r) => r.status === 200 && String(r.body).includes("ready"),
      );
    const follow = kube(c, "GET", `/api/v1/namespaces/${ns}/pods/graceful/log?container=polite&follow=true`);
    const w = await watch(c, `/api/v1/namespaces/${ns}/pods?watch=true&fieldSelector=metadata.name%3Dgraceful`);
    const started = Date.now();
    const del = await kube(c, "DELETE", `/api/v1/namespaces/${ns}/pods/graceful`);
    assert.equal(del.body.metadata.deletionGracePeriodSeconds, 1);
    const gone = await w.waitFor((e) => e.type === "DELETED", 5000);
    w.close();
    assert.ok(Date.now() - started >= 900, "the stubborn container is killed only after the grace period");
    assert.equal((await follow).body, "ready\nbye\n");
    assert.equal(gone.object.status.phase, "Failed");
    const byName = Object.fromEntries(
      gone.object.status.containerStatuses.map((s: any) => [s.name, s.state.terminated?.exitCode]),
    );
    assert.deepEqual(byName, { polite: 0, stubborn: 137 });
  });
});
