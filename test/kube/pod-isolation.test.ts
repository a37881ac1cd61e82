import assert from "node:assert/strict";
import { randomBytes } from "node:crypto";
import { writeFileSync } from "node:fs";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";
import { after, before, test } from "node:test";
import { runLog, startStack, type Stack } from "../support/stack.js";
import { droverBin, spawnDrover, type Proc } from "../support/processes.js";
import { eventually, fastTimings, kube, prepareDroverNamespace, startTestCluster, type TestCluster } from "./cluster.js";

// Job mode's per-pod worker shares its exec and run emptyDirs with the runner container the
// same way a node worker shares a run's directory (decision 0009): a link the run plants at
// steps/N/output must not ship a file of the worker container into the run log.

const repo = join(dirname(fileURLToPath(import.meta.url)), "..", "..", "..");
const ns = "drover-pod-isolation";
let cluster: TestCluster;
let stack: Stack;
let controller: Proc;
let secret: string;

// The attacking runner: links steps/1/output to a file only the worker container should read.
const attacker = `
D="$DROVER_EXEC_DIR"; n=1
while :; do
  s="$D/steps/$n"
  if [ -e "$s/ready" ]; then
    [ "$n" = 1 ] && ln -s "$SECRET" "$s/output"
    echo 0 >"$s/exit.tmp" && mv "$s/exit.tmp" "$s/exit"
    n=$((n + 1))
    continue
  fi
  [ -e "$D/shutdown" ] && exit 0
  sleep 0.1
done
`;

before(async () => {
  cluster = await startTestCluster({ timings: fastTimings });
  stack = await startStack();
  secret = `WORKER-SECRET-${randomBytes(8).toString("hex")}`;
  const secretPath = join(stack.dir, "worker-only");
  writeFileSync(secretPath, secret, { mode: 0o600 });
  const script = join(stack.dir, "attacker.sh");
  writeFileSync(script, attacker);
  await prepareDroverNamespace(cluster, ns, join(repo, "deploy", "kubernetes", "agenttasks.drover.dev.yaml"));
  const template = {
    apiVersion: "drover.dev/v1alpha1",
    kind: "AgentTask",
    metadata: { name: "attack", namespace: ns },
    spec: {
      jobTemplate: {
        template: {
          spec: {
            containers: [
              { name: "worker", image: "ghcr.io/drover-dev/drover:test", command: [process.execPath, droverBin], args: ["agent", "worker"] },
              { name: "runner", image: "ghcr.io/drover-dev/drover-runner:test", command: ["/bin/sh", script], env: [{ name: "SECRET", value: secretPath }] },
            ],
          },
        },
      },
    },
  };
  assert.equal((await kube(cluster, "POST", `/apis/drover.dev/v1alpha1/namespaces/${ns}/agenttasks`, template)).status, 201);
  controller = spawnDrover(["agent", "controller"], {
    ...stack.baseEnv,
    KUBECONFIG: cluster.kubeconfigPath,
    DROVER_TOKEN: stack.poolToken,
    DROVER_AGENT_NAME: "pod-iso-ctl",
    DROVER_AGENT_KUBERNETES_NAMESPACE: ns,
    DROVER_AGENT_KUBERNETES_TASK_TEMPLATE: "attack",
    DROVER_AGENT_KUBERNETES_WORKER_IMAGE: "ghcr.io/drover-dev/drover:test",
    DROVER_AGENT_EXEC_LOOP_PATH: join(repo, "packages", "agent", "exec-loop", "exec-loop.sh"),
    DROVER_AGENT_HEALTH_PORT: "0",
    DROVER_AGENT_LOG_FORMAT: "plain",
  });
  await eventually("the controller to register", async () => (await stack.server.api("GET", `/api/v1/agents?pool=${stack.pool}`)).body.items.some((a: any) => a.name === "pod-iso-ctl" && a.status !== "offline"));
});

after(async () => {
  await controller?.stop("SIGKILL");
  await stack?.stop();
  await cluster?.close();
});

test("job mode: a link planted at steps/N/output does not ship the worker container's files into the run log", async () => {
  assert.equal((await stack.server.api("POST", "/api/v1/workspaces", { name: "pod-iso", pool: stack.pool })).status, 201);
  const dir = join(stack.dir, "cfg");
  const { mkdirSync } = await import("node:fs");
  mkdirSync(dir);
  writeFileSync(join(dir, "main.tf"), 'resource "terraform_data" "x" {}\n');
  const runId = await stack.startRun(dir, "pod-iso");
  const run = await stack.waitForRun(runId, ["planned", "errored", "canceled", "planned_and_finished"], 60_000).catch((err: Error) => {
    throw new Error(`${err.message}\ncontroller:\n${controller.output()}`);
  });
  const log = await runLog(stack.server, runId, "plan");
  assert.equal(run.status, "errored", `${log}\n${controller.output()}`);
  assert.match(run.errorMessage ?? "", /refused .*steps\/1\/output: it is a symbolic link/);
  assert.ok(!log.includes(secret) && !JSON.stringify(run).includes(secret), "the worker's file is not in the run");
});
