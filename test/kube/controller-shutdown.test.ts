import assert from "node:assert/strict";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";
import { after, before, test } from "node:test";
import { startStack, type Stack } from "../support/stack.js";
import { freePort } from "../support/processes.js";
import { scrape } from "../support/metric-values.js";
import { eventually, fastTimings, kube, startTestCluster, type TestCluster } from "./cluster.js";
import {
  agentRegistered,
  createAgentTask,
  podWorker,
  prepareNamespace,
  startJobModeController,
  terraformRunner,
} from "./agents.js";
import { routes } from "@drover/protocol";

// A controller stopped (SIGTERM) while it launches a claimed job: the long-poll ends at once, but
// the launch goes on to the end, so the Job is not left without its Secret and the run completes.
// And a Job create carried out whose answer was lost: the retry finds the Job and counts it once.

const repo = join(dirname(fileURLToPath(import.meta.url)), "..", "..", "..");
const ns = "drover";
let cluster: TestCluster;
let stack: Stack;

before(async () => {
  cluster = await startTestCluster({ timings: fastTimings });
  stack = await startStack();
  await prepareNamespace(cluster, ns);
  await createAgentTask(cluster, ns, "task-template", [podWorker(), terraformRunner(stack)]);
});

after(async () => {
  await stack?.stop();
  await cluster?.close();
});

test("SIGTERM while a Job's Secret create is unanswered: the launch is retried before the controller exits; the Job has its Secret and the run completes", async () => {
  const isSecretCreate = (method: string, url: string) =>
    method === "POST" && url.startsWith(`/api/v1/namespaces/${ns}/secrets`);
  cluster.stallRequests(isSecretCreate);
  const controller = startJobModeController(cluster, stack, {
    ns,
    name: "stop-ctl",
    env: { DROVER_AGENT_KUBERNETES_API_TIMEOUT_SECONDS: "2" },
  });
  try {
    await agentRegistered(stack, "stop-ctl");
    assert.equal(
      (await stack.server.api(routes.createWorkspace, { body: { name: "stop-launch", pool: stack.pool } })).status,
      201,
    );
    const runId = await stack.startRun(join(repo, "examples", "hello"), "stop-launch", []);
    await eventually("the Secret create to be held", async () => cluster.stalledRequests >= 1);
    controller.child.kill("SIGTERM");
    // The held create times out (2 s); the retry is answered.
    cluster.stallRequests(undefined);
    const exit = await controller.exited;
    assert.equal(exit.code, 0, controller.output());
    assert.match(controller.output(), /launched Job/);
    const job = `drover-${runId}-plan-1`;
    const secret = await kube(cluster, "GET", `/api/v1/namespaces/${ns}/secrets/${job}-job`);
    assert.equal(secret.status, 200, `the Job's Secret exists\n${controller.output()}`);
    assert.equal((await kube(cluster, "GET", `/apis/batch/v1/namespaces/${ns}/jobs/${job}`)).status, 200);
    const run = await stack.waitForRun(runId, ["planned", "errored", "canceled"], 120_000);
    assert.equal(run.status, "planned", `${run.errorMessage}\n${controller.output()}`);
  } finally {
    cluster.stallRequests(undefined);
    await controller.stop("SIGKILL");
  }
});

test("a controller killed before a Job's Secret exists (past its stop budget): its replacement gets the run to complete", async () => {
  // This run gets to its second controller only once the killed one's lease on it expires: a
  // server of its own with a 15 s lease TTL instead of the default 30 s (10 s was tight at load 20+:
  // a started worker renews every TTL/2). (The first test keeps
  // the default: its Job's pod must start before the lease the exited controller left lapses.)
  // The controller renews an unstarted job every 2 s, a started worker every TTL/2.
  const quick = await startStack({ DROVER_LEASE_TTL_SECONDS: "15" });
  const isSecretCreate = (method: string, url: string) =>
    method === "POST" && url.startsWith(`/api/v1/namespaces/${ns}/secrets`);
  cluster.stallRequests(isSecretCreate);
  const first = startJobModeController(cluster, quick, { ns, name: "killed-ctl" });
  let second: ReturnType<typeof startJobModeController> | undefined;
  try {
    await agentRegistered(quick, "killed-ctl");
    assert.equal(
      (await quick.server.api(routes.createWorkspace, { body: { name: "killed-launch", pool: quick.pool } })).status,
      201,
    );
    const runId = await quick.startRun(join(repo, "examples", "hello"), "killed-launch", []);
    await eventually("the Secret create to be held", async () => cluster.stalledRequests >= 1);
    const job = `drover-${runId}-plan-1`;
    assert.equal(
      (await kube(cluster, "GET", `/apis/batch/v1/namespaces/${ns}/jobs/${job}`)).status,
      200,
      "the Job exists without its Secret",
    );
    await first.stop("SIGKILL");
    cluster.stallRequests(undefined);
    second = startJobModeController(cluster, quick, { ns, name: "killed-ctl" });
    const run = await quick.waitForRun(runId, ["planned", "errored", "canceled"], 120_000);
    assert.equal(run.status, "planned", `${run.errorMessage}\n${second.output()}`);
  } finally {
    cluster.stallRequests(undefined);
    await first.stop("SIGKILL");
    await second?.stop("SIGKILL");
    await quick.stop();
  }
});

test("a Job create whose answer is lost: the retry meets its own Job (409), completes the launch, and counts the Job launched once", async () => {
  const port = await freePort();
  let lost = 0;
  const isJobCreate = (method: string, url: string) =>
    method === "POST" && url.startsWith(`/apis/batch/v1/namespaces/${ns}/jobs`);
  cluster.loseAnswers((method, url) => isJobCreate(method, url) && lost++ === 0);
  const controller = startJobModeController(cluster, stack, {
    ns,
    name: "lost-answer-ctl",
    env: { DROVER_AGENT_KUBERNETES_API_TIMEOUT_SECONDS: "2", DROVER_AGENT_HEALTH_PORT: String(port) },
  });
  try {
    await agentRegistered(stack, "lost-answer-ctl");
    assert.equal(
      (await stack.server.api(routes.createWorkspace, { body: { name: "lost-answer", pool: stack.pool } })).status,
      201,
    );
    const runId = await stack.startRun(join(repo, "examples", "hello"), "lost-answer", []);
    const run = await stack.waitForRun(runId, ["planned", "errored", "canceled"], 120_000);
    assert.equal(run.status, "planned", `${run.errorMessage}\n${controller.output()}`);
    assert.ok(lost >= 2, "the create was sent again after the lost answer");
    assert.equal(
      await scrape(`http://127.0.0.1:${port}/metrics`, "drover_controller_jobs_launched_total"),
      1,
      controller.output(),
    );
  } finally {
    cluster.loseAnswers(undefined);
    await controller.stop("SIGKILL");
  }
});
