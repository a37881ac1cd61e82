import assert from "node:assert/strict";
import { existsSync, readdirSync, writeFileSync } from "node:fs";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";
import { after, before, test, type TestContext } from "node:test";
import { dockerLabels, DockerEngine } from "@drover/agent/docker";
import { ensureImages, podmanUnavailable, startDockerApi, type DockerApi } from "../support/podman.js";
import { until } from "../support/marked-processes.js";
import type { Proc } from "../support/processes.js";
import { runLog, startStack, writeConfig, type Stack } from "../support/stack.js";

// The docker driver end to end: the real server, real agents with DROVER_AGENT_DRIVER=docker,
// podman's Docker Engine API on a socket of this file's own, the locally built runner image
// (deploy/docker/runner.Dockerfile), real terraform in each run's container.

const skip = podmanUnavailable();

const repo = join(dirname(fileURLToPath(import.meta.url)), "..", "..", "..");
const hello = join(repo, "examples", "hello");
let stack: Stack;
let api: DockerApi;
let runnerImage: string;
/** This file's Docker API, through the driver's own client. */
let engine: DockerEngine;

before(async () => {
  if (skip) return;
  runnerImage = (await ensureImages()).images.runner;
  stack = await startStack();
  api = await startDockerApi(join(stack.dir, "docker.sock"));
  engine = new DockerEngine(api.socketPath);
});
after(async () => {
  // Whatever a failed test left behind: no container of this file outlives it (and none writes
  // into the stack's directory while it is removed).
  if (engine) for (const c of await engine.list([dockerLabels.agentTag])) await engine.remove(c.Id).catch(() => {});
  await engine?.close();
  await api?.stop();
  await stack?.stop();
});

async function workspace(name: string): Promise<string> {
  const res = await stack.server.api("POST", "/api/v1/workspaces", { name, pool: stack.pool });
  assert.equal(res.status, 201, JSON.stringify(res.body));
  return res.body.id as string;
}

/** An agent of the docker driver against this file's Docker API, stopped (SIGTERM) when the test ends. */
async function dockerAgent(t: TestContext, name: string, env: Record<string, string> = {}): Promise<Proc> {
  const agent = await stack.startAgent(name, {
    DROVER_AGENT_DRIVER: "docker",
    DROVER_AGENT_DOCKER_HOST: `unix://${api.socketPath}`,
    DROVER_AGENT_DOCKER_IMAGE: runnerImage,
    // The test's server listens on the host's loopback.
    DROVER_AGENT_DOCKER_NETWORK: "host",
    DROVER_AGENT_DOCKER_MEMORY_MB: "512",
    DROVER_AGENT_DOCKER_CPUS: "1",
    // The stack's CLI config file is a host path the run's container does not have.
    TF_CLI_CONFIG_FILE: "",
    ...env,
  });
  t.after(() => agent.stop("SIGTERM"));
  return agent;
}

/** Containers of runs on the Docker API (any agent of this file). */
async function runContainers(runId?: string) {
  return engine.list(runId ? [`${dockerLabels.runId}=${runId}`] : [dockerLabels.agentTag]);
}

test("examples/hello through an agent with the docker driver: each job in its own container, removed after", { skip }, async (t) => {
  const agent = await dockerAgent(t, "hello-docker");
  await workspace("hello");
  const runId = await stack.startRun(hello, "hello", ["--auto-apply"]);
  const run = await stack.waitForRun(runId, ["applied", "errored", "failed", "canceled"], 180_000);
  const planLog = await runLog(stack.server, runId, "plan");
  const applyLog = await runLog(stack.server, runId, "apply");
  assert.equal(run.status, "applied", `${run.errorMessage}\n${planLog}\n${applyLog}\n${agent.output()}`);
  assert.match(applyLog, new RegExp(`Hello from Drover, from run ${runId} on workspace hello`));
  // Each phase's container is named after its job; both started and both are gone now.
  const started = [...agent.output().matchAll(/"container":"(drover-job-[0-9a-z]+-\d+)".*?run container started/g)].map((m) => m[1]);
  assert.equal(new Set(started).size, 2, `one container per job (plan, apply): ${started.join(", ")}`);
  await until("the run's containers are removed", async () => (await runContainers(runId)).length === 0, 30_000);
});

/** A configuration whose apply prints `holding` and then waits until `go` appears in its working directory. */
function gatedConfig(extra = ""): Record<string, string> {
  return {
    "main.tf": `resource "terraform_data" "gate" {\n  provisioner "local-exec" {\n    command = "${extra}echo holding; while [ ! -e go ]; do sleep 0.2; done; echo released"\n  }\n}\n`,
  };
}

async function waitForLog(runId: string, phase: "plan" | "apply", pattern: RegExp, timeoutMs = 120_000): Promise<string> {
  let log = "";
  await until(`${phase} log matching ${pattern}`, async () => pattern.test((log = await runLog(stack.server, runId, phase))), timeoutMs);
  return log;
}

test("cancel during apply interrupts terraform in its container and releases the lock; the container carries the settings, proxy and CA, never the Docker socket", { skip }, async (t) => {
  const ca = join(stack.dir, "task-ca.pem");
  writeFileSync(ca, "-----BEGIN CERTIFICATE-----\nZHJvdmVyLXRlc3QtY2E=\n-----END CERTIFICATE-----\n");
  await dockerAgent(t, "cancel-docker", {
    HTTPS_PROXY: "http://proxy.invalid:3128",
    NO_PROXY: "127.0.0.1,localhost",
    DROVER_CONTAINER_TASK_CA_CERT: ca,
  });
  const wsId = await workspace("cancel");
  const dir = writeConfig(stack.dir, "cancel", gatedConfig('echo proxy=$HTTPS_PROXY; echo ca=$(sed -n 2p $SSL_CERT_FILE); '));
  const runId = await stack.startRun(dir, "cancel", ["--auto-apply"]);
  const log = await waitForLog(runId, "apply", /\(local-exec\): holding/);
  assert.match(log, /proxy=http:\/\/proxy\.invalid:3128/, "the proxy reaches the run");
  assert.match(log, /ca=ZHJvdmVyLXRlc3QtY2E=/, "the task CA bundle reaches the run as SSL_CERT_FILE");
  assert.equal((await stack.server.api("GET", `/api/v1/workspaces/${wsId}`)).body.stateLocked, true, "terraform holds the lock while applying");

  const [summary] = await runContainers(runId);
  assert.ok(summary, "the apply runs in a container");
  const info = (await engine.inspect(summary.Id)) as unknown as {
    Config: { User: string; Labels: Record<string, string> };
    HostConfig: { ReadonlyRootfs: boolean; Memory: number; NanoCpus: number; NetworkMode: string; Binds: string[] | null; Tmpfs: Record<string, string> | null; CapDrop: string[] | null };
    Mounts: Array<{ Source: string; Destination: string }>;
  };
  assert.equal(info.Config.User, "1000:1000", "not root");
  assert.equal(info.HostConfig.ReadonlyRootfs, true);
  assert.equal(info.HostConfig.Memory, 512 * 1024 * 1024, "DROVER_AGENT_DOCKER_MEMORY_MB");
  assert.equal(info.HostConfig.NanoCpus, 1e9, "DROVER_AGENT_DOCKER_CPUS");
  assert.equal(info.HostConfig.NetworkMode, "host", "DROVER_AGENT_DOCKER_NETWORK");
  assert.ok(Object.keys(info.HostConfig.Tmpfs ?? {}).includes("/tmp"), "a tmpfs for scratch files");
  assert.equal(info.Config.Labels[dockerLabels.runId], runId);
  assert.equal(info.Config.Labels[dockerLabels.phase], "apply");
  const sources = (info.Mounts ?? []).map((m) => m.Source);
  assert.ok(!sources.some((s) => s.includes("docker.sock") || s === api.socketPath), `no Docker socket in the run: ${sources.join(", ")}`);

  const res = await stack.cli(["run", "cancel", runId]);
  assert.equal(res.code, 0, res.stderr);
  const run = await stack.waitForRun(runId, ["canceled", "errored", "applied"]);
  assert.equal(run.status, "canceled", run.errorMessage);
  const ws = await stack.server.api("GET", `/api/v1/workspaces/${wsId}`);
  assert.equal(ws.body.stateLocked, false, "the state lock was released");
  assert.match(await runLog(stack.server, runId, "apply"), /Interrupt received/, "terraform got the interrupt, as a local process would");
  await until("the canceled run's container is removed", async () => (await runContainers(runId)).length === 0, 30_000);
});

test("a process exceeding the container's memory limit ends the run errored: out of memory", { skip }, async (t) => {
  await dockerAgent(t, "oom-docker", { DROVER_AGENT_DOCKER_MEMORY_MB: "160" });
  await workspace("oom");
  const dir = writeConfig(stack.dir, "oom", {
    "main.tf": 'resource "terraform_data" "hog" {\n  provisioner "local-exec" {\n    command = "dd if=/dev/zero of=/dev/null bs=400M count=1"\n  }\n}\n',
  });
  const runId = await stack.startRun(dir, "oom", ["--auto-apply"]);
  const run = await stack.waitForRun(runId, ["errored", "failed", "applied", "canceled"], 180_000);
  assert.equal(run.status, "errored", `${run.errorMessage}\n${await runLog(stack.server, runId, "apply")}`);
  assert.match(run.errorMessage, /^out of memory: .*160 MiB.*DROVER_AGENT_DOCKER_MEMORY_MB/);
  await until("the run's container is removed", async () => (await runContainers(runId)).length === 0, 30_000);
});

test("a runner image that does not exist and cannot be pulled ends the run errored, naming the image", { skip }, async (t) => {
  await dockerAgent(t, "missing-image-docker", { DROVER_AGENT_DOCKER_IMAGE: "localhost:1/drover-missing-runner:0" });
  await workspace("missing-image");
  const runId = await stack.startRun(hello, "missing-image", ["--auto-apply"]);
  const run = await stack.waitForRun(runId, ["errored", "failed", "planned", "applied", "canceled"], 180_000);
  assert.equal(run.status, "errored");
  assert.match(run.errorMessage, /the runner image localhost:1\/drover-missing-runner:0 is not on this Docker host and pulling it failed: .*DROVER_AGENT_DOCKER_IMAGE/s);
  assert.equal((await runContainers(runId)).length, 0, "no container was made");
});

test("an agent killed mid-run and restarted removes its orphaned container and ends the run errored with the reason", { skip }, async (t) => {
  let agent = await dockerAgent(t, "orphan-docker");
  const wsId = await workspace("orphan");
  const dir = writeConfig(stack.dir, "orphan", gatedConfig());
  const runId = await stack.startRun(dir, "orphan", ["--auto-apply"]);
  await waitForLog(runId, "apply", /\(local-exec\): holding/);
  await agent.stop("SIGKILL");
  assert.equal((await runContainers(runId)).length, 1, "the container outlives the killed agent");
  agent = await dockerAgent(t, "orphan-docker");
  await agent.waitFor(/ended an orphaned run/, 60_000);

  const run = await stack.waitForRun(runId, ["errored", "applied", "canceled", "failed"]);
  assert.equal(run.status, "errored");
  assert.match(run.errorMessage, /the agent restarted while the run was in progress/);
  assert.equal((await runContainers(runId)).length, 0, "the orphaned container was removed");
  const dataDir = join(stack.dir, "agent-orphan-docker", "data", "docker-jobs");
  const left = () => (existsSync(dataDir) ? readdirSync(dataDir) : []);
  await until("the orphaned job's directory (with its token) is gone", () => left().length === 0, 20_000).catch((err: unknown) => {
    throw new Error(`${String(err)}: ${left().join(", ")}\n${agent.output()}`);
  });
  await until("the workspace is unlocked", async () => (await stack.server.api("GET", `/api/v1/workspaces/${wsId}`)).body.currentRunId === null, 30_000);
});

test("3 concurrent runs on one agent: each in its own container, none sees another's files or the agent's data dir", { skip }, async (t) => {
  await dockerAgent(t, "three-docker", { DROVER_AGENT_CONCURRENCY: "3" });
  const dataDir = join(stack.dir, "agent-three-docker", "data");
  const probe = `echo mine > mine.txt; echo runs=$(ls /drover/run | wc -l); ls ${dataDir} >/dev/null 2>&1 && echo agent-data-visible; cat /drover/run/*/config/mine.txt | wc -l | sed 's/^/mine-files=/'; `;
  const runIds: string[] = [];
  for (const name of ["iso-a", "iso-b", "iso-c"]) {
    await workspace(name);
    runIds.push(await stack.startRun(writeConfig(stack.dir, name, gatedConfig(probe)), name, ["--auto-apply"]));
  }
  const logs = await Promise.all(runIds.map((id) => waitForLog(id, "apply", /\(local-exec\): holding/, 240_000)));
  await until("three apply containers at once", async () => (await runContainers()).filter((c) => c.Labels?.[dockerLabels.phase] === "apply").length === 3, 30_000);
  for (const log of logs) {
    assert.match(log, /\(local-exec\): runs=1\b/, "the run's mount holds its own run directory only");
    assert.match(log, /\(local-exec\): mine-files=1\b/, "only its own files");
    assert.doesNotMatch(log, /\(local-exec\): agent-data-visible/, "the agent's data dir is out of reach");
  }
  // Release each run through its own working directory on the host.
  const jobs = join(dataDir, "docker-jobs");
  for (const job of readdirSync(jobs)) {
    for (const runDir of readdirSync(join(jobs, job, "run"))) writeFileSync(join(jobs, job, "run", runDir, "config", "go"), "");
  }
  for (const id of runIds) {
    const run = await stack.waitForRun(id, ["applied", "errored", "failed", "canceled"], 180_000);
    assert.equal(run.status, "applied", run.errorMessage);
  }
  await until("all containers removed", async () => (await runContainers()).length === 0, 30_000);
});
