import assert from "node:assert/strict";
import { randomBytes } from "node:crypto";
import { mkdirSync, readdirSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { after, before, test } from "node:test";
import { runLog, startStack, type Stack } from "../support/stack.js";
import { fastTimings, kube, startTestCluster, type TestCluster } from "./cluster.js";
import { fakeExecLoop, prepareNamespace, runnerImage, startNodeModeAgents, type NodeModeAgents } from "./agents.js";
import { routes } from "@drover/protocol";

// agent-k8s node mode: a run pod writes its run directory, which the node's worker then reads
// and writes. Here the runner container is an attacker playing the exec-loop: it plants links
// where the worker will look, and the real node worker must neither ship a file it can read
// (a stand-in for its ServiceAccount token) into the run, nor write outside the run.

const ns = "drover-isolation";
let cluster: TestCluster;
let stack: Stack;
let agents: NodeModeAgents;
let secretPath: string;
let secret: string;
let victim: string;
let attacker: string;
let config: string;

// The attacking runner: answers every step with exit 0 and, per ATTACK, plants a link first.
const attackerScript = fakeExecLoop(`    case "$ATTACK" in
      output) [ "$n" = 1 ] && ln -s "$SECRET" "$s/output" ;;
      stdout) [ "$n" = 1 ] && ln -s "$SECRET" "$s/stdout" ;;
      steps) [ "$n" = 1 ] && ln -s "$VICTIM" "$S/2" ;;
      swap) if [ "$n" = 1 ]; then mv "$S" "$D/steps.moved" && ln -s "$VICTIM" "$S"; S="$D/steps.moved"; s="$S/1"; fi ;;
      plan) grep -q "'plan'" "$s/script.sh" && for d in "$R"/*/; do ln -s "$SECRET" "$d/plan.tfplan"; done ;;
      shutdown) grep -q "'show'" "$s/script.sh" && mkdir "$D/shutdown" ;;
    esac`);

async function setAttack(attack: string): Promise<void> {
  const body = {
    apiVersion: "drover.dev/v1alpha1",
    kind: "AgentTask",
    metadata: { name: "attack", namespace: ns },
    spec: {
      jobTemplate: {
        template: {
          spec: {
            containers: [
              {
                name: "runner",
                image: runnerImage,
                command: ["/bin/sh", attacker],
                env: [
                  { name: "ATTACK", value: attack },
                  { name: "SECRET", value: secretPath },
                  { name: "VICTIM", value: victim },
                ],
              },
            ],
          },
        },
      },
    },
  };
  const path = `/apis/drover.dev/v1alpha1/namespaces/${ns}/agenttasks`;
  await kube(cluster, "DELETE", `${path}/attack`);
  assert.equal((await kube(cluster, "POST", path, body)).status, 201);
}

/** Runs one plan under the attacking runner; resolves with the run, its plan log and the controller+worker output. */
async function attackRun(attack: string): Promise<{ run: any; log: string }> {
  await setAttack(attack);
  const workspace = `iso-${attack}`;
  assert.equal(
    (await stack.server.api(routes.createWorkspace, { body: { name: workspace, pool: stack.pool } })).status,
    201,
  );
  const runId = await stack.startRun(config, workspace);
  const run = await stack
    .waitForRun(runId, ["planned", "errored", "canceled", "planned_and_finished"], 60_000)
    .catch((err: Error) => {
      throw new Error(
        `${err.message}\nnode worker:\n${agents.nodeWorker.output()}\ncontroller:\n${agents.controller.output()}`,
      );
    });
  return { run, log: await runLog(stack.server, runId, "plan") };
}

before(async () => {
  cluster = await startTestCluster({ timings: fastTimings, hostPaths: "real" });
  stack = await startStack();
  secret = `SA-TOKEN-${randomBytes(8).toString("hex")}`;
  secretPath = join(stack.dir, "sa-token");
  writeFileSync(secretPath, secret, { mode: 0o600 });
  victim = join(stack.dir, "another-run");
  mkdirSync(victim);
  attacker = join(stack.dir, "attacker.sh");
  writeFileSync(attacker, attackerScript);
  config = join(stack.dir, "cfg");
  mkdirSync(config);
  writeFileSync(join(config, "main.tf"), 'resource "terraform_data" "x" {}\n');
  await prepareNamespace(cluster, ns);
  agents = await startNodeModeAgents(cluster, stack, { ns, name: "iso-ctl", template: "attack" });
});

after(async () => {
  await agents?.stop();
  await stack?.stop();
  await cluster?.close();
});

test("a link planted at steps/N/output does not ship the worker's files into the run log", async () => {
  const { run, log } = await attackRun("output");
  assert.equal(run.status, "errored");
  assert.match(run.errorMessage ?? "", /refused .*steps\/1\/output: it is a symbolic link/);
  assert.ok(!log.includes(secret), "the secret file is not in the log");
  assert.ok(!JSON.stringify(run).includes(secret));
});

test("a link planted at steps/N/stdout (a captured step's data) is refused", async () => {
  const { run, log } = await attackRun("stdout");
  assert.equal(run.status, "errored");
  assert.match(run.errorMessage ?? "", /refused .*steps\/1\/stdout: it is a symbolic link/);
  assert.ok(!log.includes(secret) && !JSON.stringify(run).includes(secret));
});

test("a symlinked steps/N does not make the worker write into another directory", async () => {
  const { run } = await attackRun("steps");
  assert.equal(run.status, "errored");
  assert.match(run.errorMessage ?? "", /refused .*steps\/2: it already exists but must be new/);
  assert.deepEqual(readdirSync(victim), [], "nothing was written through the link");
});

test("swapping the steps directory for a link leaves the worker writing into the run's own directory", async () => {
  await attackRun("swap");
  assert.deepEqual(readdirSync(victim), [], "nothing was written through the link");
});

test("a link planted at the plan file does not upload the worker's files as the plan", async () => {
  const { run } = await attackRun("plan");
  assert.equal(run.status, "errored");
  assert.match(run.errorMessage ?? "", /refused .*plan\.tfplan: it is a symbolic link/);
  const plan = await stack.server.api(routes.runPlan, { params: { id: run.id } });
  assert.ok(!JSON.stringify(plan.body ?? "").includes(secret));
});

test("a run blocking the worker's shutdown file ends only itself; the node worker keeps running", async () => {
  const { run } = await attackRun("shutdown");
  assert.ok(["errored", "planned", "planned_and_finished"].includes(run.status), run.status);
  const next = await attackRun("none");
  assert.ok(["errored", "planned", "planned_and_finished"].includes(next.run.status), next.run.status);
  assert.equal(
    await Promise.race([agents.nodeWorker.exited.then(() => "exited"), Promise.resolve("running")]),
    "running",
    "the node worker is still running",
  );
  assert.equal(
    (agents.nodeWorker.output().match(/supervising a run pod on this node/g) ?? []).length,
    7,
    agents.nodeWorker.output(),
  );
});
