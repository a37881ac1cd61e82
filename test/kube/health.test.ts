import assert from "node:assert/strict";
import { readFileSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { after, before, test } from "node:test";
import { runLog, startStack, writeConfig, type Stack } from "../support/stack.js";
import { droverBin, freePort, spawnDrover, type Proc } from "../support/processes.js";
import { startTcpProxy, type TcpProxy } from "../support/tcp-proxy.js";
import { eventually, fastTimings, startTestCluster, type TestCluster } from "./cluster.js";
import {
  controllerEnv,
  createAgentTask,
  execLoopPath,
  prepareNamespace,
  terraformRunner,
  workerImage,
} from "./agents.js";
import { routes } from "@drover/protocol";

// Every long-running drover process of the Kubernetes designs — the controller, a run pod's
// worker, a node's worker — serves /healthz, /readyz and /metrics. Readiness: registered (the
// controller) and its watches synced. Liveness holds while the Drover server or the API
// server is merely unreachable (cut here with a TCP proxy in front of each).

const ns = "drover-health";
let cluster: TestCluster;
let stack: Stack;
let serverProxy: TcpProxy;
let kubeProxy: TcpProxy;
let proxiedKubeconfig: string;
const procs: Proc[] = [];

async function probe(port: number, path: string): Promise<{ status: number; body: any; text: string }> {
  try {
    // eslint-disable-next-line no-restricted-globals -- the agent's health port, not the server
    const res = await fetch(`http://127.0.0.1:${port}${path}`);
    const text = await res.text();
    return { status: res.status, text, body: path === "/metrics" ? undefined : JSON.parse(text) };
  } catch {
    return { status: 0, text: "", body: undefined };
  }
}

function spawn(args: string[], env: Record<string, string>): Proc {
  const p = spawnDrover(args, {
    ...stack.baseEnv,
    DROVER_AGENT_LOG_FORMAT: "plain",
    DROVER_AGENT_KUBERNETES_NAMESPACE: ns,
    ...env,
  });
  procs.push(p);
  return p;
}

before(async () => {
  cluster = await startTestCluster({ timings: fastTimings, hostPaths: "real" });
  stack = await startStack();
  serverProxy = await startTcpProxy(stack.server.url, "refuse");
  kubeProxy = await startTcpProxy(cluster.url);
  proxiedKubeconfig = join(stack.dir, "kubeconfig-proxied");
  writeFileSync(proxiedKubeconfig, readFileSync(cluster.kubeconfigPath, "utf8").replace(cluster.url, kubeProxy.url));
  await prepareNamespace(cluster, ns);
});

after(async () => {
  await Promise.all(procs.map((p) => p.stop("SIGKILL")));
  await serverProxy?.close();
  await kubeProxy?.close();
  await stack?.stop();
  await cluster?.close();
});

test("controller: live while the server is unreachable at start; ready once registered and its watches are synced", async () => {
  const port = await freePort();
  const controller = spawn(["agent", "controller"], {
    KUBECONFIG: proxiedKubeconfig,
    DROVER_URL: serverProxy.url,
    DROVER_TOKEN: stack.poolToken,
    DROVER_AGENT_NAME: "health-ctl",
    DROVER_AGENT_HEALTH_PORT: String(port),
  });
  await controller.waitFor(/registering with the Drover server failed; retrying/);
  const live = await probe(port, "/healthz");
  assert.equal(live.status, 200, "an unreachable server is no reason to restart the controller");
  const notReady = await probe(port, "/readyz");
  assert.equal(notReady.status, 503);
  assert.equal(notReady.body.registered, false);
  assert.equal(controller.child.exitCode, null, "the controller keeps retrying instead of exiting");

  serverProxy.set("open");
  await eventually("the controller to be ready", async () => (await probe(port, "/readyz")).status === 200);
  assert.match((await probe(port, "/metrics")).text, /^drover_controller_jobs_in_flight 0$/m);

  // The API server goes away: the watches are no longer synced, the process is still alive.
  kubeProxy.set("refuse");
  await eventually("readiness to drop with the watches", async () => (await probe(port, "/readyz")).status === 503);
  assert.equal((await probe(port, "/healthz")).status, 200);
  kubeProxy.set("open");
  await eventually("readiness to come back", async () => (await probe(port, "/readyz")).status === 200);

  // The Drover server goes away after registration: still live.
  const before = serverProxy.accepted;
  serverProxy.set("refuse");
  await eventually("the controller to try the server", async () => serverProxy.accepted > before);
  assert.equal((await probe(port, "/healthz")).status, 200);
  serverProxy.set("open");
  await controller.stop();
});

test("node worker: ready once it has listed its node's run pods; live while the API server is unreachable", async () => {
  const port = await freePort();
  const home = join(stack.dir, "node-home");
  const worker = spawn(["agent", "node-worker"], {
    KUBECONFIG: proxiedKubeconfig,
    DROVER_AGENT_NODE_HOME: home,
    DROVER_AGENT_NODE_NAME: "ktc-node",
    DROVER_AGENT_CONTROLLER_NAME: "health-ctl",
    DROVER_AGENT_HEALTH_PORT: String(port),
  });
  await eventually("the node worker to be ready", async () => (await probe(port, "/readyz")).status === 200);
  assert.match((await probe(port, "/metrics")).text, /^drover_node_worker_runs 0$/m);
  kubeProxy.set("refuse");
  await eventually("readiness to drop", async () => (await probe(port, "/readyz")).status === 503);
  assert.equal((await probe(port, "/healthz")).status, 200);
  kubeProxy.set("open");
  await eventually("readiness to come back", async () => (await probe(port, "/readyz")).status === 200);
  await worker.stop();
});

test("a run pod's worker serves its health port while its job runs", async () => {
  const workerPort = await freePort();
  await createAgentTask(cluster, ns, "task-template", [
    {
      name: "worker",
      image: workerImage,
      command: [process.execPath, droverBin],
      args: ["agent", "worker"],
      env: [{ name: "DROVER_AGENT_HEALTH_PORT", value: String(workerPort) }],
    },
    terraformRunner(stack),
  ]);
  spawn(["agent", "controller"], {
    KUBECONFIG: cluster.kubeconfigPath,
    ...controllerEnv(stack, "health-pods", "task-template"),
    DROVER_AGENT_EXEC_LOOP_PATH: execLoopPath,
    DROVER_AGENT_HEALTH_PORT: "0",
  });
  assert.equal(
    (await stack.server.api(routes.createWorkspace, { body: { name: "health-pod", pool: stack.pool } })).status,
    201,
  );
  const files = {
    "main.tf":
      'resource "terraform_data" "long" {\n  input = timestamp()\n  provisioner "local-exec" {\n    command = "echo started-long; sleep 30"\n  }\n}\n',
  };
  const runId = await stack.startRun(writeConfig(stack.dir, "health-pod", files), "health-pod", ["--auto-apply"]);
  await eventually(
    "the apply to run",
    async () => (await runLog(stack.server, runId, "apply")).includes("started-long"),
    90_000,
  );
  const ready = await probe(workerPort, "/readyz");
  assert.equal(ready.status, 200, JSON.stringify(ready.body));
  assert.equal(ready.body.phase, "apply");
  assert.equal((await probe(workerPort, "/healthz")).status, 200);
  assert.match((await probe(workerPort, "/metrics")).text, /^drover_worker_job_running 1$/m);
  assert.equal((await stack.cli(["run", "cancel", runId])).code, 0);
  await stack.waitForRun(runId, ["canceled", "errored", "applied"], 60_000);
});
