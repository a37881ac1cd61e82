import assert from "node:assert/strict";
import { chmodSync, chownSync, existsSync, readdirSync, writeFileSync } from "node:fs";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";
import { after, before, test, type TestContext } from "node:test";
import { dockerLabels, DockerEngine } from "@drover/agent/docker";
import {
  ensureImages,
  podman,
  podmanOk,
  podmanUnavailable,
  runContainer,
  startDockerApi,
  type DockerApi,
} from "../support/podman.js";
import { hardened, ownedDir, startServerContainer } from "../support/image-stack.js";
import { until } from "../support/marked-processes.js";
import type { Proc } from "../support/processes.js";
import { runLog, startStack, writeConfig, type Stack } from "../support/stack.js";
import { planWithWorkspaceVariables } from "../support/variable-precedence.js";
import { isTerminalRun, routes } from "@drover/protocol";
import { client } from "../support/typed-api.js";

// The docker driver end to end: the real server, real agents with DROVER_AGENT_DRIVER=docker,
// podman's Docker Engine API on a socket of this file's own, the locally built runner image
// (deploy/docker/runner.Dockerfile), real terraform in each run's container.

const skip = podmanUnavailable();

const repo = join(dirname(fileURLToPath(import.meta.url)), "..", "..", "..");
const hello = join(repo, "examples", "hello");
let stack: Stack;
let api: DockerApi;
let runnerImage: string;
let droverImage: string;
/** This file's Docker API, through the driver's own client. */
let engine: DockerEngine;

before(
  async () => {
    if (skip) return;
    ({ runner: runnerImage, drover: droverImage } = (await ensureImages()).images);
    stack = await startStack();
    api = await startDockerApi(join(stack.dir, "docker.sock"));
    engine = new DockerEngine(api.socketPath);
    // The images may still be building (cold, from scratch) when this file starts, which it may do
    // first (run-tests.mjs starts the longest files first): the build's budget, as in the other
    // image tests, not the default 5 minutes of one test.
  },
  { timeout: 20 * 60_000 },
);
after(async () => {
  // Whatever a failed test left behind: no container of this file outlives it (and none writes
  // into the stack's directory while it is removed).
  if (engine) for (const c of await engine.list([dockerLabels.agentTag])) await engine.remove(c.Id).catch(() => {});
  await engine?.close();
  await api?.stop();
  await stack?.stop();
});

async function workspace(name: string): Promise<string> {
  const res = await stack.server.api(routes.createWorkspace, { body: { name, pool: stack.pool } });
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

test(
  "examples/hello through the drover image's server and an agent in the drover image with the Docker socket mounted: each job in its own container, removed after",
  { skip },
  async (t) => {
    const dir = join(stack.dir, "images");
    const server = await startServerContainer(droverImage, dir);
    t.after(() => server.container.stop(5));
    for (const args of [
      ["pool", "create", "docker"],
      ["workspace", "create", "hello", "--pool", "docker"],
    ]) {
      const r = await server.cli(args);
      assert.equal(r.code, 0, r.stderr);
    }
    const token = await server.cli(["token", "create", "--pool", "docker", "--json"]);
    assert.equal(token.code, 0, token.stderr);

    // As the README's agent line: UID 65532 (no host account's) in the socket's group, the socket mounted, and
    // the data dir at its own host path (the daemon resolves the runs' bind mounts on the host).
    const socketGroup = 2375;
    chownSync(api.socketPath, 0, socketGroup);
    chmodSync(api.socketPath, 0o660);
    const agentUser = 65532;
    const dataDir = ownedDir(join(dir, "agent-data"), agentUser);
    const agent = runContainer([
      ...hardened,
      "--user",
      `${agentUser}:${agentUser}`,
      "--group-add",
      String(socketGroup),
      "-v",
      `${api.socketPath}:/var/run/docker.sock`,
      "-v",
      `${dataDir}:${dataDir}`,
      "-v",
      `${ownedDir(join(dir, "agent-cache"), agentUser)}:/var/lib/drover/cache`,
      "-e",
      `DROVER_URL=${server.url}`,
      "-e",
      `DROVER_TOKEN=${(JSON.parse(token.stdout) as { token: string }).token}`,
      "-e",
      "DROVER_AGENT_NAME=image-docker-agent",
      "-e",
      "DROVER_AGENT_DRIVER=docker",
      "-e",
      `DROVER_AGENT_DATA_DIR=${dataDir}`,
      "-e",
      "DROVER_AGENT_CACHE_DIR=/var/lib/drover/cache",
      "-e",
      `DROVER_AGENT_DOCKER_IMAGE=${runnerImage}`,
      "-e",
      "DROVER_AGENT_DOCKER_NETWORK=host",
      "-e",
      "DROVER_AGENT_HEALTH_PORT=0",
      "-e",
      "CHECKPOINT_DISABLE=1",
      droverImage,
      "agent",
      "run",
    ]);
    t.after(() => agent.stop(10));
    await agent.waitFor(/"msg":"registered"/, 60_000);
    assert.match(
      (await podmanOk(["exec", agent.name, "id"])).trim(),
      new RegExp(`^uid=${agentUser}\\b.*\\b${socketGroup}\\b`),
      "the agent is not root, and reaches the socket through its group",
    );

    const started = await server.cli([
      "run",
      "start",
      hello,
      "--workspace",
      "hello",
      "--auto-apply",
      "--no-follow",
      "--json",
    ]);
    assert.equal(started.code, 0, started.stderr);
    const runId = (JSON.parse(started.stdout) as { id: string }).id;
    let status = "";
    await until(
      "the run through the images to end",
      async () => {
        const run = await client(server.url, server.adminToken).call(routes.getRun, { params: { id: runId } });
        status = run.status;
        return isTerminalRun(run.status);
      },
      180_000,
    );
    assert.equal(status, "applied", `agent:\n${agent.output()}\nserver:\n${server.container.output()}`);
    const logs = await server.cli(["run", "logs", runId, "--phase", "apply"]);
    assert.match(logs.stdout, new RegExp(`Hello from Drover, from run ${runId} on workspace hello`));
    // Each phase's container is named after its job and started from the runner image; both are gone now.
    const started2 = [
      ...agent.output().matchAll(/"container":"(drover-job-[0-9a-z]+-\d+)","image":"([^"]+)".*?run container started/g),
    ];
    assert.equal(new Set(started2.map((m) => m[1])).size, 2, `one container per job (plan, apply):\n${agent.output()}`);
    assert.deepEqual([...new Set(started2.map((m) => m[2]))], [runnerImage]);
    await until("the run's containers are removed", async () => (await runContainers(runId)).length === 0, 30_000);
    // The agent deletes a job's directory just after its container is gone; the run may end first.
    await until(
      "the jobs' directories are removed",
      async () => readdirSync(join(dataDir, "docker-jobs")).length === 0,
      30_000,
    );
  },
);

/** A configuration whose apply prints `holding` and then waits until `go` appears in its working directory. */
function gatedConfig(extra = ""): Record<string, string> {
  return {
    "main.tf": `resource "terraform_data" "gate" {\n  provisioner "local-exec" {\n    command = "${extra}echo holding; while [ ! -e go ]; do sleep 0.2; done; echo released"\n  }\n}\n`,
  };
}

/** Waits for `pattern` in a phase's log; a run that ends first fails at once with its status, error and logs. */
async function waitForLog(
  runId: string,
  phase: "plan" | "apply",
  pattern: RegExp,
  timeoutMs = 120_000,
): Promise<string> {
  let log = "";
  await until(
    `${phase} log matching ${pattern}`,
    async () => {
      if (pattern.test((log = await runLog(stack.server, runId, phase)))) return true;
      const run = (await stack.server.api(routes.getRun, { params: { id: runId } })).body as {
        status: string;
        errorMessage: string | null;
      };
      if (["errored", "canceled", "applied", "planned_and_finished", "discarded"].includes(run.status)) {
        throw new Error(
          `run ${runId} ended ${run.status} (${run.errorMessage}) before its ${phase} log matched ${pattern}:\n${await runLog(stack.server, runId, "plan")}\n${log}`,
        );
      }
      return false;
    },
    timeoutMs,
  );
  return log;
}

test(
  "cancel during apply interrupts terraform in its container and releases the lock; the container carries the settings, proxy and CA, never the Docker socket",
  { skip },
  async (t) => {
    const ca = join(stack.dir, "task-ca.pem");
    writeFileSync(ca, "-----BEGIN CERTIFICATE-----\nZHJvdmVyLXRlc3QtY2E=\n-----END CERTIFICATE-----\n");
    await dockerAgent(t, "cancel-docker", {
      HTTPS_PROXY: "http://proxy.invalid:3128",
      NO_PROXY: "127.0.0.1,localhost",
      DROVER_CONTAINER_TASK_CA_CERT: ca,
      // The host's own credentials, as a systemd unit's EnvironmentFile gives the agent.
      AWS_SECRET_ACCESS_KEY: "agent-host-secret",
    });
    const wsId = await workspace("cancel");
    const dir = writeConfig(
      stack.dir,
      "cancel",
      gatedConfig(
        "echo proxy=$HTTPS_PROXY; echo ca=$(sed -n 2p $SSL_CERT_FILE); echo who=$(id -u):$(id -g); echo host=[$AWS_SECRET_ACCESS_KEY]; ",
      ),
    );
    const runId = await stack.startRun(dir, "cancel", ["--auto-apply"]);
    const log = await waitForLog(runId, "apply", /\(local-exec\): holding/);
    assert.match(log, /proxy=http:\/\/proxy\.invalid:3128/, "the proxy reaches the run");
    assert.match(log, /ca=ZHJvdmVyLXRlc3QtY2E=/, "the task CA bundle reaches the run as SSL_CERT_FILE");
    assert.match(log, /host=\[\]/, "nothing else of the agent's environment reaches the run");
    assert.equal(
      (await stack.server.api(routes.getWorkspace, { params: { ws: wsId } })).body.stateLocked,
      true,
      "terraform holds the lock while applying",
    );

    const [summary] = await runContainers(runId);
    assert.ok(summary, "the apply runs in a container");
    const info = (await engine.inspect(summary.Id)) as unknown as {
      Config: { User: string; Labels: Record<string, string> };
      HostConfig: {
        ReadonlyRootfs: boolean;
        Memory: number;
        NanoCpus: number;
        NetworkMode: string;
        Binds: string[] | null;
        Tmpfs: Record<string, string> | null;
        CapDrop: string[] | null;
      };
      Mounts: Array<{ Source: string; Destination: string }>;
    };
    // The agent runs as root here and sets no DROVER_AGENT_DOCKER_USER: the default is a uid no host account has
    // (1000 is the host's first regular account, whose processes could read the run's /proc environ).
    assert.equal(info.Config.User, "65532:65532", "not root, and not a host account");
    assert.match(log, /\(local-exec\): who=65532:65532(?!\d)/, "the run's processes run as that user");
    assert.equal(info.HostConfig.ReadonlyRootfs, true);
    assert.equal(info.HostConfig.Memory, 512 * 1024 * 1024, "DROVER_AGENT_DOCKER_MEMORY_MB");
    assert.equal(info.HostConfig.NanoCpus, 1e9, "DROVER_AGENT_DOCKER_CPUS");
    assert.equal(info.HostConfig.NetworkMode, "host", "DROVER_AGENT_DOCKER_NETWORK");
    assert.ok(Object.keys(info.HostConfig.Tmpfs ?? {}).includes("/tmp"), "a tmpfs for scratch files");
    assert.equal(info.Config.Labels[dockerLabels.runId], runId);
    assert.equal(info.Config.Labels[dockerLabels.phase], "apply");
    const sources = (info.Mounts ?? []).map((m) => m.Source);
    assert.ok(
      !sources.some((s) => s.includes("docker.sock") || s === api.socketPath),
      `no Docker socket in the run: ${sources.join(", ")}`,
    );

    const res = await stack.cli(["run", "cancel", runId]);
    assert.equal(res.code, 0, res.stderr);
    const run = await stack.waitForRun(runId, ["canceled", "errored", "applied"]);
    assert.equal(run.status, "canceled", run.errorMessage);
    const ws = await stack.server.api(routes.getWorkspace, { params: { ws: wsId } });
    assert.equal(ws.body.stateLocked, false, "the state lock was released");
    assert.match(
      await runLog(stack.server, runId, "apply"),
      /Interrupt received/,
      "terraform got the interrupt, as a local process would",
    );
    await until(
      "the canceled run's container is removed",
      async () => (await runContainers(runId)).length === 0,
      30_000,
    );
  },
);

test(
  "the workspace's variables reach terraform in the run's container, over the configuration's *.auto.tfvars",
  { skip },
  async (t) => {
    await dockerAgent(t, "vars-docker");
    await workspace("vars-docker");
    await planWithWorkspaceVariables(stack, "vars-docker", 120_000);
  },
);

test("a process exceeding the container's memory limit ends the run errored: out of memory", { skip }, async (t) => {
  await dockerAgent(t, "oom-docker", { DROVER_AGENT_DOCKER_MEMORY_MB: "160" });
  await workspace("oom");
  const dir = writeConfig(stack.dir, "oom", {
    "main.tf":
      'resource "terraform_data" "hog" {\n  provisioner "local-exec" {\n    command = "dd if=/dev/zero of=/dev/null bs=400M count=1"\n  }\n}\n',
  });
  const runId = await stack.startRun(dir, "oom", ["--auto-apply"]);
  const run = await stack.waitForRun(runId, ["errored", "failed", "applied", "canceled"], 180_000);
  assert.equal(run.status, "errored", `${run.errorMessage}\n${await runLog(stack.server, runId, "apply")}`);
  assert.match(run.errorMessage, /^out of memory: .*160 MiB.*DROVER_AGENT_DOCKER_MEMORY_MB/);
  await until("the run's container is removed", async () => (await runContainers(runId)).length === 0, 30_000);
});

test(
  "a run's container killed from outside mid-apply ends the run errored with the container's exit code, and the agent takes the next run",
  { skip },
  async (t) => {
    await dockerAgent(t, "killed-docker");
    await workspace("killed");
    const runId = await stack.startRun(writeConfig(stack.dir, "killed", gatedConfig()), "killed", ["--auto-apply"]);
    await waitForLog(runId, "apply", /\(local-exec\): holding/);
    const [summary] = await runContainers(runId);
    assert.ok(summary, "the apply runs in a container");
    // What an operator's `docker kill` does: the daemon ends the container; the agent sees it through the
    // end of the container's output (it holds no `wait` open) and asks the daemon for the exit code.
    await engine.kill(summary.Id, "SIGKILL");
    const run = await stack.waitForRun(runId, ["errored", "failed", "applied", "canceled"], 60_000);
    assert.equal(run.status, "errored", `${run.errorMessage}\n${await runLog(stack.server, runId, "apply")}`);
    assert.match(
      run.errorMessage,
      /the run's container drover-job-\S+ stopped \(exit code 137\) before the step ended/,
    );
    await until("the run's container is removed", async () => (await runContainers(runId)).length === 0, 30_000);

    await workspace("after-kill");
    const next = await stack.startRun(
      writeConfig(stack.dir, "after-kill", { "main.tf": 'resource "terraform_data" "x" {}\n' }),
      "after-kill",
      ["--auto-apply"],
    );
    const done = await stack.waitForRun(next, ["errored", "failed", "applied", "canceled"], 120_000);
    assert.equal(done.status, "applied", done.errorMessage);
  },
);

test(
  "a run writing past DROVER_AGENT_DOCKER_DISK_MB has its container killed and ends errored: out of disk",
  { skip },
  async (t) => {
    const agent = await dockerAgent(t, "disk-docker", { DROVER_AGENT_DOCKER_DISK_MB: "32" });
    await workspace("disk");
    // Without the bound this run would hold its 64 MiB (or, writing on, fill the host's disk) until released.
    const dir = writeConfig(stack.dir, "disk", gatedConfig("dd if=/dev/zero of=big bs=1M count=64 2>/dev/null; "));
    const runId = await stack.startRun(dir, "disk", ["--auto-apply"]);
    const run = await stack.waitForRun(runId, ["errored", "failed", "applied", "canceled"], 180_000);
    assert.equal(
      run.status,
      "errored",
      `${run.errorMessage}\n${await runLog(stack.server, runId, "apply")}\n${agent.output()}`,
    );
    assert.match(
      run.errorMessage,
      /^out of disk: the run's files on the agent's host took \d+ MiB, past the docker driver's bound of 32 MiB, .*DROVER_AGENT_DOCKER_DISK_MB/,
    );
    assert.match(agent.output(), /outgrew DROVER_AGENT_DOCKER_DISK_MB; killing its container/);
    await until("the run's container is removed", async () => (await runContainers(runId)).length === 0, 30_000);
  },
);

test(
  "a runner image that does not exist and cannot be pulled ends the run errored, naming the image",
  { skip },
  async (t) => {
    await dockerAgent(t, "missing-image-docker", { DROVER_AGENT_DOCKER_IMAGE: "localhost:1/drover-missing-runner:0" });
    await workspace("missing-image");
    const runId = await stack.startRun(hello, "missing-image", ["--auto-apply"]);
    const run = await stack.waitForRun(runId, ["errored", "failed", "planned", "applied", "canceled"], 180_000);
    assert.equal(run.status, "errored");
    assert.match(
      run.errorMessage,
      /the runner image localhost:1\/drover-missing-runner:0 is not on this Docker host and pulling it failed: .*DROVER_AGENT_DOCKER_IMAGE/s,
    );
    assert.equal((await runContainers(runId)).length, 0, "no container was made");
  },
);

test(
  "a workspace's runner image: used when the agent's allow-list has it, refused with the reason when not, the agent's own once cleared",
  { skip },
  async (t) => {
    // The runner image under a second name, as an operator's registry of approved runners would hold it.
    const approved = `localhost/drover-approved/runner:${runnerImage.split(":").pop()}`;
    await podmanOk(["tag", runnerImage, approved]);
    // Only this name: `podman untag IMAGE` without one would strip the runner image's own tag too.
    t.after(() => podman(["untag", approved, approved]).then(() => undefined));
    const agent = await dockerAgent(t, "ws-image-docker", {
      DROVER_AGENT_DOCKER_ALLOWED_IMAGES: "localhost/drover-approved/*",
    });
    const created = await stack.cli([
      "workspace",
      "create",
      "ws-image",
      "--pool",
      stack.pool,
      "--runner-image",
      approved,
      "--json",
    ]);
    assert.equal(created.code, 0, created.stderr);
    assert.equal((JSON.parse(created.stdout) as { runnerImage: string }).runnerImage, approved);

    const allowed = await stack.startRun(hello, "ws-image", ["--auto-apply"]);
    assert.equal(
      (await stack.waitForRun(allowed, ["applied", "errored", "failed", "canceled"], 180_000)).status,
      "applied",
      agent.output(),
    );
    const first = [...agent.output().matchAll(/"image":"([^"]+)".*?run container started/g)].map((m) => m[1]);
    assert.deepEqual(first, [approved, approved], "plan and apply started from the workspace's image");

    const updated = await stack.cli([
      "workspace",
      "update",
      "ws-image",
      "--runner-image",
      "localhost/drover-unapproved/runner:1",
    ]);
    assert.equal(updated.code, 0, updated.stderr);
    const refused = await stack.startRun(hello, "ws-image", ["--auto-apply"]);
    const run = await stack.waitForRun(refused, ["applied", "errored", "failed", "canceled"], 180_000);
    assert.equal(run.status, "errored");
    assert.match(
      run.errorMessage,
      /workspace ws-image asks for the runner image localhost\/drover-unapproved\/runner:1, which this agent does not allow\. Add it .* DROVER_AGENT_DOCKER_ALLOWED_IMAGES/,
    );
    assert.equal((await runContainers(refused)).length, 0, "no container was made");

    const cleared = await stack.cli(["workspace", "update", "ws-image", "--runner-image", ""]);
    assert.equal(cleared.code, 0, cleared.stderr);
    // Nothing changed since the first run: the plan finds no changes and the run ends there.
    const fallback = await stack.startRun(hello, "ws-image", ["--auto-apply"]);
    const last = await stack.waitForRun(
      fallback,
      ["applied", "planned_and_finished", "errored", "failed", "canceled"],
      180_000,
    );
    assert.equal(last.status, "planned_and_finished", last.errorMessage);
    const images = [...agent.output().matchAll(/"image":"([^"]+)".*?run container started/g)].map((m) => m[1]);
    assert.deepEqual(images.slice(2), [runnerImage], "the plan started from the agent's own image again");
  },
);

test(
  "an agent killed mid-run and restarted removes its orphaned container and ends the run errored with the reason",
  { skip },
  async (t) => {
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
    await until("the orphaned job's directory (with its token) is gone", () => left().length === 0, 20_000).catch(
      (err: unknown) => {
        throw new Error(`${String(err)}: ${left().join(", ")}\n${agent.output()}`);
      },
    );
    await until(
      "the workspace is unlocked",
      async () => (await stack.server.api(routes.getWorkspace, { params: { ws: wsId } })).body.currentRunId === null,
      30_000,
    );
  },
);

test(
  "3 concurrent runs on one agent: each in its own container, none sees another's files or the agent's data dir",
  { skip },
  async (t) => {
    await dockerAgent(t, "three-docker", { DROVER_AGENT_CONCURRENCY: "3" });
    const dataDir = join(stack.dir, "agent-three-docker", "data");
    const probe = `echo mine > mine.txt; echo runs=$(ls /drover/run | wc -l); ls ${dataDir} >/dev/null 2>&1 && echo agent-data-visible; cat /drover/run/*/config/mine.txt | wc -l | sed 's/^/mine-files=/'; `;
    const runIds: string[] = [];
    for (const name of ["iso-a", "iso-b", "iso-c"]) {
      await workspace(name);
      runIds.push(await stack.startRun(writeConfig(stack.dir, name, gatedConfig(probe)), name, ["--auto-apply"]));
    }
    const logs = await Promise.all(runIds.map((id) => waitForLog(id, "apply", /\(local-exec\): holding/, 240_000)));
    await until(
      "three apply containers at once",
      async () => (await runContainers()).filter((c) => c.Labels?.[dockerLabels.phase] === "apply").length === 3,
      30_000,
    );
    for (const log of logs) {
      assert.match(log, /\(local-exec\): runs=1\b/, "the run's mount holds its own run directory only");
      assert.match(log, /\(local-exec\): mine-files=1\b/, "only its own files");
      assert.doesNotMatch(log, /\(local-exec\): agent-data-visible/, "the agent's data dir is out of reach");
    }
    // Release each run through its own working directory on the host.
    const jobs = join(dataDir, "docker-jobs");
    for (const job of readdirSync(jobs)) {
      for (const runDir of readdirSync(join(jobs, job, "run")))
        writeFileSync(join(jobs, job, "run", runDir, "config", "go"), "");
    }
    for (const id of runIds) {
      const run = await stack.waitForRun(id, ["applied", "errored", "failed", "canceled"], 180_000);
      assert.equal(run.status, "applied", run.errorMessage);
    }
    await until("all containers removed", async () => (await runContainers()).length === 0, 30_000);
  },
);
