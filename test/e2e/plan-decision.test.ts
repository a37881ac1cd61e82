import assert from "node:assert/strict";
import { chmodSync, mkdirSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { after, before, test } from "node:test";
import { routes, summarizePlan, type PlanSummary } from "@drover/protocol";
import { runLog, startStack, writeConfig, type Stack } from "../support/stack.js";

// The plan job decides from terraform's own verdict (`plan -detailed-exitcode` and its `Plan:`
// line), and renders the plan JSON itself before it finishes, whatever comes next.
// Real server, real agent, real terraform.
let stack: Stack;
/** The starts and ends of each terraform the agent runs (a wrapper first on PATH). */
let started: string;

before(async () => {
  stack = await startStack();
  const bin = join(stack.dir, "wrapper-bin");
  mkdirSync(bin);
  started = join(stack.dir, "terraform-started");
  writeFileSync(started, "");
  writeFileSync(
    join(bin, "terraform"),
    [
      "#!/bin/sh",
      `log='${started}'`,
      'echo "start $*" >> "$log"',
      // While `<file>.failshow` exists, `show` fails.
      `if [ "$1" = show ] && [ -e "$log.failshow" ]; then echo "failed show" >> "$log"; echo "Error: cannot read the plan" >&2; exit 1; fi`,
      '/usr/local/bin/terraform "$@"',
      "rc=$?",
      // While `<file>.holdplan` exists, a finished plan waits for a signal (or 30 s) and then exits with the plan's code.
      `if [ "$1" = plan ] && [ -e "$log.holdplan" ]; then echo "held plan" >> "$log"; trap 'exit $rc' INT TERM; i=0; while [ $i -lt 600 ]; do sleep 0.05; i=$((i+1)); done; fi`,
      'echo "end $1" >> "$log"',
      "exit $rc",
      "",
    ].join("\n"),
  );
  chmodSync(join(bin, "terraform"), 0o755);
  await stack.startAgent("decider", { PATH: `${bin}:${process.env.PATH ?? ""}` });
});
after(() => stack?.stop());

async function workspace(name: string): Promise<void> {
  const res = await stack.server.api(routes.createWorkspace, { body: { name, pool: stack.pool } });
  assert.equal(res.status, 201, JSON.stringify(res.body));
}

/** The run's stored plan JSON. */
async function planJson(runId: string): Promise<unknown> {
  const res = await stack.server.api(routes.runPlan, { params: { id: runId } });
  assert.equal(res.status, 200, JSON.stringify(res.body));
  return typeof res.body === "string" || Buffer.isBuffer(res.body) ? JSON.parse(res.body.toString()) : res.body;
}

async function summary(runId: string): Promise<PlanSummary | null> {
  return (await stack.server.api(routes.getRun, { params: { id: runId } })).body.planSummary as PlanSummary | null;
}

const three = 'resource "terraform_data" "n" {\n  count = 3\n  input = count.index\n}\n';

test("auto-apply with changes: the plan job renders the plan JSON before the apply starts, and the run's counts agree with it", async () => {
  await workspace("auto");
  writeFileSync(started, "");
  const dir = writeConfig(stack.dir, "auto", { "main.tf": three });
  const runId = await stack.startRun(dir, "auto", ["--auto-apply"]);
  const run = await stack.waitForRun(runId, ["applied", "errored", "planned_and_finished"]);
  assert.equal(run.status, "applied");
  const planLog = await runLog(stack.server, runId, "plan");
  assert.ok(planLog.includes("-detailed-exitcode"), planLog);
  const events = readFileSync(started, "utf8").split("\n");
  assert.equal(events.filter((l) => l.startsWith("start show -json ")).length, 1, events.join("\n"));
  assert.ok(
    events.indexOf("end show") >= 0 &&
      events.indexOf("end show") < events.findIndex((l) => l.startsWith("start apply")),
    `the plan JSON is rendered before the apply:\n${events.join("\n")}`,
  );
  const json = await planJson(runId);
  assert.deepEqual(await summary(runId), { add: 3, change: 0, destroy: 0, hasChanges: true });
  assert.deepEqual(
    summarizePlan(json),
    await summary(runId),
    "the counts terraform's summary line gave are the JSON's",
  );
});

test("a run that waits for confirmation has its plan JSON when it is planned; confirmed, it applies", async () => {
  await workspace("confirm");
  const dir = writeConfig(stack.dir, "confirm", { "main.tf": three });
  const runId = await stack.startRun(dir, "confirm");
  assert.equal((await stack.waitForRun(runId, ["planned", "errored", "planned_and_finished"])).status, "planned");
  // Straight from the store: no apply job exists that could still bring it.
  const json = await planJson(runId);
  assert.deepEqual(summarizePlan(json), { add: 3, change: 0, destroy: 0, hasChanges: true });
  assert.deepEqual(await summary(runId), summarizePlan(json));
  const confirmed = await stack.server.api(routes.confirmRun, { params: { id: runId } });
  assert.equal(confirmed.status, 200, JSON.stringify(confirmed.body));
  assert.equal((await stack.waitForRun(runId, ["applied", "errored"])).status, "applied");
  assert.deepEqual(
    summarizePlan(await planJson(runId)),
    { add: 3, change: 0, destroy: 0, hasChanges: true },
    "the apply job left the stored JSON alone",
  );
});

test("no changes: planned_and_finished with its plan JSON; a move-only plan is applied", async () => {
  await workspace("still");
  const first = await stack.startRun(
    writeConfig(stack.dir, "still-1", { "main.tf": 'resource "terraform_data" "a" {\n  input = "x"\n}\n' }),
    "still",
    ["--auto-apply"],
  );
  assert.equal((await stack.waitForRun(first, ["applied", "errored"])).status, "applied");

  const same = await stack.startRun(
    writeConfig(stack.dir, "still-2", { "main.tf": 'resource "terraform_data" "a" {\n  input = "x"\n}\n' }),
    "still",
    ["--auto-apply"],
  );
  assert.equal(
    (await stack.waitForRun(same, ["applied", "errored", "planned_and_finished"])).status,
    "planned_and_finished",
  );
  assert.deepEqual(summarizePlan(await planJson(same)), { add: 0, change: 0, destroy: 0, hasChanges: false });
  assert.deepEqual(await summary(same), { add: 0, change: 0, destroy: 0, hasChanges: false });

  // terraform says a move is a change (exit 2) though its `Plan:` line counts nothing.
  const moved = await stack.startRun(
    writeConfig(stack.dir, "still-3", {
      "main.tf":
        'resource "terraform_data" "b" {\n  input = "x"\n}\nmoved {\n  from = terraform_data.a\n  to   = terraform_data.b\n}\n',
    }),
    "still",
    ["--auto-apply"],
  );
  assert.equal((await stack.waitForRun(moved, ["applied", "errored", "planned_and_finished"])).status, "applied");
  assert.deepEqual(await summary(moved), { add: 0, change: 0, destroy: 0, hasChanges: true });
  assert.deepEqual(summarizePlan(await planJson(moved)), { add: 0, change: 0, destroy: 0, hasChanges: true });
});

test("a plan-only run keeps its JSON; a failed plan (exit 1) still errors the run", async () => {
  await workspace("only");
  const only = await stack.startRun(writeConfig(stack.dir, "only", { "main.tf": three }), "only", ["--plan-only"]);
  assert.equal((await stack.waitForRun(only, ["planned_and_finished", "errored"])).status, "planned_and_finished");
  assert.deepEqual(summarizePlan(await planJson(only)), { add: 3, change: 0, destroy: 0, hasChanges: true });
  assert.deepEqual(await summary(only), { add: 3, change: 0, destroy: 0, hasChanges: true });

  await workspace("fails");
  const failing = await stack.startRun(
    writeConfig(stack.dir, "fails", {
      "main.tf": 'resource "terraform_data" "x" {\n  input = file("/nonexistent/drover")\n}\n',
    }),
    "fails",
    ["--auto-apply"],
  );
  const run = await stack.waitForRun(failing, ["errored", "applied", "planned_and_finished"]);
  assert.equal(run.status, "errored");
  assert.match(await runLog(stack.server, failing, "plan"), /Invalid function argument|no file exists/i);
  assert.equal(await summary(failing), null);
});

test("a cancel that arrives as the plan exits with changes cancels the plan job: it never finishes 'succeeded'", async () => {
  await workspace("late-cancel");
  writeFileSync(started, "");
  writeFileSync(`${started}.holdplan`, "");
  try {
    const runId = await stack.startRun(writeConfig(stack.dir, "late-cancel", { "main.tf": three }), "late-cancel", [
      "--auto-apply",
    ]);
    // terraform's plan has ended (exit 2); the wrapper holds its exit until the cancel's signal.
    await waitUntil(() => readFileSync(started, "utf8").includes("held plan"));
    const canceled = await stack.server.api(routes.cancelRun, { params: { id: runId } });
    assert.ok(canceled.status < 300, JSON.stringify(canceled.body));
    assert.equal(
      (await stack.waitForRun(runId, ["canceled", "applied", "errored", "planned_and_finished"])).status,
      "canceled",
    );
    const jobs = (
      (await stack.server.api(routes.listRunJobs, { params: { id: runId } })).body as {
        items: Array<{ phase: string; status: string }>;
      }
    ).items;
    assert.deepEqual(
      jobs.map((j) => [j.phase, j.status]),
      [["plan", "canceled"]],
    );
  } finally {
    rmSync(`${started}.holdplan`, { force: true });
  }
});

/** Waits (polling, up to 60 s) until `check` holds. */
async function waitUntil(check: () => boolean): Promise<void> {
  const deadline = Date.now() + 60_000;
  while (!check()) {
    assert.ok(Date.now() < deadline, "condition not reached in 60 s");
    await new Promise((r) => setTimeout(r, 50));
  }
}

test("a plan whose JSON cannot be rendered errors the run in the plan job's uploads stage: nothing is applied", async () => {
  await workspace("no-show");
  writeFileSync(started, "");
  writeFileSync(`${started}.failshow`, "");
  try {
    const runId = await stack.startRun(writeConfig(stack.dir, "no-show", { "main.tf": three }), "no-show", [
      "--auto-apply",
    ]);
    assert.equal((await stack.waitForRun(runId, ["applied", "errored", "planned_and_finished"])).status, "errored");
    assert.match(await runLog(stack.server, runId, "plan"), /\[drover\] plan failed in stage uploads: terraform show/);
    assert.ok(!readFileSync(started, "utf8").includes("start apply"), "no apply ran");
  } finally {
    rmSync(`${started}.failshow`, { force: true });
  }
});
