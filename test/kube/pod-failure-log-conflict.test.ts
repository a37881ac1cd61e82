import assert from "node:assert/strict";
import { after, before, test } from "node:test";
import { agentApi, routes } from "@drover/protocol";
import type { Proc } from "../support/processes.js";
import { startRouteFaultProxy, type HeldRequest, type RouteFaultProxy } from "../support/route-fault-proxy.js";
import { runLog, startStack, writeConfig, type Stack } from "../support/stack.js";
import { routeCall } from "../support/typed-api.js";
import { eventually, fastTimings, kube, startTestCluster, type TestCluster } from "./cluster.js";
import {
  agentRegistered,
  createAgentTask,
  podWorker,
  prepareNamespace,
  startJobModeController,
  terraformRunner,
} from "./agents.js";

// The controller reports a pod failure (here OOMKilled) into the run's log in two appends: one
// past any end, which the server answers log_gap naming where the log ends, then one there. The
// worker's output landing between the two makes the second a real log_conflict; the report must
// go on from the end the conflict names, not give up and delete the Job with nothing reported.
// A proxy in front of the server lands that output: it holds the server's log_gap answer to the
// controller until the test's own append, with the job's token, is stored.

const ns = "drover-conflict";
let cluster: TestCluster;
let stack: Stack;
let proxy: RouteFaultProxy;
let controller: Proc;

before(async () => {
  cluster = await startTestCluster({ timings: fastTimings });
  stack = await startStack();
  proxy = await startRouteFaultProxy(stack.server.url);
  await prepareNamespace(cluster, ns);
  await createAgentTask(cluster, ns, "task-template", [podWorker(), terraformRunner(stack)], {
    jobSpec: { ttlSecondsAfterFinished: 600 },
  });
  // The controller, and through it its task pods, reach the server through the proxy.
  controller = startJobModeController(cluster, stack, { ns, name: "conflict-ctl", env: { DROVER_URL: proxy.url } });
  await agentRegistered(stack, "conflict-ctl");
});

after(async () => {
  await controller?.stop("SIGKILL");
  await proxy?.close();
  await stack?.stop();
  await cluster?.close();
});

/** The body of the server's 409 to a log append. */
interface Refusal {
  error?: string;
  expectedOffset?: number;
}

const workerLine = "output of the worker, stored between the controller's two appends\n";

/** The job of the log append `request`: its id and its job token. */
function jobOf(request: HeldRequest): { id: string; token: string } {
  const id = /\/jobs\/([^/?]+)\/logs/.exec(request.url)?.[1] ?? "";
  return { id, token: String(request.headers.authorization).replace(/^Bearer /, "") };
}

/** Appends `data` to the log of `request`'s job at the log's end, as the server names it from `offset` on. */
async function appendAtEnd(request: HeldRequest, offset: number, data: string): Promise<void> {
  const { id, token } = jobOf(request);
  for (let at = offset, tries = 0; tries < 5; tries++) {
    const res = await routeCall(stack.server.url, routes.appendLog, {
      token,
      params: { id },
      query: { offset: at },
      body: Buffer.from(data),
    });
    if (res.status === 200) return;
    const refused = res.body as Refusal;
    if (res.status !== 409 || refused.expectedOffset === undefined) throw new Error(JSON.stringify(refused));
    at = refused.expectedOffset;
  }
  throw new Error("the test's append found no end of the log to land at");
}

test("a pod failure report answered log_conflict goes on from the log's end: the OOMKilled line lands and the job ends errored", async () => {
  // What the server answered each append of the controller's report line, in order.
  const answers: string[] = [];
  const failures: unknown[] = [];
  let landed = false;
  proxy.set("POST", new RegExp(`^${agentApi}/jobs/[^/]+/logs$`), {
    kind: "hold answer",
    until: async (request, answer) => {
      if (!request.body.toString("utf8").includes("OOMKilled")) return;
      const refused = answer.status === 200 ? undefined : (JSON.parse(answer.body.toString("utf8")) as Refusal);
      answers.push(refused?.error ?? "stored");
      if (landed || refused?.error !== "log_gap") return;
      landed = true;
      await appendAtEnd(request, Number(refused.expectedOffset), workerLine).catch((err: unknown) =>
        failures.push(err),
      );
    },
  });

  const res = await stack.server.api(routes.createWorkspace, { body: { name: "k8s-oom-conflict", pool: stack.pool } });
  assert.equal(res.status, 201, JSON.stringify(res.body));
  const files = {
    "main.tf":
      'resource "terraform_data" "long" {\n  input = timestamp()\n  provisioner "local-exec" {\n' +
      '    command = "echo started-long; sleep 60"\n  }\n}\n',
  };
  const runId = await stack.startRun(writeConfig(stack.dir, "k8s-oom-conflict", files), "k8s-oom-conflict", [
    "--auto-apply",
  ]);
  const pod = await eventually("a running apply pod", async () => {
    const pods = await kube(
      cluster,
      "GET",
      `/api/v1/namespaces/${ns}/pods?labelSelector=${encodeURIComponent(`drover.dev/run-id=${runId}`)}`,
    );
    const running = (pods.body.items as any[]).find(
      (p) => p.metadata.labels["drover.dev/phase"] === "apply" && p.status?.phase === "Running",
    );
    return running?.metadata.name as string | undefined;
  });
  await eventually("the provisioner to start", async () =>
    (await runLog(stack.server, runId, "apply")).includes("started-long"),
  );
  cluster.simulateOom(ns, pod, "runner");

  // The controller's verdict on its report, either way.
  await controller.waitFor(/reported a pod failure|pod failure not reported/);
  assert.deepEqual(failures, [], "the test's own append was stored");
  assert.deepEqual(
    answers,
    ["log_gap", "log_conflict", "stored"],
    `the report's appends and the server's answers\n--- the controller's output:\n${controller.output().slice(-4000)}`,
  );
  const run = await stack.waitForRun(runId, ["errored", "applied", "canceled"], 60_000);
  const log = await runLog(stack.server, runId, "apply");
  assert.equal(run.status, "errored", log);
  assert.equal(log.match(/OOMKilled/g)?.length, 1, log);
  const worker = log.indexOf(workerLine);
  assert.ok(worker >= 0 && worker < log.indexOf("OOMKilled"), `the report went after the worker's output:\n${log}`);
});
