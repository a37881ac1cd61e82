import assert from "node:assert/strict";

import { writeFileSync } from "node:fs";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";
import { after, before, test } from "node:test";
import { parseAllDocuments } from "yaml";
import { runLog, startStack, type Stack } from "../support/stack.js";
import { spawnDrover } from "../support/processes.js";
import { fastTimings, kube, kubectl, startTestCluster, type TestCluster } from "./cluster.js";
import {
  createAgentTask,
  prepareNamespace,
  startNodeModeAgents,
  terraformRunner,
  type NodeModeAgents,
} from "./agents.js";
import { routes } from "@drover/protocol";
import { helmTemplate } from "../support/helm.js";

// agent-k8s node mode under the chart's own RBAC on the test cluster (which enforces RBAC):
// the controller and the node worker run with their ServiceAccounts' tokens. No node worker
// may read the pool token; it reads a run's job Secret through the Role and RoleBinding the
// controller creates for that run alone (decision 0009).

const repo = join(dirname(fileURLToPath(import.meta.url)), "..", "..", "..");
const ns = "drover-rbac";
const release = "rel";
const workerSa = `${release}-agent-k8s-worker`;
const controllerSa = `${release}-agent-k8s-controller`;
// The chart grants its controller its own AgentTask only, by this name.
const taskTemplate = `${release}-agent-k8s-task-template`;
let cluster: TestCluster;
let stack: Stack;
let agents: NodeModeAgents;
let poolSecret: string;

/** A kubeconfig that authenticates as the ServiceAccount `sa` of the namespace. */
function kubeconfigFor(sa: string): string {
  const path = join(stack.dir, `${sa}.kubeconfig`);
  const ca = Buffer.from(cluster.caCert ?? "").toString("base64");
  writeFileSync(
    path,
    JSON.stringify({
      apiVersion: "v1",
      kind: "Config",
      clusters: [{ name: "c", cluster: { server: cluster.url, "certificate-authority-data": ca } }],
      users: [{ name: sa, user: { token: cluster.serviceAccountToken(ns, sa) } }],
      contexts: [{ name: "c", context: { cluster: "c", user: sa, namespace: ns } }],
      "current-context": "c",
    }),
  );
  return path;
}

async function canI(sa: string, ...what: string[]): Promise<string> {
  const r = await kubectl(cluster, ["auth", "can-i", "-n", ns, "--as", `system:serviceaccount:${ns}:${sa}`, ...what]);
  return r.stdout.trim() || r.stderr.trim();
}

before(async () => {
  cluster = await startTestCluster({ timings: fastTimings, hostPaths: "real" });
  stack = await startStack();
  await prepareNamespace(cluster, ns);
  // The chart's ServiceAccounts, Roles, RoleBindings and pool-token Secret, as it renders them.
  const rendered = helmTemplate([
    "template",
    release,
    join(repo, "charts", "agent-k8s"),
    "--namespace",
    ns,
    "--set",
    `agent.token=${stack.poolToken}`,
  ]);
  const objects = parseAllDocuments(rendered)
    .map((d) => d.toJSON() as { kind: string; metadata: { name: string } } | null)
    .filter(
      (o): o is { kind: string; metadata: { name: string } } =>
        !!o && ["ServiceAccount", "Role", "RoleBinding", "Secret"].includes(o.kind),
    );
  poolSecret = objects.find((o) => o.kind === "Secret" && JSON.stringify(o).includes(stack.poolToken))!.metadata.name;
  const paths: Record<string, string> = {
    ServiceAccount: `/api/v1/namespaces/${ns}/serviceaccounts`,
    Secret: `/api/v1/namespaces/${ns}/secrets`,
    Role: `/apis/rbac.authorization.k8s.io/v1/namespaces/${ns}/roles`,
    RoleBinding: `/apis/rbac.authorization.k8s.io/v1/namespaces/${ns}/rolebindings`,
  };
  for (const o of objects) {
    const r = await kube(cluster, "POST", paths[o.kind]!, o);
    assert.equal(r.status, 201, `${o.kind} ${o.metadata.name}: ${JSON.stringify(r.body)}`);
  }
  await createAgentTask(cluster, ns, taskTemplate, [terraformRunner(stack)]);
  agents = await startNodeModeAgents(cluster, stack, {
    ns,
    name: "rbac-ctl",
    template: taskTemplate,
    workerEnv: { KUBECONFIG: kubeconfigFor(workerSa) },
    controllerEnv: { KUBECONFIG: kubeconfigFor(controllerSa), DROVER_AGENT_NODE_WORKER_SERVICE_ACCOUNT: workerSa },
  });
});

after(async () => {
  await agents?.stop();
  await stack?.stop();
  await cluster?.close();
});

test("kubectl auth can-i: the node worker's ServiceAccount cannot read the pool token or any Secret", async () => {
  assert.equal(await canI(workerSa, "get", `secret/${poolSecret}`), "no");
  assert.equal(await canI(workerSa, "get", "secrets"), "no");
  assert.equal(await canI(workerSa, "list", "secrets"), "no");
  assert.equal(await canI(workerSa, "watch", "pods"), "yes", "it still finds its node's run pods");
  assert.equal(await canI(controllerSa, "create", "roles"), "yes");
});

test("examples/hello under the chart's RBAC: each run's job Secret is granted to the node workers by name, and only it", async () => {
  assert.equal(
    (await stack.server.api(routes.createWorkspace, { body: { name: "rbac-hello", pool: stack.pool } })).status,
    201,
  );
  const runId = await stack.startRun(join(repo, "examples", "hello"), "rbac-hello", ["--auto-apply"]);
  const run = await stack.waitForRun(runId, ["applied", "errored", "canceled"], 90_000);
  assert.equal(
    run.status,
    "applied",
    `${await runLog(stack.server, runId, "plan")}\n${agents.controller.output()}\n${agents.nodeWorker.output()}`,
  );
  const jobs = (
    await kube(
      cluster,
      "GET",
      `/apis/batch/v1/namespaces/${ns}/jobs?labelSelector=${encodeURIComponent(`drover.dev/run-id=${runId}`)}`,
    )
  ).body.items as any[];
  assert.equal(jobs.length, 2);
  for (const job of jobs) {
    const name = `${job.metadata.name}-job`;
    const role = (await kube(cluster, "GET", `/apis/rbac.authorization.k8s.io/v1/namespaces/${ns}/roles/${name}`)).body;
    assert.deepEqual(role.rules, [{ apiGroups: [""], resources: ["secrets"], resourceNames: [name], verbs: ["get"] }]);
    assert.equal(role.metadata.ownerReferences[0].uid, job.metadata.uid, "removed with its Job");
    const binding = (
      await kube(cluster, "GET", `/apis/rbac.authorization.k8s.io/v1/namespaces/${ns}/rolebindings/${name}`)
    ).body;
    assert.deepEqual(binding.subjects, [{ kind: "ServiceAccount", name: workerSa, namespace: ns }]);
    assert.equal(await canI(workerSa, "get", `secret/${name}`), "yes");
  }
  assert.equal(await canI(workerSa, "get", `secret/${poolSecret}`), "no", "still not the pool token");
  assert.equal(await canI(workerSa, "list", "secrets"), "no");
});

test("DROVER_AGENT_NODE_WORKER_SERVICE_ACCOUNT that is no ServiceAccount name: one clear line and exit 2", async () => {
  const proc = spawnDrover(["agent", "controller"], {
    PATH: process.env.PATH,
    DROVER_URL: "http://127.0.0.1:9",
    DROVER_TOKEN: stack.poolToken,
    DROVER_AGENT_NODE_HOME: agents.home,
    DROVER_AGENT_NODE_WORKER_SERVICE_ACCOUNT: "Not A Name",
  });
  const exit = await proc.exited;
  assert.equal(exit.code, 2, proc.output());
  const output = proc.output().trim();
  assert.equal(output.split("\n").length, 1, output);
  assert.match(
    output,
    /DROVER_AGENT_NODE_WORKER_SERVICE_ACCOUNT must be a Kubernetes object name .*got "Not A Name" \(invalid_setting\)/,
  );
});
