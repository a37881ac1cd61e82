// What the Kubernetes-mode agent tests share: the images and paths the controller and its
// workers are given, AgentTask templates, and waiting for a controller to register.
import assert from "node:assert/strict";
import { mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";
import { droverBin, spawnDrover, type Proc } from "../support/processes.js";
import type { Stack } from "../support/stack.js";
import type { ReceivedSpan } from "../support/otlp-receiver.js";
import { eventually, kube, prepareDroverNamespace, type TestCluster } from "./cluster.js";
import { routes } from "@drover/protocol";

const repo = join(dirname(fileURLToPath(import.meta.url)), "..", "..", "..");

/** The exec-loop script the worker hands a runner container. */
export const execLoopPath = join(repo, "packages", "agent", "exec-loop", "exec-loop.sh");
/** The agent image; the test cluster runs it as this checkout's drover. */
export const workerImage = "ghcr.io/drover-dev/drover:test";
/** The runner image; the test cluster runs its command on this machine. */
export const runnerImage = "ghcr.io/drover-dev/drover-runner:test";

/** Creates `ns` with the AgentTask CRD the charts ship, served. */
export function prepareNamespace(c: TestCluster, ns: string): Promise<void> {
  return prepareDroverNamespace(c, ns, join(repo, "deploy", "kubernetes", "agenttasks.drover.dev.yaml"));
}

/** A runner container whose terraform gets an empty CLI config of the stack's and no checkpoint calls. */
export function terraformRunner(stack: Stack): { name: string; image: string; env: { name: string; value: string }[] } {
  const tfrc = join(stack.dir, "runner-terraformrc");
  writeFileSync(tfrc, "");
  return {
    name: "runner",
    image: runnerImage,
    env: [
      { name: "TF_CLI_CONFIG_FILE", value: tfrc },
      { name: "CHECKPOINT_DISABLE", value: "1" },
    ],
  };
}

/** A job-mode pod's worker container: this checkout's drover, which the test cluster runs as a process. */
export function podWorker(env: { name: string; value: string }[] = []): {
  name: string;
  image: string;
  command: string[];
  args: string[];
  env: { name: string; value: string }[];
} {
  return { name: "worker", image: workerImage, command: [process.execPath, droverBin], args: ["agent", "worker"], env };
}

/**
 * Creates the AgentTask `name` in `ns`, whose task pods run `containers`; `podSpec` adds to
 * their pod spec (a nodeSelector…), `jobSpec` to the Job's (ttlSecondsAfterFinished…).
 */
export async function createAgentTask(
  c: TestCluster,
  ns: string,
  name: string,
  containers: unknown[],
  o: { podSpec?: Record<string, unknown>; jobSpec?: Record<string, unknown> } = {},
): Promise<void> {
  const body = {
    apiVersion: "drover.dev/v1alpha1",
    kind: "AgentTask",
    metadata: { name, namespace: ns },
    spec: { jobTemplate: { ...o.jobSpec, template: { spec: { ...o.podSpec, containers } } } },
  };
  const r = await kube(c, "POST", `/apis/drover.dev/v1alpha1/namespaces/${ns}/agenttasks`, body);
  assert.equal(r.status, 201, JSON.stringify(r.body));
}

/** Waits until the agent `name` has registered with the stack's server and is not offline. */
export async function agentRegistered(stack: Stack, name: string): Promise<void> {
  await eventually("the controller to register", async () =>
    ((await stack.server.api(routes.listAgents, { query: { pool: stack.pool } })).body.items as any[]).some(
      (a) => a.name === name && a.status !== "offline",
    ),
  );
}

/** The environment of `drover agent controller` named `name`, launching task pods from the AgentTask `template`. */
export function controllerEnv(stack: Stack, name: string, template: string): Record<string, string> {
  // Tests replace controllers by SIGKILL, which leaves the lease to expire before the next one
  // may lead; test/kube/leader-election.test.ts runs the election itself.
  return {
    DROVER_TOKEN: stack.poolToken,
    DROVER_AGENT_NAME: name,
    DROVER_AGENT_KUBERNETES_TASK_TEMPLATE: template,
    DROVER_AGENT_KUBERNETES_WORKER_IMAGE: workerImage,
    DROVER_AGENT_KUBERNETES_LEADER_ELECTION: "false",
  };
}

/**
 * Starts `drover agent controller` named `name` in job mode (no health port, plain logs, this
 * checkout's exec-loop), launching task pods in `ns` from the AgentTask `template` (default
 * "task-template"); `env` adds to or overrides its environment (DROVER_TOKEN of another pool…).
 */
export function startJobModeController(
  c: TestCluster,
  stack: Stack,
  o: { ns: string; name: string; template?: string; env?: Record<string, string> },
): Proc {
  return spawnDrover(["agent", "controller"], {
    ...stack.baseEnv,
    KUBECONFIG: c.kubeconfigPath,
    DROVER_AGENT_KUBERNETES_NAMESPACE: o.ns,
    DROVER_AGENT_EXEC_LOOP_PATH: execLoopPath,
    DROVER_AGENT_HEALTH_PORT: "0",
    DROVER_AGENT_LOG_FORMAT: "plain",
    ...controllerEnv(stack, o.name, o.template ?? "task-template"),
    ...o.env,
  });
}

/** The environment of `drover agent node-worker` on the test cluster's node, serving the controller `controller`. */
export function nodeWorkerEnv(controller: string): Record<string, string> {
  return {
    DROVER_AGENT_NODE_NAME: "ktc-node",
    DROVER_AGENT_CONTROLLER_NAME: controller,
    DROVER_AGENT_EXEC_LOOP_PATH: execLoopPath,
  };
}

/** One agent-k8s release in node mode, run here as processes: its controller and this node's worker. */
export interface NodeModeAgents {
  controller: Proc;
  /** The node worker now running (`restartNodeWorker` replaces it). */
  nodeWorker: Proc;
  /** The node's hostPath data home (a temporary directory; the test cluster uses real host paths). */
  home: string;
  /** SIGKILLs the node worker and starts another with the same settings; resolves once it has started. */
  restartNodeWorker(): Promise<Proc>;
  /** Kills both processes and removes the data home. */
  stop(): Promise<void>;
}

/**
 * Starts the node worker, then the controller `name` (launching run pods from the AgentTask
 * `template`) in `ns`, and waits until the worker has started and the controller registered.
 * The cluster must run with `hostPaths: "real"`: the worker stands in for its DaemonSet pod, so
 * the node's hostPaths are this machine's paths. `env` adds to both processes' environment,
 * `workerEnv` and `controllerEnv` to one's (e.g. a KUBECONFIG of its own ServiceAccount).
 */
export async function startNodeModeAgents(
  c: TestCluster,
  stack: Stack,
  o: {
    ns: string;
    name: string;
    template: string;
    env?: Record<string, string>;
    workerEnv?: Record<string, string>;
    controllerEnv?: Record<string, string>;
  },
): Promise<NodeModeAgents> {
  const home = mkdtempSync(join(tmpdir(), `drover-node-home-${o.name}-`));
  const common = {
    ...stack.baseEnv,
    KUBECONFIG: c.kubeconfigPath,
    DROVER_AGENT_KUBERNETES_NAMESPACE: o.ns,
    DROVER_AGENT_NODE_HOME: home,
    DROVER_AGENT_LOG_FORMAT: "plain",
    DROVER_AGENT_HEALTH_PORT: "0",
    ...o.env,
  };
  const startWorker = async () => {
    const worker = spawnDrover(["agent", "node-worker"], { ...common, ...nodeWorkerEnv(o.name), ...o.workerEnv });
    await worker.waitFor(/node worker started/);
    return worker;
  };
  const agents: NodeModeAgents = {
    nodeWorker: await startWorker(),
    controller: spawnDrover(["agent", "controller"], {
      ...common,
      ...controllerEnv(stack, o.name, o.template),
      ...o.controllerEnv,
    }),
    home,
    async restartNodeWorker() {
      await agents.nodeWorker.stop("SIGKILL");
      agents.nodeWorker = await startWorker();
      return agents.nodeWorker;
    },
    async stop() {
      await agents.controller.stop("SIGKILL");
      await agents.nodeWorker.stop("SIGKILL");
      // A run pod of the test cluster may still be writing its last step files here until the
      // cluster stops it: a directory that fills again as it is emptied is retried.
      rmSync(home, { recursive: true, force: true, maxRetries: 10, retryDelay: 100 });
    },
  };
  await agentRegistered(stack, o.name);
  return agents;
}

/**
 * A runner script that plays the exec-loop for attack tests: it answers every step with exit 0,
 * after running `onStep` (shell, with $D the exec directory, $R the run directory beside it, $S
 * the steps directory, $s this step's directory and $n its number), and exits on shutdown.
 */
export function fakeExecLoop(onStep: string): string {
  return `
D="$DROVER_EXEC_DIR"; R="$(dirname "$D")/run"; S="$D/steps"; n=1
while :; do
  s="$S/$n"
  if [ -e "$s/ready" ]; then
${onStep}
    echo 0 >"$s/exit.tmp" && mv "$s/exit.tmp" "$s/exit"
    n=$((n + 1))
    continue
  fi
  [ -e "$D/shutdown" ] && exit 0
  sleep 0.1
done
`;
}

/**
 * Waits for the controller's Kubernetes stages of one job in `inTrace()` — Job created, pod scheduled, image pulled,
 * container started — and checks each hangs under the job span `jobSpanId`, comes from the controller, and they end
 * in that order. Returns them in that order.
 */
export async function controllerStages(
  inTrace: () => ReceivedSpan[],
  jobSpanId: string,
  phase: string,
): Promise<ReceivedSpan[]> {
  const k8s = await eventually(
    `the controller's ${phase} stages`,
    async () => {
      const found = ["kubernetes job created", "pod scheduled", "image pulled", "container started"].map((n) =>
        inTrace().find((s) => s.name === n),
      );
      return found.every((f) => f !== undefined) ? found.map((f) => f!) : undefined;
    },
    30_000,
  );
  for (const s of k8s) {
    assert.equal(s.parentSpanId, jobSpanId, `${s.name} hangs under the job span`);
    assert.equal(s.resource["service.name"], "drover-controller");
  }
  for (let i = 1; i < k8s.length; i++)
    assert.ok(k8s[i - 1]!.endNs <= k8s[i]!.endNs, `${k8s[i - 1]!.name} ends before ${k8s[i]!.name}`);
  return k8s;
}
