import assert from "node:assert/strict";
import { execFile } from "node:child_process";
import { promisify } from "node:util";
import { readFileSync, writeFileSync } from "node:fs";
import { createServer } from "node:net";
import type { AddressInfo } from "node:net";
import { join } from "node:path";
import { after, before, test } from "node:test";
import { routes } from "@drover/protocol";
import { rawTarGz } from "../support/archives.js";
import { droverBin, spawnDrover } from "../support/processes.js";
import { pollWait } from "../support/poll.js";
import { startStack, writeConfig, type Stack } from "../support/stack.js";

// What a new user trips over on the first day (issue 30's blocker and dangerous points), with
// the real binary where the point is about the binary: a token file made with `>`, an agent
// whose token is refused, an upload with no configuration, a plan that destroys everything.

let stack: Stack;
before(async () => {
  stack = await startStack();
});
after(() => stack?.stop());

test("`token create > file` writes a token file an agent runs with; refused, the agent exits 2 naming the file", async () => {
  const file = join(stack.dir, "pool-token");
  const env = { ...stack.baseEnv, DROVER_TOKEN: stack.server.adminToken };
  // Through a shell, as a user types it; asynchronously, since the server runs in this process.
  const made = await promisify(execFile)(
    "sh",
    ["-c", `"${process.execPath}" "${droverBin}" token create --pool ${stack.pool} > "${file}"`],
    { env, encoding: "utf8" },
  );
  const written = readFileSync(file, "utf8");
  assert.match(written, /^drv_p_\S+\n$/, "the token alone, on one line");
  assert.match(made.stderr, /shown once/);
  assert.match(made.stderr, /drover agent run --token-file <file>/, "the advice matches the README's");

  const agent = spawnDrover(["agent", "run", "--token-file", file], {
    ...stack.baseEnv,
    DROVER_AGENT_NAME: "from-file",
    DROVER_AGENT_DATA_DIR: join(stack.dir, "from-file"),
    DROVER_AGENT_HEALTH_PORT: "0",
    DROVER_AGENT_LOG_FORMAT: "plain",
  });
  try {
    await waitForAgent("from-file");
    // The token the file holds is the one the agent registered with: the only one used besides the stack's.
    const tokens = await stack.server.api(routes.listPoolTokens, { params: { pool: stack.pool } });
    const mine = tokens.body.items.filter((t: any) => t.lastUsedAt !== null && t.id !== stack.poolTokenId);
    assert.equal(mine.length, 1, JSON.stringify(tokens.body.items));
    await stack.server.api(routes.revokePoolToken, { params: { id: mine[0].id } });
    const exit = await agent.exited;
    assert.equal(exit.code, 2, agent.output());
    // One line says why; nothing after it (a deregistration the server would refuse) buries it.
    const problems = agent
      .output()
      .split("\n")
      .filter((l) => /^(WARN|ERROR)/.test(l));
    assert.equal(problems.length, 1, agent.output());
    assert.match(problems[0]!, new RegExp(`pool token from --token-file ${escaped(file)} was revoked`));
  } finally {
    await agent.stop("SIGKILL");
  }
});

test("a token file whose token the server refuses stops the agent at registration with exit 2 and one line", async () => {
  const made = await stack.server.api(routes.createPoolToken, { params: { pool: stack.pool }, body: {} });
  await stack.server.api(routes.revokePoolToken, { params: { id: made.body.id } });
  const file = join(stack.dir, "revoked-token");
  writeFileSync(file, `${made.body.token}\n`);
  const agent = spawnDrover(["agent", "run", "--token-file", file], {
    ...stack.baseEnv,
    DROVER_AGENT_DATA_DIR: join(stack.dir, "revoked-agent"),
    DROVER_AGENT_HEALTH_PORT: "0",
    DROVER_AGENT_LOG_FORMAT: "plain",
  });
  const exit = await agent.exited;
  assert.equal(exit.code, 2, agent.output());
  const lines = agent.output().trim().split("\n");
  assert.equal(lines.length, 1, agent.output());
  assert.match(lines[0]!, new RegExp(`pool token from --token-file ${escaped(file)} was revoked; stopping`));
});

function escaped(text: string): string {
  return text.replace(/[.*+?^${}()|[\]\\/]/g, "\\$&");
}

/** Waits until the agent is registered (and, with `idle`, has reported no running job: it reports at its next heartbeat). */
async function waitForAgent(name: string, idle = false): Promise<void> {
  for (let attempt = 0; attempt < 1200; attempt++) {
    const listed = await stack.server.api(routes.listAgents, { query: { pool: stack.pool } });
    const agent = listed.body.items.find((a: any) => a.name === name && a.status !== "offline");
    if (agent && (!idle || (agent.status === "idle" && agent.runningJobs === 0))) return;
    await pollWait(attempt);
  }
  assert.fail(`agent ${name} did not register${idle ? " or did not become idle" : ""}`);
}

test("a token file holding more than the token stops the agent at start with exit 2 and one line", async () => {
  const token = (await stack.server.api(routes.createPoolToken, { params: { pool: stack.pool }, body: {} })).body
    .token as string;
  const file = join(stack.dir, "chatty-token");
  writeFileSync(file, `${token}\n\nThis token is shown once. Start an agent with:\n  drover agent run\n`);
  const agent = spawnDrover(["agent", "run", "--token-file", file], {
    ...stack.baseEnv,
    DROVER_AGENT_HEALTH_PORT: "0",
  });
  const exit = await agent.exited;
  assert.equal(exit.code, 2, agent.output());
  assert.match(agent.output(), new RegExp(`chatty-token has 3 lines; expected one drv_p_ token`));
  assert.equal(agent.output().trim().split("\n").length, 1, agent.output());
});

test("a directory without configuration is refused before upload, and by the server", async () => {
  await stack.server.api(routes.createWorkspace, { body: { name: "no-config", pool: stack.pool } });
  const dir = writeConfig(stack.dir, "readme-only", { "README.txt": "not terraform\n" });
  const res = await stack.cli(["run", "start", dir, "--workspace", "no-config", "--auto-apply"]);
  assert.notEqual(res.code, 0);
  assert.match(res.stderr, /no \.tf, \.tf\.json, \.tofu, \.tofu\.json file in .*readme-only: nothing to plan/);
  const versions = await stack.server.api(routes.listConfigurationVersions, { params: { ws: "no-config" } });
  assert.deepEqual(versions.body.items, [], "nothing was uploaded");

  const direct = await stack.server.api(routes.uploadConfiguration, {
    params: { ws: "no-config" },
    body: rawTarGz([
      { path: "README.txt", content: "not terraform\n" },
      { path: "modules/x/main.tf", content: "# a module is not the root configuration\n" },
    ]),
  });
  assert.equal(direct.status, 422);
  assert.equal(direct.body.error, "invalid_archive");
  assert.match(direct.body.message, /no \.tf, .* file in its root: nothing to plan/);
});

test("a plan that destroys everything is not auto-applied without --allow-destroy-all", async () => {
  await stack.startAgent("guard-agent");
  await stack.server.api(routes.createWorkspace, { body: { name: "guarded", pool: stack.pool, autoApply: true } });
  const full = writeConfig(stack.dir, "guarded-full", {
    "main.tf": 'resource "terraform_data" "a" {}\nresource "terraform_data" "b" {}\n',
  });
  const first = await stack.cli(["run", "start", full, "--workspace", "guarded"]);
  assert.equal(first.code, 0, first.stdout + first.stderr);

  // The resources' blocks are gone (a wrong path, a bad merge): terraform plans to destroy both.
  const emptied = writeConfig(stack.dir, "guarded-empty", { "main.tf": 'output "left" {\n  value = "nothing"\n}\n' });
  const held = await stack.cli(["run", "start", emptied, "--workspace", "guarded"]);
  assert.equal(held.code, 2, "the run waits for confirmation:\n" + held.stdout + held.stderr);
  assert.match(
    held.stdout,
    /this plan destroys every resource the workspace manages, so it is not applied automatically/,
  );
  assert.match(held.stdout, /Confirm with: drover run confirm/);
  const state = await stack.server.api(routes.listStateVersions, { params: { ws: "guarded" } });
  const heldRun = (await stack.server.api(routes.listRuns, { query: { workspace: "guarded", limit: 1 } })).body
    .items[0];
  assert.equal(heldRun.status, "planned");
  assert.equal(heldRun.applyJobId, null, "no apply was queued");
  await stack.server.api(routes.discardRun, { params: { id: heldRun.id } });

  const allowed = await stack.cli(["run", "start", emptied, "--workspace", "guarded", "--allow-destroy-all"]);
  assert.equal(allowed.code, 0, allowed.stdout + allowed.stderr);
  assert.match(allowed.stdout, /Destroy complete|Apply complete! Resources: 0 added, 0 changed, 2 destroyed/);
  const after = await stack.server.api(routes.listStateVersions, { params: { ws: "guarded" } });
  assert.ok(after.body.items.length > state.body.items.length, "the destroy was applied");
});

test("agent list shows each agent with its pool, status, driver, version and running jobs", async () => {
  // The previous test's run has just ended; its agent says so at its next heartbeat.
  await waitForAgent("guard-agent", true);
  const res = await stack.cli(["agent", "list", "--pool", stack.pool]);
  assert.equal(res.code, 0, res.stderr);
  const [header, ...rows] = res.stdout.trim().split("\n");
  assert.match(header ?? "", /^NAME\s+POOL\s+STATUS\s+DRIVER\s+VERSION\s+RUNNING\s+LAST SEEN$/);
  assert.ok(
    rows.some((r) => new RegExp(`^guard-agent\\s+${stack.pool}\\s+idle\\s+local\\s+\\S+\\s+0/1\\s`).test(r)),
    res.stdout,
  );
});

test("a taken port stops the server and the agent with exit 2 and the flag to change it", async () => {
  const taken = createServer();
  await new Promise<void>((resolve) => taken.listen(0, "127.0.0.1", resolve));
  const port = (taken.address() as AddressInfo).port;
  try {
    const server = spawnDrover(["server", "--port", String(port), "--data-dir", join(stack.dir, "second-server")], {
      ...stack.baseEnv,
      DROVER_HOST: "127.0.0.1",
    });
    const serverExit = await server.exited;
    assert.equal(serverExit.code, 2, server.output());
    assert.match(server.output(), new RegExp(`port ${port} on 127\\.0\\.0\\.1 is in use .*--port`));

    const token = (await stack.server.api(routes.createPoolToken, { params: { pool: stack.pool }, body: {} })).body
      .token as string;
    const agent = spawnDrover(["agent", "run"], {
      ...stack.baseEnv,
      DROVER_TOKEN: token,
      DROVER_AGENT_HEALTH_PORT: String(port),
      DROVER_AGENT_DATA_DIR: join(stack.dir, "port-agent"),
      DROVER_AGENT_LOG_FORMAT: "plain",
    });
    const agentExit = await agent.exited;
    assert.equal(agentExit.code, 2, agent.output());
    assert.match(
      agent.output(),
      new RegExp(`health port ${port} is in use \\(invalid_setting\\) Choose another with --health-port`),
    );

    // The quickstart says the same with its own flag, and a second try on another port finds
    // everything the first one created (its admin token among them) as it was.
    const dataDir = join(stack.dir, "port-quickstart");
    const quickstartEnv = {
      ...stack.baseEnv,
      DROVER_CONFIG_DIR: join(stack.dir, "port-quickstart-config"),
      DROVER_AGENT_NAME: "port-quickstart",
      DROVER_URL: "",
      DROVER_TOKEN: "",
    };
    const refused = spawnDrover(["quickstart", "--data-dir", dataDir, "--port", String(port)], quickstartEnv);
    assert.equal((await refused.exited).code, 2, refused.output());
    assert.match(refused.output(), new RegExp(`port ${port} on .* is in use \\(invalid_setting\\) .*--port`));
    const adminToken = readFileSync(join(dataDir, "admin-token"), "utf8");
    const retried = spawnDrover(["quickstart", "--data-dir", dataDir, "--port", "0"], quickstartEnv);
    try {
      await retried.waitFor(/Press Ctrl-C to stop\./, 120_000);
    } finally {
      await retried.stop("SIGINT");
    }
    assert.equal(readFileSync(join(dataDir, "admin-token"), "utf8"), adminToken);
  } finally {
    await new Promise((resolve) => taken.close(resolve));
  }
});
