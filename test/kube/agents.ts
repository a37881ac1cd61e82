// What the Kubernetes-mode agent tests share: the images and paths the controller and its
// workers are given, AgentTask templates, and waiting for a controller to register.
import assert from "node:assert/strict";
import { writeFileSync } from "node:fs";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";
import type { Stack } from "../support/stack.js";
import { eventually, kube, prepareDroverNamespace, type TestCluster } from "./cluster.js";

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
  return { name: "runner", image: runnerImage, env: [{ name: "TF_CLI_CONFIG_FILE", value: tfrc }, { name: "CHECKPOINT_DISABLE", value: "1" }] };
}

/** Creates the AgentTask `name` in `ns`, whose task pods run `containers`. */
export async function createAgentTask(c: TestCluster, ns: string, name: string, containers: unknown[]): Promise<void> {
  const body = { apiVersion: "drover.dev/v1alpha1", kind: "AgentTask", metadata: { name, namespace: ns }, spec: { jobTemplate: { template: { spec: { containers } } } } };
  const r = await kube(c, "POST", `/apis/drover.dev/v1alpha1/namespaces/${ns}/agenttasks`, body);
  assert.equal(r.status, 201, JSON.stringify(r.body));
}

/** Waits until the agent `name` has registered with the stack's server and is not offline. */
export async function agentRegistered(stack: Stack, name: string): Promise<void> {
  await eventually("the controller to register", async () => ((await stack.server.api("GET", `/api/v1/agents?pool=${stack.pool}`)).body.items as any[]).some((a) => a.name === name && a.status !== "offline"));
}

/** The environment of `drover agent controller` named `name`, launching task pods from the AgentTask `template`. */
export function controllerEnv(stack: Stack, name: string, template: string): Record<string, string> {
  return { DROVER_TOKEN: stack.poolToken, DROVER_AGENT_NAME: name, DROVER_AGENT_KUBERNETES_TASK_TEMPLATE: template, DROVER_AGENT_KUBERNETES_WORKER_IMAGE: workerImage };
}

/** The environment of `drover agent node-worker` on the test cluster's node, serving the controller `controller`. */
export function nodeWorkerEnv(controller: string): Record<string, string> {
  return { DROVER_AGENT_NODE_NAME: "ktc-node", DROVER_AGENT_CONTROLLER_NAME: controller, DROVER_AGENT_EXEC_LOOP_PATH: execLoopPath };
}
