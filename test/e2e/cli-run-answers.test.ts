import assert from "node:assert/strict";
import { join } from "node:path";
import { after, before, test } from "node:test";
import { routes } from "@drover/protocol";
import { startStack, writeConfig, type Stack } from "../support/stack.js";

// What `drover run …` answers a user: exit codes of a resumed follow, a run waiting for its
// confirmation, a path that is not a configuration directory, a bad flag value, a run's message.

let stack: Stack;
before(async () => {
  stack = await startStack();
  await stack.startAgent("answerer");
});
after(() => stack?.stop());

async function workspace(name: string): Promise<void> {
  const res = await stack.server.api(routes.createWorkspace, { body: { name, pool: stack.pool } });
  assert.equal(res.status, 201, JSON.stringify(res.body));
}

test("run start names a path that does not exist, and a file given for its directory", async () => {
  await workspace("paths");
  const missing = join(stack.dir, "nonexistent");
  const gone = await stack.cli(["run", "start", missing, "--workspace", "paths"]);
  assert.equal(gone.code, 1, gone.stderr);
  assert.match(gone.stderr, new RegExp(`${missing} does not exist`));
  assert.doesNotMatch(gone.stderr, /no \.tf/);

  const dir = writeConfig(stack.dir, "as-file", { "main.tf": 'resource "terraform_data" "f" {}\n' });
  const file = join(dir, "main.tf");
  const asFile = await stack.cli(["run", "start", file, "--workspace", "paths"]);
  assert.equal(asFile.code, 1, asFile.stderr);
  assert.match(asFile.stderr, new RegExp(`${file} is not a directory`));
  assert.match(asFile.stderr, new RegExp(`drover run start ${dir} `));
  assert.doesNotMatch(asFile.stderr, /no \.tf/);
  const versions = await stack.server.api(routes.listConfigurationVersions, { params: { ws: "paths" } });
  assert.deepEqual(versions.body.items, [], "nothing was uploaded");
});

test("run list refuses a --limit outside 1 to 1000, and run start --plan-only with --auto-apply, before any request, exit 2", async () => {
  for (const limit of ["abc", "5000", "0", "2.5"]) {
    // No server answers there: a request would fail otherwise (server_unreachable, exit 1).
    const res = await stack.cli(["run", "list", "--limit", limit, "--url", "http://127.0.0.1:1"]);
    assert.equal(res.code, 2, `${limit}: ${res.stderr}`);
    assert.match(res.stderr, /--limit/);
    assert.match(res.stderr, /from 1 to 1000/);
    assert.doesNotMatch(res.stderr, /invalid query|server_unreachable/);
  }
  const both = await stack.cli(["run", "start", stack.dir, "--workspace", "any", "--plan-only", "--auto-apply"]);
  assert.equal(both.code, 2, both.stderr);
  assert.match(
    both.stderr,
    /--plan-only never applies and --auto-apply applies without confirmation: give one of them/,
  );
  const fine = await stack.cli(["run", "list", "--limit", "5"]);
  assert.equal(fine.code, 0, fine.stderr);
});

test("run show and run list show the run's message and whether it is plan-only", async () => {
  await workspace("described");
  const dir = writeConfig(stack.dir, "described", { "main.tf": 'resource "terraform_data" "d" {}\n' });
  const runId = await stack.startRun(dir, "described", ["--plan-only", "--message", "try the new subnet"]);
  await stack.waitForRun(runId, ["planned_and_finished"]);
  const shown = await stack.cli(["run", "show", runId]);
  assert.equal(shown.code, 0, shown.stderr);
  assert.match(shown.stdout, /^Message: try the new subnet$/m);
  assert.match(shown.stdout, /^Plan only: /m);
  assert.match(shown.stdout, /^Created: \d{4}-\d\d-\d\dT/m);

  const listed = await stack.cli(["run", "list", "--workspace", "described"]);
  assert.equal(listed.code, 0, listed.stderr);
  const [header, row] = listed.stdout.trim().split("\n");
  assert.match(header ?? "", /^RUN\s+WORKSPACE\s+STATUS\s+CREATED\s+COMMIT\s+MESSAGE$/);
  assert.match(row ?? "", new RegExp(`^${runId}\\s.*\\s\\(plan only\\) try the new subnet$`));
});

test("run logs of a run waiting for confirmation prints its plan and says how to confirm or discard it", async () => {
  await workspace("waiting");
  const dir = writeConfig(stack.dir, "waiting", { "main.tf": 'resource "terraform_data" "w" {}\n' });
  const runId = await stack.startRun(dir, "waiting");
  await stack.waitForRun(runId, ["planned"]);
  for (const flags of [[], ["--phase", "apply"]]) {
    const res = await stack.cli(["run", "logs", runId, ...flags]);
    assert.equal(res.code, 0, res.stderr);
    assert.doesNotMatch(res.stderr, /not finished yet/, flags.join(" "));
    assert.match(res.stderr, new RegExp(`run ${runId} waits for confirmation`));
    assert.match(res.stderr, new RegExp(`drover run confirm ${runId}`));
    assert.match(res.stderr, new RegExp(`drover run discard ${runId}`));
    if (flags.length === 0) assert.match(res.stdout, /Plan: 1 to add/);
    else assert.match(res.stderr, new RegExp(`drover run logs ${runId} --phase plan`));
  }
  await stack.server.api(routes.discardRun, { params: { id: runId } });
});

const failingApply = `resource "terraform_data" "boom" {\n  provisioner "local-exec" {\n    command = "exit 7"\n  }\n}\n`;

test("run logs --follow exits as run start would for the same run: 1 errored, 2 waiting, 0 applied", async () => {
  await workspace("followed");
  const failing = writeConfig(stack.dir, "followed-failing", { "main.tf": failingApply });
  const failed = await stack.startRun(failing, "followed", ["--auto-apply"]);
  const followedFailed = await stack.cli(["run", "logs", failed, "--follow"]);
  assert.equal(followedFailed.code, 1, followedFailed.stdout + followedFailed.stderr);
  const asJson = await stack.cli(["run", "logs", failed, "--follow", "--json"]);
  assert.equal(asJson.code, 1, asJson.stderr);

  const good = writeConfig(stack.dir, "followed-good", { "main.tf": 'resource "terraform_data" "ok" {}\n' });
  const waiting = await stack.startRun(good, "followed");
  const followedWaiting = await stack.cli(["run", "logs", waiting, "--follow"]);
  assert.equal(followedWaiting.code, 2, followedWaiting.stdout + followedWaiting.stderr);
  assert.match(followedWaiting.stderr, new RegExp(`drover run confirm ${waiting}`));
  await stack.server.api(routes.discardRun, { params: { id: waiting } });

  const applied = await stack.startRun(good, "followed", ["--auto-apply"]);
  const followedApplied = await stack.cli(["run", "logs", applied, "--follow"]);
  assert.equal(followedApplied.code, 0, followedApplied.stdout + followedApplied.stderr);
});

test("run start says so when no agent of the workspace's pool is online, and not when one is", async () => {
  await stack.server.api(routes.createPool, { body: { name: "unstaffed" } });
  const created = await stack.server.api(routes.createWorkspace, { body: { name: "idle", pool: "unstaffed" } });
  assert.equal(created.status, 201, JSON.stringify(created.body));
  const dir = writeConfig(stack.dir, "idle", { "main.tf": 'resource "terraform_data" "i" {}\n' });
  const waiting = await stack.cli(["run", "start", dir, "--workspace", "idle", "--no-follow"]);
  assert.equal(waiting.code, 0, waiting.stderr);
  assert.match(
    waiting.stderr,
    /no agent of pool unstaffed is online \(0 registered\): the run waits until one takes it/,
  );
  assert.match(waiting.stderr, /drover token create --pool unstaffed > pool-token; drover agent run --token-file/);
  const runId = /Run (\S+) created/.exec(waiting.stdout)?.[1];
  // --no-follow: the one line that says the run was created and its status, not that status again.
  assert.equal(waiting.stdout.match(/queued/g)?.length, 1, waiting.stdout);
  assert.ok(runId, waiting.stdout);
  await stack.server.api(routes.cancelRun, { params: { id: runId } });

  await workspace("staffed");
  const served = await stack.cli(["run", "start", dir, "--workspace", "staffed", "--no-follow", "--plan-only"]);
  assert.equal(served.code, 0, served.stderr);
  assert.doesNotMatch(served.stderr, /no agent/);
});
