// B1: on a single-stack IPv6 cluster the kubelet probes http://[podIP]:port. The test cluster
// in IPv6 mode gives pods the address ::1 and probes it, so a server bound to IPv4 only is
// refused here as it would be there; every long-running drover process must pass.
import { after, before, describe, it } from "node:test";
import assert from "node:assert/strict";
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { droverBin, freePort } from "../support/processes.js";
import { fastTimings, freshNamespace, kube, pod, startTestCluster, until, type TestCluster } from "./cluster.js";
import { nodeWorkerEnv } from "./agents.js";

const node = process.execPath;

describe("IPv6 cluster: probes of the pod IP", () => {
  let c: TestCluster;
  let ns: string;
  let home: string;
  before(async () => {
    c = await startTestCluster({ ipFamily: "IPv6", hostPaths: "real", timings: { ...fastTimings, probeSecondMs: 50 } });
    ns = await freshNamespace(c, "ipv6");
    home = mkdtempSync(join(tmpdir(), "drover-ipv6-home-"));
  });
  after(async () => {
    await c.close();
    rmSync(home, { recursive: true, force: true });
    assert.deepEqual(c.errors, []);
  });

  const createPod = async (name: string, containers: unknown[]) => {
    const r = await kube(c, "POST", `/api/v1/namespaces/${ns}/pods`, {
      metadata: { name },
      spec: { terminationGracePeriodSeconds: 1, containers },
    });
    assert.equal(r.status, 201, JSON.stringify(r.body));
  };
  const ready = (p: any) => (p?.status?.conditions ?? []).find((x: any) => x.type === "Ready")?.status === "True";
  const probeFailures = async (name: string) =>
    (
      (await kube(c, "GET", `/api/v1/namespaces/${ns}/events?fieldSelector=involvedObject.name%3D${name}`)).body
        .items as any[]
    )
      .filter((e) => e.reason === "Unhealthy")
      .map((e) => ({ message: String(e.message), count: Number(e.count) }));
  const answers = async (url: string) => {
    try {
      // eslint-disable-next-line no-restricted-globals -- a pod's own port, not the Drover server
      return (await fetch(url)).status === 200;
    } catch {
      return false;
    }
  };
  /**
   * The probe messages of `name` once its server answers on 127.0.0.1:`port` and a probe has
   * failed after that: a refusal then is the address family, not a server still starting.
   */
  const failsWhileServing = async (name: string, port: number, path: string) => {
    await until(
      `${name} to answer on 127.0.0.1`,
      () => answers(`http://127.0.0.1:${port}${path}`),
      (ok) => ok,
      30_000,
    );
    const total = (fs: { count: number }[]) => fs.reduce((n, f) => n + f.count, 0);
    const seen = total(await probeFailures(name));
    const failures = await until(
      `a probe of ${name} to fail while it serves`,
      () => probeFailures(name),
      (fs) => total(fs) > seen,
      30_000,
    );
    return failures.map((f) => f.message);
  };
  const readiness = (port: number, path = "/") => ({ httpGet: { path, port }, periodSeconds: 1, failureThreshold: 1 });
  const web = (name: string, port: number, host: string) => ({
    name,
    image: "web:1",
    command: [node, "-e", `require("http").createServer((q, s) => s.end("ok")).listen(${port}, "${host}")`],
    readinessProbe: readiness(port),
    env: [{ name: "POD_IP", valueFrom: { fieldRef: { fieldPath: "status.podIP" } } }],
  });

  it("test cluster: pods get ::1, probes connect to it; a server on 0.0.0.0 is refused, one on :: is Ready", async () => {
    const v4 = await freePort();
    const dual = await freePort();
    await createPod("v4-only", [web("web", v4, "0.0.0.0")]);
    await createPod("dual-stack", [web("web", dual, "::")]);
    const p = await until("the dual-stack pod to be Ready", () => pod(c, ns, "dual-stack"), ready, 20_000);
    assert.equal(p.status.podIP, "::1");
    assert.deepEqual(p.status.podIPs, [{ ip: "::1" }]);
    const failures = await failsWhileServing("v4-only", v4, "/");
    assert.equal(
      failures[0],
      `Readiness probe failed: Get "http://[::1]:${v4}/": dial tcp [::1]:${v4}: connect: connection refused`,
    );
    assert.equal(ready(await pod(c, ns, "v4-only")), false);
  });

  // Runs `drover agent node-worker` as the container of a pod whose kubelet probes its health port.
  const nodeWorkerPod = async (name: string, port: number, env: Record<string, string> = {}) => {
    const vars = {
      KUBECONFIG: c.kubeconfigPath,
      DROVER_AGENT_KUBERNETES_NAMESPACE: ns,
      DROVER_AGENT_NODE_HOME: join(home, name),
      DROVER_AGENT_LOG_FORMAT: "plain",
      DROVER_AGENT_HEALTH_PORT: String(port),
      ...nodeWorkerEnv(name),
      ...env,
    };
    await createPod(name, [
      {
        name: "worker",
        image: "ghcr.io/drover-dev/drover:test",
        command: [node, droverBin, "agent", "node-worker"],
        env: Object.entries(vars).map(([k, v]) => ({ name: k, value: v })),
        // Liveness tolerates a slow start (a probe second is 50 ms here): restarts would hide the result.
        livenessProbe: { httpGet: { path: "/healthz", port }, periodSeconds: 1, failureThreshold: 1200 },
        readinessProbe: readiness(port, "/readyz"),
      },
    ]);
  };

  it("agent: a node worker's health port passes probes of the pod's IPv6 address; bound to 127.0.0.1 by setting, it fails them", async () => {
    const port = await freePort();
    await nodeWorkerPod("node-worker", port);
    const p = await until("the node worker pod to be Ready", () => pod(c, ns, "node-worker"), ready, 30_000).catch(
      async (e) => {
        console.error(
          JSON.stringify((await pod(c, ns, "node-worker")).status),
          (await kube(c, "GET", `/api/v1/namespaces/${ns}/pods/node-worker/log`)).body,
          await probeFailures("node-worker"),
        );
        throw e;
      },
    );
    assert.equal(p.status.containerStatuses[0].restartCount, 0);

    const v4Port = await freePort();
    await nodeWorkerPod("node-worker-v4", v4Port, { DROVER_AGENT_HEALTH_ADDRESS: "127.0.0.1" });
    const failures = await failsWhileServing("node-worker-v4", v4Port, "/healthz");
    assert.match(failures[0] ?? "", new RegExp(`dial tcp \\[::1\\]:${v4Port}: connect: connection refused$`));
    assert.equal(ready(await pod(c, ns, "node-worker-v4")), false);
  });
});
