import assert from "node:assert/strict";
import { writeFileSync } from "node:fs";
import { fileURLToPath } from "node:url";
import { dirname, join } from "node:path";
import { after, before, test } from "node:test";
import { runLog, startStack, writeConfig, type Stack } from "../support/stack.js";
import { routes } from "@drover/protocol";

// Real server, real agent process, real CLI process, real terraform.

const repo = join(dirname(fileURLToPath(import.meta.url)), "..", "..", "..");
const hello = join(repo, "examples", "hello");
let stack: Stack;

before(async () => {
  stack = await startStack();
  await stack.startAgent("runner", { DROVER_AGENT_CONCURRENCY: "2" });
});
after(() => stack?.stop());

async function workspace(name: string) {
  const res = await stack.server.api(routes.createWorkspace, { body: { name, pool: stack.pool } });
  assert.equal(res.status, 201, JSON.stringify(res.body));
  return res.body.id as string;
}

test("plan+apply of examples/hello succeeds through the CLI and its state is stored", async () => {
  const wsId = await workspace("hello");
  // The binary itself, end to end: a real `drover` process follows the run to its end.
  const res = await stack.cli(["run", "start", hello, "--workspace", "hello", "--auto-apply"], { subprocess: true });
  assert.equal(res.code, 0, `${res.stdout}\n${res.stderr}`);
  assert.match(res.stdout, /Plan: \d+ to add/, "the plan log streamed to the terminal");
  assert.match(res.stdout, /Apply complete!/, "the apply log streamed to the terminal");
  const versions = await stack.server.api(routes.listStateVersions, { params: { ws: wsId } });
  assert.ok(versions.body.items.length >= 1, "terraform stored its state in the server");
  const state = await stack.server.api(routes.downloadStateVersion, { params: { id: versions.body.items[0].id } });
  assert.ok(state.body.resources.some((r: any) => r.type === "terraform_data"));
  const out = await stack.cli(["output", "--workspace", "hello", "--json"]);
  assert.equal(out.code, 0, out.stderr);
  assert.deepEqual(
    JSON.parse(out.stdout),
    [
      { name: "greeting", sensitive: false, type: "string", value: "Hello from Drover" },
      { name: "token", sensitive: true, type: "string", value: null },
    ],
    "outputs were recorded; the sensitive one is masked",
  );
  const ws = await stack.server.api(routes.getWorkspace, { params: { ws: wsId } });
  assert.equal(ws.body.stateLocked, false);
  assert.equal(ws.body.currentRunId, null);
});

test("a plan error fails the run with terraform's message in the log", async () => {
  await workspace("broken");
  const dir = writeConfig(stack.dir, "broken", {
    "main.tf": 'resource "terraform_data" "x" {\n  input = var.not_declared\n}\n',
  });
  const res = await stack.cli(["run", "start", dir, "--workspace", "broken"]);
  assert.equal(res.code, 1, `${res.stdout}\n${res.stderr}`);
  const runs = await stack.server.api(routes.listRuns, { query: { workspace: "broken" } });
  const run = runs.body.items[0];
  assert.equal(run.status, "errored");
  const log = await runLog(stack.server, run.id, "plan");
  assert.match(log, /Reference to undeclared input variable/);
});

test("a second run on the same workspace waits for the first", async () => {
  await workspace("queue");
  // The first run's apply holds until the test creates `release`: the second run is created
  // while the first surely runs, however slow the machine (was: a 2 s sleep, raced by the CLI).
  const release = join(stack.dir, "release-queue");
  const dir = writeConfig(stack.dir, "queue", {
    "main.tf": `resource "terraform_data" "slow" {\n  input = timestamp()\n  provisioner "local-exec" {\n    command = "echo holding; while [ ! -e '${release}' ]; do sleep 0.1; done"\n  }\n}\n`,
  });
  const first = await stack.startRun(dir, "queue", ["--auto-apply"]);
  for (
    const deadline = Date.now() + 90_000;
    !(await runLog(stack.server, first, "apply")).includes("(local-exec): holding");
  ) {
    assert.ok(Date.now() < deadline, "the first run's apply never started");
    await new Promise((r) => setTimeout(r, 100));
  }
  const second = await stack.startRun(dir, "queue", ["--auto-apply"]);
  assert.equal((await stack.server.api(routes.getRun, { params: { id: second } })).body.status, "pending");
  writeFileSync(release, "");
  await stack.waitForRun(first, ["applied"]);
  const done = await stack.waitForRun(second, ["applied"]);
  const firstJobs = (await stack.server.api(routes.listRunJobs, { params: { id: first } })).body.items;
  const secondJobs = (await stack.server.api(routes.listRunJobs, { params: { id: second } })).body.items;
  const firstEnded = Date.parse(firstJobs.at(-1).finishedAt);
  const secondStarted = Date.parse(secondJobs[0].startedAt);
  assert.ok(secondStarted >= firstEnded, "the second run started only after the first finished");
  assert.equal(done.status, "applied");
});

test("cancel during a long local-exec interrupts it: the run ends canceled with the lock released", async () => {
  const wsId = await workspace("cancel");
  // A provisioner that never ends on its own: only the cancel can end this run, so no time
  // bound is needed to show the cancel interrupted it (a fixed bound failed on a loaded machine).
  const dir = writeConfig(stack.dir, "cancel", {
    "main.tf":
      'resource "terraform_data" "long" {\n  provisioner "local-exec" {\n    command = "echo holding; while :; do sleep 1; done"\n  }\n}\n',
  });
  const runId = await stack.startRun(dir, "cancel", ["--auto-apply"]);
  for (
    const deadline = Date.now() + 90_000;
    !(await runLog(stack.server, runId, "apply")).includes("(local-exec): holding");
  ) {
    assert.ok(Date.now() < deadline, "the provisioner never started");
    await new Promise((r) => setTimeout(r, 100));
  }
  assert.equal(
    (await stack.server.api(routes.getWorkspace, { params: { ws: wsId } })).body.stateLocked,
    true,
    "terraform holds the lock while applying",
  );
  const res = await stack.cli(["run", "cancel", runId]);
  assert.equal(res.code, 0, res.stderr);
  const run = await stack.waitForRun(runId, ["canceled", "errored", "applied"]);
  assert.equal(run.status, "canceled");
  const ws = await stack.server.api(routes.getWorkspace, { params: { ws: wsId } });
  assert.equal(ws.body.stateLocked, false, "the state lock was released");
  assert.equal(ws.body.currentRunId, null);
  assert.match(await runLog(stack.server, runId, "apply"), /Interrupt received|interrupt|cancel/i);
});

test("a sensitive variable's value never appears in any log or API response", async () => {
  const secret = "hunter2-VERY-secret-9f8e7d";
  const wsId = await workspace("secrets");
  const set = await stack.cli(["workspace", "set-var", "secrets", `db_password=${secret}`, "--sensitive"]);
  assert.equal(set.code, 0, set.stderr);
  assert.ok(!set.stdout.includes(secret));
  await stack.cli(["workspace", "set-var", "secrets", `TF_VAR_env_secret=${secret}`, "--env", "--sensitive"]);
  const dir = writeConfig(stack.dir, "secrets", {
    "main.tf": `variable "db_password" {
  type = string
}
resource "terraform_data" "leaky" {
  input = nonsensitive(var.db_password)
  provisioner "local-exec" {
    command = "echo password is \${nonsensitive(var.db_password)}; echo env is $TF_VAR_env_secret"
  }
}
output "pw" {
  value     = var.db_password
  sensitive = true
}
`,
  });
  const res = await stack.cli(["run", "start", dir, "--workspace", "secrets", "--auto-apply"]);
  assert.equal(res.code, 0, `${res.stdout}\n${res.stderr}`);
  assert.ok(!res.stdout.includes(secret) && !res.stderr.includes(secret), "not in the followed log");
  const runId = (await stack.server.api(routes.listRuns, { query: { workspace: "secrets" } })).body.items[0].id;
  const planLog = await runLog(stack.server, runId, "plan");
  const applyLog = await runLog(stack.server, runId, "apply");
  assert.match(applyLog, /password is \*\*\*/, "the echoed value was redacted, not dropped");
  const responses = [
    planLog,
    applyLog,
    JSON.stringify((await stack.server.api(routes.listVariables, { params: { ws: wsId } })).body),
    JSON.stringify((await stack.server.api(routes.getRun, { params: { id: runId } })).body),
    JSON.stringify((await stack.server.api(routes.runPlan, { params: { id: runId } })).body),
    JSON.stringify((await stack.server.api(routes.workspaceOutputs, { params: { ws: wsId } })).body),
    (await stack.cli(["output", "--workspace", "secrets", "--json"])).stdout,
    (await stack.cli(["workspace", "show", "secrets", "--json"])).stdout,
    (await stack.cli(["run", "show", runId, "--json"])).stdout,
  ];
  for (const [i, text] of responses.entries()) assert.ok(!text.includes(secret), `response #${i} leaked the secret`);
});
