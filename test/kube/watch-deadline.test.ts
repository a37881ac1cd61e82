import assert from "node:assert/strict";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";
import { after, before, test } from "node:test";
import { startStack, type Stack } from "../support/stack.js";
import { eventually, fastTimings, startTestCluster, type TestCluster } from "./cluster.js";
import {
  createAgentTask,
  prepareNamespace,
  startNodeModeAgents,
  terraformRunner,
  type NodeModeAgents,
} from "./agents.js";
import { routes } from "@drover/protocol";

// Watches have a deadline of their own. An API server (or a proxy before it) that keeps a watch
// open without events and without ending it at timeoutSeconds would otherwise hide every change
// from the controller and the node workers for good: here the node worker would never see the
// run pod it must prepare, and the run would wait in Init until its deadline.

const repo = join(dirname(fileURLToPath(import.meta.url)), "..", "..", "..");
const ns = "drover-watch-deadline";
let cluster: TestCluster;
let stack: Stack;
let agents: NodeModeAgents | undefined;

before(async () => {
  cluster = await startTestCluster({ timings: fastTimings, hostPaths: "real" });
  stack = await startStack();
  await prepareNamespace(cluster, ns);
  await createAgentTask(cluster, ns, "task-template", [terraformRunner(stack)]);
});

after(async () => {
  await agents?.stop();
  await stack?.stop();
  await cluster?.close();
});

test("watches the API server holds open without events or end are dropped at their deadline and re-listed: the run is taken and applied", async () => {
  // Every watch the controller and the node worker open now stalls; their lists still answer.
  cluster.stallWatches(true);
  agents = await startNodeModeAgents(cluster, stack, {
    ns,
    name: "deadline-ctl",
    template: "task-template",
    env: { DROVER_AGENT_KUBERNETES_WATCH_TIMEOUT_SECONDS: "1" },
  });
  // The node worker's pods watch and the controller's Jobs and pods watches.
  await eventually("the agents' watches to stall", async () => cluster.stalledWatches >= 3, 30_000);
  cluster.stallWatches(false);
  // The run pod appears only to a watch opened after the stall: the stalled ones must be given up.
  assert.equal(
    (await stack.server.api(routes.createWorkspace, { body: { name: "deadline", pool: stack.pool } })).status,
    201,
  );
  const runId = await stack.startRun(join(repo, "examples", "hello"), "deadline", ["--auto-apply"]);
  const run = await stack.waitForRun(runId, ["applied", "errored", "canceled"], 90_000);
  const logs = `node worker:\n${agents.nodeWorker.output()}\ncontroller:\n${agents.controller.output()}`;
  assert.equal(run.status, "applied", logs);
  assert.equal(cluster.stalledWatches, 0, "every stalled watch was closed by its client");
  // Dropped at timeoutSeconds (1 s) plus the grace, and re-listed.
  assert.match(
    agents.nodeWorker.output(),
    /the watch of pods was still open 2 s after it asked the API server to end it \(no events or end arrived\): dropped; re-listing/,
    logs,
  );
  assert.match(agents.controller.output(), /the watch of jobs was still open 2 s after/, logs);
});

test("a watch the API server never answers (not even its headers) is closed at its deadline, not left open beside the next one", async () => {
  await agents?.stop();
  agents = undefined;
  // Every watch now waits for response headers that never come; lists still answer.
  cluster.stallRequests((method, url) => method === "GET" && /[?&]watch=(true|1)(&|$)/.test(url));
  agents = await startNodeModeAgents(cluster, stack, {
    ns,
    name: "headers-ctl",
    template: "task-template",
    env: { DROVER_AGENT_KUBERNETES_WATCH_TIMEOUT_SECONDS: "1" },
  });
  const a = agents;
  // Three deadlines of the controller's Jobs watch: each time a new watch is opened.
  await eventually(
    "three watch deadlines",
    async () => (a.controller.output().match(/the watch of jobs was still open 2 s after/g)?.length ?? 0) >= 3,
    60_000,
  );
  // Four informers (the node worker's pods; the controller's Jobs, pods and task template): at
  // most one held watch each, plus one being replaced — not one more per deadline passed.
  assert.ok(cluster.stalledRequests <= 8, `held watches pile up: ${cluster.stalledRequests}`);
  cluster.stallRequests(undefined);
  await eventually("every held watch closed by its client", async () => cluster.stalledRequests === 0, 30_000).catch(
    (e: Error) => assert.fail(`${e.message}: ${cluster.stalledRequests} still open\n${a.controller.output()}`),
  );
  assert.equal(
    (await stack.server.api(routes.createWorkspace, { body: { name: "headers", pool: stack.pool } })).status,
    201,
  );
  const runId = await stack.startRun(join(repo, "examples", "hello"), "headers", ["--auto-apply"]);
  const run = await stack.waitForRun(runId, ["applied", "errored", "canceled"], 90_000);
  assert.equal(run.status, "applied", `node worker:\n${a.nodeWorker.output()}\ncontroller:\n${a.controller.output()}`);
});
