// What real clusters refuse and the test cluster now refuses too, with the API server's (or
// OpenShift's) words: Deployment strategy validation (rollingUpdate beside Recreate,
// IntOrString surge/unavailability, not both zero), ResourceQuota on compute resources (a
// container without limits.cpu is refused; the Job controller records FailedCreate; over-quota
// pods are refused), and restricted-v2's UID range (out-of-range runAsUser or fsGroup refused;
// pods without them get the range's first UID, and their processes really run as it).
import { after, before, describe, it } from "node:test";
import assert from "node:assert/strict";
import { fastTimings, freshNamespace, kube, pod, startTestCluster, until, type TestCluster } from "./cluster.js";

const sh = (name: string, script: string, extra: Record<string, unknown> = {}) => ({
  name,
  image: "busybox:1.36",
  command: ["sh", "-c", script],
  ...extra,
});
const asRoot = process.getuid?.() === 0;

describe("test cluster refusals of real clusters", () => {
  let c: TestCluster;
  before(async () => {
    c = await startTestCluster({ timings: fastTimings });
  });
  after(async () => {
    await c.close();
    assert.deepEqual(c.errors, []);
  });

  const deployment = (name: string, strategy: unknown) => ({
    metadata: { name },
    spec: {
      replicas: 0,
      selector: { matchLabels: { app: name } },
      ...(strategy === undefined ? {} : { strategy }),
      template: { metadata: { labels: { app: name } }, spec: { containers: [sh("main", "sleep 1")] } },
    },
  });

  it("Deployment strategy: defaults RollingUpdate 25%/25%, forbids rollingUpdate beside Recreate, validates IntOrString", async () => {
    const ns = await freshNamespace(c, "strategy");
    const path = `/apis/apps/v1/namespaces/${ns}/deployments`;
    const create = (name: string, strategy: unknown) => kube(c, "POST", path, deployment(name, strategy));

    const plain = await create("plain", undefined);
    assert.equal(plain.status, 201, JSON.stringify(plain.body));
    assert.deepEqual(plain.body.spec.strategy, {
      type: "RollingUpdate",
      rollingUpdate: { maxUnavailable: "25%", maxSurge: "25%" },
    });

    const both = await create("both", { type: "Recreate", rollingUpdate: { maxSurge: "25%", maxUnavailable: "50%" } });
    assert.equal(both.status, 422);
    assert.equal(
      both.body.message,
      `Deployment.apps "both" is invalid: spec.strategy.rollingUpdate: Forbidden: may not be specified when strategy \`type\` is 'Recreate'`,
    );
    // The trap on a live object: patching only `type` leaves the defaulted block in place.
    const patched = await kube(
      c,
      "PATCH",
      `${path}/plain`,
      { spec: { strategy: { type: "Recreate" } } },
      "application/merge-patch+json",
    );
    assert.equal(patched.status, 422);
    assert.match(
      patched.body.message,
      /spec\.strategy\.rollingUpdate: Forbidden: may not be specified when strategy `type` is 'Recreate'/,
    );
    const replaced = await kube(
      c,
      "PATCH",
      `${path}/plain`,
      { spec: { strategy: { type: "Recreate", rollingUpdate: null } } },
      "application/merge-patch+json",
    );
    assert.equal(replaced.status, 200, JSON.stringify(replaced.body));
    assert.equal((await create("recreate", { type: "Recreate" })).status, 201);

    assert.equal(
      (await create("ints", { type: "RollingUpdate", rollingUpdate: { maxSurge: 1, maxUnavailable: 0 } })).status,
      201,
      "integers are IntOrString",
    );
    assert.equal(
      (await create("surge", { type: "RollingUpdate", rollingUpdate: { maxSurge: "150%", maxUnavailable: 0 } })).status,
      201,
      "a surge may exceed 100%",
    );
    const refused = async (name: string, rollingUpdate: unknown) => {
      const r = await create(name, { type: "RollingUpdate", rollingUpdate });
      assert.equal(r.status, 422, name);
      return r.body.message as string;
    };
    assert.equal(
      await refused("zeros", { maxSurge: 0, maxUnavailable: "0%" }),
      'Deployment.apps "zeros" is invalid: spec.strategy.rollingUpdate.maxUnavailable: Invalid value: "0%": may not be 0 when `maxSurge` is 0',
    );
    assert.match(
      await refused("word", { maxSurge: "1", maxUnavailable: 1 }),
      /spec\.strategy\.rollingUpdate\.maxSurge: Invalid value: "1": a valid percent string must be a numeric string followed by an ending '%'/,
    );
    assert.match(
      await refused("over", { maxSurge: 1, maxUnavailable: "150%" }),
      /spec\.strategy\.rollingUpdate\.maxUnavailable: Invalid value: "150%": must not be greater than 100%/,
    );
    assert.match(
      await refused("negative", { maxSurge: -1, maxUnavailable: 1 }),
      /spec\.strategy\.rollingUpdate\.maxSurge: Invalid value: -1: must be greater than or equal to 0/,
    );
    const odd = await create("odd", { type: "BlueGreen" });
    assert.equal(odd.status, 422);
    assert.match(
      odd.body.message,
      /spec\.strategy\.type: Unsupported value: "BlueGreen": supported values: "Recreate", "RollingUpdate"/,
    );
  });

  it("ResourceQuota on limits.cpu/limits.memory/requests: containers without them refused, Job FailedCreate, over-quota refused", async () => {
    const ns = await freshNamespace(c, "quota");
    const quota = {
      metadata: { name: "compute" },
      spec: { hard: { "limits.cpu": "2", "limits.memory": "1Gi", "requests.cpu": "1", pods: "3" } },
    };
    assert.equal((await kube(c, "POST", `/api/v1/namespaces/${ns}/resourcequotas`, quota)).status, 201);
    const create = (name: string, containers: unknown[], initContainers: unknown[] = []) =>
      kube(c, "POST", `/api/v1/namespaces/${ns}/pods`, {
        metadata: { name },
        spec: { restartPolicy: "Never", initContainers, containers },
      });
    const sized = (cpu: string, memory = "256Mi") => ({
      resources: { requests: { cpu: "100m" }, limits: { cpu, memory } },
    });

    const bare = await create("bare", [
      sh("worker", "true", { resources: { limits: { memory: "128Mi" } } }),
      sh("runner", "true"),
    ]);
    assert.equal(bare.status, 403);
    assert.equal(
      bare.body.message,
      'pods "bare" is forbidden: failed quota: compute: must specify limits.cpu for: runner,worker; limits.memory for: runner; requests.cpu for: runner,worker',
    );
    const initBare = await create(
      "init-bare",
      [sh("main", "true", sized("1"))],
      [sh("prep", "true", { resources: { limits: { memory: "64Mi" } } })],
    );
    assert.match(
      initBare.body.message,
      /must specify limits\.cpu for: prep; requests\.cpu for: prep$/,
      "init containers count too",
    );

    assert.equal((await create("fits", [sh("main", "sleep 30", sized("1500m"))])).status, 201);
    const over = await create("over", [sh("main", "true", sized("1"))]);
    assert.equal(over.status, 403);
    assert.equal(
      over.body.message,
      'pods "over" is forbidden: exceeded quota: compute, requested: limits.cpu=1, used: limits.cpu=1500m, limited: limits.cpu=2',
    );
    assert.equal(
      (await create("small", [sh("main", "true", sized("500m"))])).status,
      201,
      "up to the limit is allowed",
    );

    // The Job controller records the refusal as it does any other.
    const job = {
      metadata: { name: "run" },
      spec: {
        backoffLimit: 0,
        template: {
          spec: {
            restartPolicy: "Never",
            containers: [sh("runner", "true", { resources: { limits: { memory: "64Mi" } } })],
          },
        },
      },
    };
    assert.equal((await kube(c, "POST", `/apis/batch/v1/namespaces/${ns}/jobs`, job)).status, 201);
    const events = await until(
      "FailedCreate",
      async () =>
        (await kube(c, "GET", `/api/v1/namespaces/${ns}/events?fieldSelector=reason%3DFailedCreate`)).body
          .items as any[],
      (evs) => evs.length > 0,
    );
    assert.match(
      events[0].message,
      /^Error creating: pods "run-[a-z0-9]+" is forbidden: failed quota: compute: must specify limits\.cpu for: runner; requests\.cpu for: runner$/,
    );
    assert.equal(events[0].involvedObject.name, "run");
  });

  it("restricted-v2 UID range: out-of-range runAsUser/fsGroup refused with OpenShift's message; unset ones assigned from the range", async () => {
    const ns = await freshNamespace(c, "scc");
    const annotate = await kube(
      c,
      "PATCH",
      `/api/v1/namespaces/${ns}`,
      {
        metadata: {
          annotations: {
            "openshift.io/sa.scc.uid-range": "1000680000/10000",
            "openshift.io/sa.scc.supplemental-groups": "1000680000/10000",
          },
        },
      },
      "application/merge-patch+json",
    );
    assert.equal(annotate.status, 200);
    const create = (name: string, spec: Record<string, unknown>) =>
      kube(c, "POST", `/api/v1/namespaces/${ns}/pods`, {
        metadata: { name },
        spec: { restartPolicy: "Never", terminationGracePeriodSeconds: 1, ...spec },
      });

    const fixed = await create("fixed", {
      securityContext: { runAsNonRoot: true, fsGroup: 1000 },
      initContainers: [sh("init", "true")],
      containers: [sh("main", "true", { securityContext: { runAsUser: 1000, runAsGroup: 1000 } })],
    });
    assert.equal(fixed.status, 403);
    assert.equal(
      fixed.body.message,
      'pods "fixed" is forbidden: unable to validate against any security context constraint: [provider restricted-v2: .spec.securityContext.fsGroup: Invalid value: []int64{1000}: 1000 is not an allowed group, provider restricted-v2: .containers[0].runAsUser: Invalid value: 1000: must be in the ranges: [1000680000, 1000689999]]',
    );
    const podLevel = await create("pod-level", { securityContext: { runAsUser: 0 }, containers: [sh("main", "true")] });
    assert.match(
      podLevel.body.message,
      /\.containers\[0\]\.runAsUser: Invalid value: 0: must be in the ranges: \[1000680000, 1000689999\]/,
      "a pod-level UID is each container's",
    );
    assert.equal(
      (
        await create("inside", {
          securityContext: { fsGroup: 1000685000 },
          containers: [sh("main", "true", { securityContext: { runAsUser: 1000689999 } })],
        })
      ).status,
      201,
    );

    // No UID, no fsGroup: the range's first, as a real project assigns them; the process runs as it.
    const script = "id -u; stat -c '%g' /scratch; touch /scratch/x && echo wrote";
    const arbitrary = await create("arbitrary", {
      securityContext: { runAsNonRoot: true },
      volumes: [{ name: "scratch", emptyDir: {} }],
      containers: [
        sh("main", script, {
          securityContext: { allowPrivilegeEscalation: false },
          volumeMounts: [{ name: "scratch", mountPath: "/scratch" }],
        }),
      ],
    });
    assert.equal(arbitrary.status, 201, JSON.stringify(arbitrary.body));
    assert.equal(arbitrary.body.spec.containers[0].securityContext.runAsUser, 1000680000);
    assert.equal(arbitrary.body.spec.securityContext.fsGroup, 1000680000);
    if (asRoot) {
      const done = await until(
        "arbitrary to finish",
        () => pod(c, ns, "arbitrary"),
        (p) => ["Succeeded", "Failed"].includes(p?.status?.phase),
        30_000,
      );
      const log = (await kube(c, "GET", `/api/v1/namespaces/${ns}/pods/arbitrary/log`)).body as string;
      assert.equal(log, "1000680000\n1000680000\nwrote\n", JSON.stringify(done.status));
    }

    // A namespace without the annotation is not governed.
    const other = await freshNamespace(c, "plain");
    assert.equal(
      (
        await kube(c, "POST", `/api/v1/namespaces/${other}/pods`, {
          metadata: { name: "fixed" },
          spec: {
            securityContext: { fsGroup: 1000 },
            containers: [sh("main", "true", { securityContext: { runAsUser: 1000 } })],
          },
        })
      ).status,
      201,
    );
  });
});
