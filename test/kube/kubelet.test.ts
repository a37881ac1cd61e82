// The test cluster's kubelet refuses and restarts as a real one does: probes (httpGet,
// tcpSocket, exec) drive Ready and restarts with CrashLoopBackOff; containers run as
// their securityContext's user with fsGroup on volumes; Secret volumes are root-owned
// with their modes; the ServiceAccount token is mounted only when automount is on;
// hostPath types are checked; readOnlyRootFilesystem is read-only; emptyDir sizeLimit evicts.
import { after, before, describe, it } from "node:test";
import assert from "node:assert/strict";
import { mkdirSync } from "node:fs";
import { createServer as createHttpServer } from "node:http";
import { createServer, type Server } from "node:net";
import { fastTimings, freshNamespace, kube, pod, startTestCluster, until, type TestCluster } from "./cluster.js";

const sh = (name: string, script: string, extra: Record<string, unknown> = {}) => ({
  name,
  image: "busybox:1.36",
  command: ["sh", "-c", script],
  ...extra,
});
const node = process.execPath;
const asRoot = process.getuid?.() === 0;

describe("test cluster kubelet", () => {
  let c: TestCluster;
  let ns: string;
  before(async () => {
    // One probe "second" is 20 ms, so a chart's probe settings play out quickly.
    c = await startTestCluster({ timings: { ...fastTimings, probeSecondMs: 20, evictionCheckMs: 50 } });
    ns = await freshNamespace(c, "kubelet");
  });
  after(async () => {
    await c.close();
    assert.deepEqual(c.errors, []);
  });

  const createPod = async (name: string, spec: Record<string, unknown>, namespace = ns) => {
    const r = await kube(c, "POST", `/api/v1/namespaces/${namespace}/pods`, {
      metadata: { name },
      spec: { terminationGracePeriodSeconds: 1, ...spec },
    });
    assert.equal(r.status, 201, JSON.stringify(r.body));
    return r.body;
  };
  const events = async (name: string) =>
    (await kube(c, "GET", `/api/v1/namespaces/${ns}/events?fieldSelector=involvedObject.name%3D${name}`)).body
      .items as any[];
  const ready = (p: any) => (p?.status?.conditions ?? []).find((x: any) => x.type === "Ready")?.status === "True";
  const log = async (name: string) =>
    (await kube(c, "GET", `/api/v1/namespaces/${ns}/pods/${name}/log`)).body as string;
  const finished = (name: string) =>
    until(
      `${name} to finish`,
      () => pod(c, ns, name),
      (p) => ["Succeeded", "Failed"].includes(p?.status?.phase),
    );

  it("restarts a container whose httpGet liveness probe fails, with CrashLoopBackOff and restartCount", async () => {
    await createPod("liveness", {
      containers: [
        sh("main", "exec sleep 1000", {
          livenessProbe: {
            httpGet: { path: "/healthz", port: 1 },
            initialDelaySeconds: 1,
            periodSeconds: 1,
            failureThreshold: 2,
          },
        }),
      ],
    });
    const p = await until(
      "two restarts",
      () => pod(c, ns, "liveness"),
      (x) => x?.status?.containerStatuses?.[0]?.restartCount >= 2,
      20_000,
    );
    const cs = p.status.containerStatuses[0];
    assert.equal(cs.lastState.terminated.reason, "Error");
    assert.equal(p.status.phase, "Running");
    const evs = await events("liveness");
    assert.ok(
      evs.some(
        (e) =>
          e.reason === "Unhealthy" &&
          /^Liveness probe failed: Get "http:\/\/127\.0\.0\.1:1\/healthz": dial tcp 127\.0\.0\.1:1: connect: connection refused$/.test(
            e.message,
          ),
      ),
      JSON.stringify(evs),
    );
    assert.ok(
      evs.some(
        (e) => e.reason === "Killing" && e.message === "Container main failed liveness probe, will be restarted",
      ),
    );
    assert.ok(evs.some((e) => e.reason === "BackOff"));
    await until(
      "CrashLoopBackOff between restarts",
      () => pod(c, ns, "liveness"),
      (x) => x?.status?.containerStatuses?.[0]?.state?.waiting?.reason === "CrashLoopBackOff",
      20_000,
    );
  });

  it("keeps a container whose httpGet and exec probes pass running and Ready; restartPolicy Never ends it on liveness failure", async () => {
    const port = 30000 + Math.floor(Math.random() * 20000);
    const server = `require("http").createServer((q, s) => { s.statusCode = q.url === "/healthz" ? 200 : 500; s.end(); }).listen(${port}, "127.0.0.1")`;
    await createPod("healthy", {
      containers: [
        {
          name: "web",
          image: "web:1",
          command: [node, "-e", server],
          ports: [{ name: "http", containerPort: port }],
          startupProbe: {
            exec: {
              command: [
                node,
                "-e",
                `require("net").connect(${port}, "127.0.0.1").on("connect", () => process.exit(0)).on("error", () => process.exit(1))`,
              ],
            },
            periodSeconds: 1,
            failureThreshold: 200,
          },
          livenessProbe: { httpGet: { path: "/healthz", port: "http" }, periodSeconds: 1 },
          readinessProbe: { httpGet: { path: "/healthz", port }, periodSeconds: 1 },
        },
      ],
    });
    const p = await until("Ready", () => pod(c, ns, "healthy"), ready, 20_000);
    assert.equal(p.status.containerStatuses[0].started, true);
    // Six more periods: still the first container.
    await until(
      "more probe periods",
      async () => (await events("healthy")).length,
      () => true,
    );
    await new Promise((r) => setTimeout(r, 6 * 20));
    assert.equal((await pod(c, ns, "healthy")).status.containerStatuses[0].restartCount, 0);

    await createPod("never", {
      restartPolicy: "Never",
      containers: [
        sh("main", "exec sleep 1000", {
          livenessProbe: { exec: { command: ["false"] }, periodSeconds: 1, failureThreshold: 1 },
        }),
      ],
    });
    const done = await finished("never");
    assert.equal(done.status.phase, "Failed");
    assert.equal(done.status.containerStatuses[0].restartCount, 0);
  });

  it("derives Ready from a tcpSocket readiness probe, both ways, and kills on startup probe failure", async () => {
    const probe: Server = createServer((s) => s.destroy());
    await new Promise<void>((r) => probe.listen(0, "127.0.0.1", () => r()));
    const port = (probe.address() as { port: number }).port;
    await new Promise<void>((r) => probe.close(() => r()));
    await createPod("readiness", {
      containers: [
        sh("main", "exec sleep 1000", {
          readinessProbe: { tcpSocket: { port }, periodSeconds: 1, failureThreshold: 2 },
        }),
      ],
    });
    const notYet = await until(
      "running",
      () => pod(c, ns, "readiness"),
      (p) => p?.status?.phase === "Running",
    );
    assert.equal(ready(notYet), false);
    assert.equal(
      (notYet.status.conditions as any[]).find((x) => x.type === "ContainersReady").reason,
      "ContainersNotReady",
    );
    const listener = createServer((s) => s.destroy());
    await new Promise<void>((r) => listener.listen(port, "127.0.0.1", () => r()));
    await until("Ready once the port listens", () => pod(c, ns, "readiness"), ready);
    await new Promise<void>((r) => listener.close(() => r()));
    const unready = await until(
      "not Ready once it stops",
      () => pod(c, ns, "readiness"),
      (p) => !ready(p),
    );
    assert.equal(unready.status.containerStatuses[0].restartCount, 0, "readiness never restarts");

    await createPod("startup", {
      containers: [
        sh("main", "exec sleep 1000", {
          startupProbe: {
            exec: { command: ["sh", "-c", "echo not yet; exit 1"] },
            periodSeconds: 1,
            failureThreshold: 2,
          },
        }),
      ],
    });
    const restarted = await until(
      "restart after startup failure",
      () => pod(c, ns, "startup"),
      (p) => p?.status?.containerStatuses?.[0]?.restartCount >= 1,
    );
    assert.equal(restarted.status.containerStatuses[0].started, false);
    const evs = await events("startup");
    assert.ok(
      evs.some((e) => e.reason === "Unhealthy" && e.message === "Startup probe failed: not yet"),
      JSON.stringify(evs.map((e) => e.message)),
    );
    assert.ok(evs.some((e) => e.message === "Container main failed startup probe, will be restarted"));
  });

  it(
    "runs containers as runAsUser/runAsGroup with supplementalGroups and fsGroup; Secret files root-owned with their mode",
    { skip: !asRoot && "needs root to switch users" },
    async () => {
      assert.equal(
        (
          await kube(c, "POST", `/api/v1/namespaces/${ns}/secrets`, {
            metadata: { name: "job" },
            stringData: { token: "s3cret" },
          })
        ).status,
        201,
      );
      const secretVolume = { name: "job", secret: { secretName: "job", defaultMode: 0o400 } };
      const script =
        "id -u; id -g; id -G | tr ' ' '\\n' | sort -n | tr '\\n' ' '; echo; stat -c '%u %g %a' /job/token; cat /job/token 2>&1 && echo || echo unreadable; stat -c '%g %a' /scratch; touch /scratch/x && echo wrote";
      const spec = (fsGroup?: number) => ({
        restartPolicy: "Never",
        securityContext: {
          runAsUser: 1000,
          runAsGroup: 3000,
          supplementalGroups: [4000],
          ...(fsGroup ? { fsGroup } : {}),
        },
        volumes: [secretVolume, { name: "scratch", emptyDir: {} }],
        containers: [
          sh("main", script, {
            volumeMounts: [
              { name: "job", mountPath: "/job" },
              { name: "scratch", mountPath: "/scratch" },
            ],
          }),
        ],
      });
      await createPod("fsgroup", spec(2000));
      await createPod("nofsgroup", spec());
      await finished("fsgroup");
      await finished("nofsgroup");
      assert.equal(await log("fsgroup"), "1000\n3000\n2000 3000 4000 \n0 2000 440\ns3cret\n2000 2777\nwrote\n");
      // The Pulumi job-mode defect: without fsGroup a UID-1000 worker cannot read its 0400 Secret.
      assert.equal(
        await log("nofsgroup"),
        "1000\n3000\n3000 4000 \n0 0 400\ncat: /job/token: Permission denied\nunreadable\n0 777\nwrote\n",
      );
    },
  );

  it("refuses runAsNonRoot without a non-root user: CreateContainerConfigError", async () => {
    await createPod("nonroot", { securityContext: { runAsNonRoot: true }, containers: [sh("main", "true")] });
    const p = await until(
      "config error",
      () => pod(c, ns, "nonroot"),
      (x) => x?.status?.containerStatuses?.[0]?.state?.waiting?.reason === "CreateContainerConfigError",
    );
    assert.match(
      p.status.containerStatuses[0].state.waiting.message,
      /^container has runAsNonRoot and image will run as root \(pod: "nonroot_/,
    );
  });

  it("mounts the ServiceAccount token at the standard path only when automount is on; a missing ServiceAccount is refused", async () => {
    assert.equal(
      (
        await kube(c, "POST", `/api/v1/namespaces/${ns}/serviceaccounts`, {
          metadata: { name: "quiet" },
          automountServiceAccountToken: false,
        })
      ).status,
      201,
    );
    const dir = "/var/run/secrets/kubernetes.io/serviceaccount";
    const script = `cat ${dir}/namespace; echo; test -s ${dir}/ca.crt && echo ca; cat ${dir}/token > /out/token 2>/dev/null || echo no-token`;
    const out = { name: "out", emptyDir: {} };
    await createPod("token", {
      restartPolicy: "Never",
      volumes: [out],
      containers: [sh("main", script, { volumeMounts: [{ name: "out", mountPath: "/out" }] })],
    });
    await createPod("notoken", {
      restartPolicy: "Never",
      serviceAccountName: "quiet",
      volumes: [out],
      containers: [sh("main", script, { volumeMounts: [{ name: "out", mountPath: "/out" }] })],
    });
    await finished("token");
    await finished("notoken");
    const withToken = await pod(c, ns, "token");
    assert.ok((withToken.spec.volumes as any[]).some((v) => /^kube-api-access-[a-z0-9]{5}$/.test(v.name)));
    if (c.isolation === "namespace") {
      assert.equal(await log("token"), `${ns}\nca\n`);
      assert.match(await log("notoken"), /no-token\n$/);
    }
    const missing = await kube(c, "POST", `/api/v1/namespaces/${ns}/pods`, {
      metadata: { name: "nosa" },
      spec: { serviceAccountName: "absent", containers: [sh("main", "true")] },
    });
    assert.equal(missing.status, 403);
    assert.equal(
      missing.body.message,
      `pods "nosa" is forbidden: error looking up service account ${ns}/absent: serviceaccount "absent" not found`,
    );
  });

  it(
    "checks hostPath types: Directory must exist; DirectoryOrCreate creates it root-owned 0755",
    { skip: !asRoot && "needs root to switch users" },
    async () => {
      await createPod("hostdir", {
        restartPolicy: "Never",
        volumes: [{ name: "h", hostPath: { path: "/var/lib/ktc-missing", type: "Directory" } }],
        containers: [sh("main", "true", { volumeMounts: [{ name: "h", mountPath: "/h" }] })],
      });
      await until(
        "FailedMount",
        () => events("hostdir"),
        (evs) =>
          evs.some(
            (e) =>
              e.reason === "FailedMount" &&
              /hostPath type check failed: \/var\/lib\/ktc-missing is not a directory/.test(e.message),
          ),
      );
      assert.equal((await pod(c, ns, "hostdir")).status.phase, "Pending");
      mkdirSync(c.hostPath("/var/lib/ktc-missing"), { recursive: true });
      await finished("hostdir");

      await createPod("hostcreate", {
        restartPolicy: "Never",
        securityContext: { runAsUser: 1000, fsGroup: 1000 },
        volumes: [{ name: "h", hostPath: { path: "/var/lib/ktc-data", type: "DirectoryOrCreate" } }],
        containers: [
          sh("main", "stat -c '%u %g %a' /h; touch /h/x 2>/dev/null && echo wrote || echo EACCES", {
            volumeMounts: [{ name: "h", mountPath: "/h" }],
          }),
        ],
      });
      await finished("hostcreate");
      // fsGroup does not apply to hostPath: the UID-1000 container cannot write (the agent-k8s node-worker defect).
      assert.equal(await log("hostcreate"), "0 0 755\nEACCES\n");
    },
  );

  it("evicts a pod whose emptyDir exceeds its sizeLimit", async () => {
    await createPod("bigdir", {
      volumes: [{ name: "scratch", emptyDir: { sizeLimit: "1Mi" } }],
      containers: [
        sh("main", "head -c 2000000 /dev/zero > /scratch/blob; exec sleep 1000", {
          volumeMounts: [{ name: "scratch", mountPath: "/scratch" }],
        }),
      ],
    });
    const p = await finished("bigdir");
    assert.deepEqual(
      [p.status.phase, p.status.reason, p.status.message],
      ["Failed", "Evicted", 'Usage of EmptyDir volume "scratch" exceeds the limit "1Mi". '],
    );
    assert.ok(
      (p.status.conditions as any[]).some((x) => x.type === "DisruptionTarget" && x.reason === "TerminationByKubelet"),
    );
  });

  it("readinessProbeSecondMs paces readiness alone: Ready follows health within its short period while liveness keeps probeSecondMs", async () => {
    // Probe seconds of a minute: were liveness scaled like readiness, its failing probe would kill
    // the container here; were readiness not, its second probe would come a minute after the first.
    const own = await startTestCluster({
      timings: { ...fastTimings, probeSecondMs: 60_000, readinessProbeSecondMs: 20 },
    });
    // A port of its own from the start (a random one could be another test's health port):
    // unhealthy until `healthy` flips.
    let healthy = false;
    const web = createHttpServer((_q, s) => {
      s.statusCode = healthy ? 200 : 503;
      s.end(healthy ? "ok" : "not yet");
    });
    await new Promise<void>((resolve) => web.listen(0, "127.0.0.1", resolve));
    const port = (web.address() as { port: number }).port;
    try {
      const space = await freshNamespace(own, "paced");
      const r = await kube(own, "POST", `/api/v1/namespaces/${space}/pods`, {
        metadata: { name: "paced" },
        spec: {
          terminationGracePeriodSeconds: 1,
          containers: [
            sh("main", "exec sleep 1000", {
              readinessProbe: { httpGet: { path: "/", port }, periodSeconds: 10 },
              livenessProbe: {
                exec: { command: ["false"] },
                initialDelaySeconds: 1,
                periodSeconds: 1,
                failureThreshold: 1,
              },
            }),
          ],
        },
      });
      assert.equal(r.status, 201, JSON.stringify(r.body));
      const get = () => pod(own, space, "paced");
      await until(
        "the first readiness probe to fail",
        async () =>
          (await kube(own, "GET", `/api/v1/namespaces/${space}/events?fieldSelector=involvedObject.name%3Dpaced`)).body
            .items as any[],
        (evs) => evs.some((e) => /^Readiness probe failed/.test(e.message)),
      );
      healthy = true;
      const p = await until("Ready once the port answers 200", get, ready, 10_000);
      assert.equal(p.status.containerStatuses[0].restartCount, 0, "liveness did not run at the readiness pace");
    } finally {
      web.close();
      await own.close();
    }
  });

  it(
    "makes the root filesystem read-only with readOnlyRootFilesystem; volumes stay writable",
    { skip: !asRoot && "needs mount namespaces" },
    async () => {
      await createPod("rofs", {
        restartPolicy: "Never",
        volumes: [{ name: "tmp", emptyDir: {} }],
        containers: [
          sh("main", "touch /etc/ktc-x 2>&1 || true; touch /opt/ktc-y 2>&1 || true; touch /tmp/ok && echo volume-ok", {
            securityContext: { readOnlyRootFilesystem: true },
            volumeMounts: [{ name: "tmp", mountPath: "/tmp" }],
          }),
        ],
      });
      await finished("rofs");
      assert.equal(
        await log("rofs"),
        "touch: cannot touch '/etc/ktc-x': Read-only file system\ntouch: cannot touch '/opt/ktc-y': Read-only file system\nvolume-ok\n",
      );
    },
  );
});
