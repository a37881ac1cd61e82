import assert from "node:assert/strict";
import { readFileSync, writeFileSync } from "node:fs";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";
import { after, before, test } from "node:test";
import { freePort, spawnDrover, type Proc } from "../support/processes.js";
import { scrape } from "../support/metric-values.js";
import { startStack, type Stack } from "../support/stack.js";
import { startTcpProxy, type TcpProxy } from "../support/tcp-proxy.js";
import {
  eventually,
  fastTimings,
  kube,
  prepareDroverNamespace,
  startTestCluster,
  type TestCluster,
} from "./cluster.js";
import { createAgentTask, terraformRunner, workerImage } from "./agents.js";
import { routes } from "@drover/protocol";

// `drover agent controller` started while the server is down: it keeps retrying registration
// (a stop signal ends the wait at once) and registers when the server comes up. And an API
// server that accepts connections but never answers: each call ends at its deadline.

const repo = join(dirname(fileURLToPath(import.meta.url)), "..", "..", "..");
const ns = "drover";
let cluster: TestCluster;
let stack: Stack;
let proxy: TcpProxy;

before(async () => {
  cluster = await startTestCluster({ timings: fastTimings });
  stack = await startStack();
  proxy = await startTcpProxy(stack.server.url, "refuse");
  await prepareDroverNamespace(cluster, ns, join(repo, "deploy", "kubernetes", "agenttasks.drover.dev.yaml"));
});

after(async () => {
  await proxy?.close();
  await stack?.stop();
  await cluster?.close();
});

function startController(name: string, env: Record<string, string> = {}): Proc {
  return spawnDrover(["agent", "controller"], {
    ...stack.baseEnv,
    DROVER_URL: proxy.url,
    KUBECONFIG: cluster.kubeconfigPath,
    DROVER_TOKEN: stack.poolToken,
    DROVER_AGENT_NAME: name,
    DROVER_AGENT_KUBERNETES_NAMESPACE: ns,
    DROVER_AGENT_HEALTH_PORT: "0",
    DROVER_AGENT_LOG_FORMAT: "plain",
    // These faults are about the server and the list calls; with a leader lease, a blackholed API
    // server would hold the controller before it registers (test/kube/leader-election.test.ts).
    DROVER_AGENT_KUBERNETES_LEADER_ELECTION: "false",
    ...env,
  });
}

async function registered(name: string): Promise<boolean> {
  return (await stack.server.api(routes.listAgents, { query: { pool: stack.pool } })).body.items.some(
    (a: any) => a.name === name && a.status !== "offline",
  );
}

test("a controller started while the server is down registers once it comes up; its errors are counted by kind", async () => {
  proxy.set("refuse");
  const port = await freePort();
  const errors = (kind: string) =>
    scrape(`http://127.0.0.1:${port}/metrics`, "drover_controller_errors_total", { kind });
  const controller = startController("late-ctl", { DROVER_AGENT_HEALTH_PORT: String(port) });
  try {
    await controller.waitFor(/registering with the Drover server failed; retrying/);
    await controller.waitFor(
      /registering with the Drover server failed; retrying[^\n]*\n(.|\n)*registering with the Drover server failed; retrying/,
      30_000,
    );
    assert.equal(controller.child.exitCode, null, `the controller ended:\n${controller.output()}`);
    assert.ok(((await errors("server")) ?? 0) >= 2, "each failed registration counted");
    proxy.set("open");
    await eventually("the controller to register", () => registered("late-ctl"));
    await controller.waitFor(/controller registered/);
    // Cut off once registered: its heartbeats fail and are counted apart from the server calls.
    proxy.set("refuse");
    await eventually(
      "a failed heartbeat counted",
      async () => ((await errors("heartbeat")) ?? 0) >= 1 || undefined,
      30_000,
    );
    proxy.set("open");
  } finally {
    controller.child.kill("SIGTERM");
    const exit = await controller.exited;
    assert.equal(exit.code, 0, controller.output());
  }
});

test("SIGTERM to a controller waiting for the server ends it at once, exit 0", async () => {
  proxy.set("refuse");
  const controller = startController("stopped-ctl");
  await controller.waitFor(/registering with the Drover server failed; retrying/);
  controller.child.kill("SIGTERM");
  const exit = await controller.exited;
  assert.equal(exit.code, 0, controller.output());
  assert.equal(await registered("stopped-ctl"), false);
});

test("an API server that never answers: the controller's list ends at DROVER_AGENT_KUBERNETES_API_TIMEOUT_SECONDS and is retried until it answers", async () => {
  proxy.set("open");
  const apiProxy = await startTcpProxy(cluster.url, "blackhole");
  const kubeconfig = join(stack.dir, "blackholed-kubeconfig");
  const port = new URL(cluster.url).port;
  writeFileSync(
    kubeconfig,
    readFileSync(cluster.kubeconfigPath, "utf8").replace(`127.0.0.1:${port}`, `127.0.0.1:${apiProxy.port}`),
  );
  const controller = startController("api-ctl", {
    KUBECONFIG: kubeconfig,
    DROVER_AGENT_KUBERNETES_API_TIMEOUT_SECONDS: "1",
  });
  try {
    await controller.waitFor(/controller registered/);
    await controller.waitFor(/listing this controller's Jobs failed; retrying/, 20_000);
    assert.ok(apiProxy.accepted > 0, "the list went to the blackholed API server");
    apiProxy.set("open");
    await controller.waitFor(/rebuilt in-flight Jobs from the cluster/, 60_000);
  } finally {
    await controller.stop("SIGKILL");
    await apiProxy.close();
  }
});

test("a job Secret the controller's RBAC refuses: the run errors naming the Secret, with the API's reason and message", async () => {
  proxy.set("open");
  // The controller's own ServiceAccount, granted everything it needs but creating Secrets.
  const sa = "no-secrets";
  const rbac = "/apis/rbac.authorization.k8s.io/v1";
  assert.equal(
    (await kube(cluster, "POST", `/api/v1/namespaces/${ns}/serviceaccounts`, { metadata: { name: sa } })).status,
    201,
  );
  const rules = [
    { apiGroups: ["batch"], resources: ["jobs"], verbs: ["create", "get", "list", "watch", "delete"] },
    { apiGroups: [""], resources: ["pods"], verbs: ["get", "list", "watch"] },
    { apiGroups: [""], resources: ["events"], verbs: ["list"] },
    { apiGroups: ["drover.dev"], resources: ["agenttasks"], verbs: ["get"] },
  ];
  assert.equal(
    (await kube(cluster, "POST", `${rbac}/namespaces/${ns}/roles`, { metadata: { name: sa }, rules })).status,
    201,
  );
  const binding = {
    metadata: { name: sa },
    roleRef: { apiGroup: "rbac.authorization.k8s.io", kind: "Role", name: sa },
    subjects: [{ kind: "ServiceAccount", name: sa, namespace: ns }],
  };
  assert.equal((await kube(cluster, "POST", `${rbac}/namespaces/${ns}/rolebindings`, binding)).status, 201);
  const kubeconfig = join(stack.dir, "no-secrets-kubeconfig");
  writeFileSync(
    kubeconfig,
    readFileSync(cluster.kubeconfigPath, "utf8").replace(cluster.token, cluster.serviceAccountToken(ns, sa)),
  );
  await createAgentTask(cluster, ns, "no-secrets-template", [terraformRunner(stack)]);
  const controller = startController("no-secrets-ctl", {
    KUBECONFIG: kubeconfig,
    DROVER_AGENT_KUBERNETES_TASK_TEMPLATE: "no-secrets-template",
    DROVER_AGENT_KUBERNETES_WORKER_IMAGE: workerImage,
  });
  try {
    await eventually("the controller to register", () => registered("no-secrets-ctl"));
    assert.equal(
      (await stack.server.api(routes.createWorkspace, { body: { name: "no-secrets", pool: stack.pool } })).status,
      201,
    );
    const runId = await stack.startRun(join(repo, "examples", "hello"), "no-secrets", []);
    const run = await stack.waitForRun(runId, ["planned", "errored", "canceled"], 60_000);
    assert.equal(run.status, "errored", controller.output());
    const message = String(run.errorMessage);
    const secret = `drover-${runId}-plan-1-job`;
    assert.equal(
      message,
      `could not launch the Kubernetes Job drover-${runId}-plan-1: cannot create Secret "${secret}" in namespace "${ns}": Forbidden (HTTP 403): secrets is forbidden: User "system:serviceaccount:${ns}:${sa}" cannot create resource "secrets" in API group "" in the namespace "${ns}"`,
    );
    assert.doesNotMatch(controller.output(), /HTTP-Code/, "no raw client exception in the log");
    assert.match(controller.output(), /could not create the Job[^\n]*cannot create Secret/);
  } finally {
    await controller.stop("SIGKILL");
  }
});
