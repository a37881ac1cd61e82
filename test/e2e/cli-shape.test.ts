import assert from "node:assert/strict";
import { after, before, test } from "node:test";
import { routes } from "@drover/protocol";
import { startStack, writeConfig, type Stack } from "../support/stack.js";

// The CLI's shape for a newcomer: names rather than ids in listings, one way (-w) to name a
// workspace, and cleaning up workspaces and pools from the CLI.

let stack: Stack;
before(async () => {
  stack = await startStack();
});
after(() => stack?.stop());

test("listings and show name the workspace and pool; -w names the workspace in every command", async () => {
  await stack.server.api(routes.createWorkspace, { body: { name: "named", pool: stack.pool } });
  const poolId = (await stack.server.api(routes.getPool, { params: { pool: stack.pool } })).body.id as string;

  const set = await stack.cli(["workspace", "set-var", "-w", "named", "region=eu"]);
  assert.equal(set.code, 0, set.stderr);
  const positional = await stack.cli(["workspace", "set-var", "named", "zone=a"]);
  assert.equal(positional.code, 0, positional.stderr);
  for (const args of [
    ["workspace", "show", "-w", "named"],
    ["workspace", "show", "named"],
    ["workspace", "show", "--workspace", "named"],
  ]) {
    const shown = await stack.cli(args);
    assert.equal(shown.code, 0, shown.stderr);
    assert.match(shown.stdout, new RegExp(`pool: ${stack.pool} `), shown.stdout);
    assert.doesNotMatch(shown.stdout, new RegExp(poolId));
    assert.match(shown.stdout, /region\s+terraform\s+no\s+eu/);
    assert.match(shown.stdout, /zone\s+terraform\s+no\s+a/);
  }
  const both = await stack.cli(["workspace", "show", "named", "-w", "other"]);
  assert.equal(both.code, 2);
  assert.match(both.stderr, /two workspaces named/);
  const none = await stack.cli(["workspace", "show"]);
  assert.equal(none.code, 2);
  assert.match(none.stderr, /which workspace\?.*-w <workspace>/);
  const unset = await stack.cli(["workspace", "delete-var", "-w", "named", "zone"]);
  assert.equal(unset.code, 0, unset.stderr);

  const dir = writeConfig(stack.dir, "named", { "main.tf": 'output "x" {\n  value = 1\n}\n' });
  const runId = await stack.startRun(dir, "named");
  for (const flag of ["-w", "--workspace"]) {
    const listed = await stack.cli(["run", "list", flag, "named"]);
    assert.equal(listed.code, 0, listed.stderr);
    assert.match(listed.stdout, new RegExp(`${runId}\\s+named\\s+`), listed.stdout);
  }
  const run = (await stack.server.api(routes.getRun, { params: { id: runId } })).body;
  assert.equal(run.workspaceName, "named");
  assert.match((await stack.cli(["output", "-w", "named"])).stdout, /\(none\)/);
  for (const command of [["run", "start"], ["output"], ["workspace", "show"], ["run", "list"]]) {
    const help = await stack.cli([...command, "--help"]);
    assert.match(help.stdout, /-w, --workspace <workspace>/, command.join(" "));
  }
  await stack.cli(["run", "cancel", runId, "--force"]);
});

test("workspace delete asks for --yes (exit 2) and says what it deleted", async () => {
  await stack.server.api(routes.createWorkspace, { body: { name: "doomed", pool: stack.pool } });
  await stack.server.api(routes.setVariable, { params: { ws: "doomed", key: "a" }, body: { value: "1" } });
  const refused = await stack.cli(["workspace", "delete", "doomed"], { subprocess: true });
  assert.equal(refused.code, 2, refused.stderr);
  assert.match(refused.stderr, /deletes its 0 run\(s\), 0 state version\(s\) and 1 variable\(s\); nothing was deleted/);
  assert.match(refused.stderr, /drover workspace delete doomed --yes/);
  assert.equal((await stack.server.api(routes.getWorkspace, { params: { ws: "doomed" } })).status, 200);

  const deleted = await stack.cli(["workspace", "delete", "-w", "doomed", "--yes"]);
  assert.equal(deleted.code, 0, deleted.stderr);
  assert.match(
    deleted.stdout,
    /Deleted workspace doomed \(ws-\S+\) with its 0 run\(s\), 0 state version\(s\) and 1 variable/,
  );
  assert.equal((await stack.server.api(routes.getWorkspace, { params: { ws: "doomed" } })).status, 404);
});

test("pool list counts agents; pool delete is refused while a workspace uses it, else ends its agents", async () => {
  const { token } = await stack.createPool("short-lived");
  const agent = await stack.startAgent("short-lived-agent", { DROVER_TOKEN: token }, "short-lived");
  const listed = await stack.cli(["pool", "list"]);
  assert.match(listed.stdout, /AGENTS \(ONLINE\/TOTAL\)/);
  assert.match(listed.stdout, /short-lived\s+1\/1\s+pool-/, listed.stdout);

  await stack.server.api(routes.createWorkspace, { body: { name: "tenant", pool: "short-lived" } });
  const refused = await stack.cli(["pool", "delete", "short-lived"]);
  assert.equal(refused.code, 1);
  assert.match(
    refused.stderr,
    /pool short-lived is used by 1 workspace\(s\) \(tenant\): move or delete them first \(conflict\)/,
  );
  const api = await stack.server.api(routes.deletePool, { params: { pool: "short-lived" } });
  assert.equal(api.status, 409);

  await stack.cli(["workspace", "delete", "tenant", "--yes"]);
  const deleted = await stack.cli(["pool", "delete", "short-lived"]);
  assert.equal(deleted.code, 0, deleted.stderr);
  assert.match(
    deleted.stdout,
    /Deleted pool short-lived \(pool-\S+\): 1 token\(s\) revoked, 1 agent session\(s\) ended/,
  );
  const exit = await agent.exited;
  assert.equal(exit.code, 2, agent.output());
  assert.match(agent.output(), /refused the pool token/);
  const pools = (await stack.server.api(routes.listPools, {})).body.items.map((p: { name: string }) => p.name);
  assert.deepEqual(pools, [stack.pool]);
});
