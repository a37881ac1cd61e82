import assert from "node:assert/strict";
import { existsSync, readdirSync, writeFileSync } from "node:fs";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";
import { after, before, test } from "node:test";
import { dockerLabels } from "@drover/agent/docker";
import { startDockerApi, type DockerApiForTests } from "../support/docker-podman.js";
import { until } from "../support/marked-processes.js";
import type { Proc } from "../support/processes.js";
import { runLog, startStack, writeConfig, type Stack } from "../support/stack.js";

// The docker driver end to end: the real server, real agents with DROVER_AGENT_DRIVER=docker,
// podman's Docker Engine API on a socket of this file's own, real terraform in each run's
// container.

const repo = join(dirname(fileURLToPath(import.meta.url)), "..", "..", "..");
const hello = join(repo, "examples", "hello");
let stack: Stack;
let docker: DockerApiForTests;

before(async () => {
  docker = await startDockerApi();
  stack = await startStack();
});
after(async () => {
  await stack?.stop();
  // Whatever a failed test left behind: no container of this file outlives it.
  if (docker) {
    for (const c of await docker.engine.list([dockerLabels.agentTag])) await docker.engine.remove(c.Id).catch(() => {});
    await docker.stop();
  }
});

async function workspace(name: string): Promise<string> {
  const res = await stack.server.api("POST", "/api/v1/workspaces", { name, pool: stack.pool });
  assert.equal(res.status, 201, JSON.stringify(res.body));
  return res.body.id as string;
}

/** An agent of the docker driver against this file's Docker API. */
function dockerAgent(name: string, env: Record<string, string> = {}): Promise<Proc> {
  return stack.startAgent(name, {
    DROVER_AGENT_DRIVER: "docker",
    DROVER_AGENT_DOCKER_HOST: docker.host,
    DROVER_AGENT_DOCKER_IMAGE: docker.image,
    // The test's server listens on the host's loopback.
    DROVER_AGENT_DOCKER_NETWORK: "host",
    DROVER_AGENT_DOCKER_MEMORY_MB: "512",
    DROVER_AGENT_DOCKER_CPUS: "1",
    // The stack's CLI config file is a host path the run's container does not have.
    TF_CLI_CONFIG_FILE: "",
    ...env,
  });
}

/** Containers of runs on the Docker API (any agent of this file). */
async function runContainers(runId?: string) {
  return docker.engine.list(runId ? [`${dockerLabels.runId}=${runId}`] : [dockerLabels.agentTag]);
}

test("examples/hello through an agent with the docker driver: each job in its own container, removed after", async () => {
  const agent = await dockerAgent("hello-docker");
  await workspace("hello");
  const runId = await stack.startRun(hello, "hello", ["--auto-apply"]);
  const run = await stack.waitForRun(runId, ["applied", "errored", "failed", "canceled"], 180_000);
  const planLog = await runLog(stack.server, runId, "plan");
  const applyLog = await runLog(stack.server, runId, "apply");
  assert.equal(run.status, "applied", `${run.message}\n${planLog}\n${applyLog}\n${agent.output()}`);
  assert.match(applyLog, new RegExp(`Hello from Drover, from run ${runId} on workspace hello`));
  // Each phase's container is named after its job; both started and both are gone now.
  const started = [...agent.output().matchAll(/"container":"(drover-job-[0-9a-z]+-\d+)".*?run container started/g)].map((m) => m[1]);
  assert.equal(new Set(started).size, 2, `one container per job (plan, apply): ${started.join(", ")}`);
  await until("the run's containers are removed", async () => (await runContainers(runId)).length === 0, 30_000);
  await agent.stop("SIGTERM");
});
