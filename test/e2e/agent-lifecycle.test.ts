import assert from "node:assert/strict";
import { chmodSync, mkdirSync, readdirSync, writeFileSync } from "node:fs";
import { createServer } from "node:net";
import { join } from "node:path";
import { after, before, describe, test } from "node:test";
import { runLog, startStack, writeConfig, type Stack } from "../support/stack.js";
import { scrape } from "../support/metric-values.js";
import { routes } from "@drover/protocol";

// The agent as an operator sees it: killed, stopped in each mode, its token revoked.

let stack: Stack;
const longApply = {
  "main.tf":
    'resource "terraform_data" "long" {\n  input = timestamp()\n  provisioner "local-exec" {\n    command = "sleep 60"\n  }\n}\n',
};

before(async () => {
  // Heartbeats every second: a revoked token is seen at the next one, not up to 10 s later.
  stack = await startStack({ DROVER_LEASE_TTL_SECONDS: "3", DROVER_AGENT_HEARTBEAT_SECONDS: "1" });
});
after(() => stack?.stop());

async function workspace(name: string) {
  const res = await stack.server.api(routes.createWorkspace, { body: { name, pool: stack.pool } });
  assert.equal(res.status, 201, JSON.stringify(res.body));
  return res.body.id as string;
}

async function waitForLog(runId: string, phase: "plan" | "apply", pattern: RegExp) {
  for (let i = 0; i < 300; i++) {
    if (pattern.test(await runLog(stack.server, runId, phase))) return;
    await new Promise((r) => setTimeout(r, 100));
  }
  assert.fail(`log never matched ${pattern}`);
}

test("kill -9 of the agent mid-run: the run ends errored (agent lost) and the workspace is usable again", async () => {
  const wsId = await workspace("killed");
  const agent = await stack.startAgent("doomed");
  const dir = writeConfig(stack.dir, "killed", longApply);
  const runId = await stack.startRun(dir, "killed", ["--auto-apply"]);
  await stack.waitForRun(runId, ["applying"]);
  await waitForLog(runId, "apply", /local-exec/);
  await agent.stop("SIGKILL");
  const run = await stack.waitForRun(runId, ["errored", "applied", "canceled"], 30_000);
  assert.equal(run.status, "errored");
  assert.match(run.errorMessage, /agent lost/);
  assert.match(await runLog(stack.server, runId, "apply"), /agent lost/);
  const ws = await stack.server.api(routes.getWorkspace, { params: { ws: wsId } });
  assert.equal(ws.body.currentRunId, null);
  assert.equal(ws.body.stateLocked, false, "the dead run's state lock was released");

  const rescuer = await stack.startAgent("rescuer");
  const quick = writeConfig(stack.dir, "killed-ok", { "main.tf": 'resource "terraform_data" "ok" {}\n' });
  const next = await stack.startRun(quick, "killed", ["--auto-apply"]);
  assert.equal((await stack.waitForRun(next, ["applied", "errored"])).status, "applied");
  // Later tests need their run to land on their own agent.
  await rescuer.stop();
});

describe("SIGTERM stop modes (SPEC §5)", () => {
  test("graceful: terraform is interrupted at once; the run ends errored (agent stopped), never success", async () => {
    await workspace("graceful");
    const agent = await stack.startAgent("graceful-agent", {
      DROVER_AGENT_WORKER_ON_STOP_ACTION: "graceful",
      DROVER_AGENT_GRACE_PERIOD_SECONDS: "30",
    });
    const runId = await stack.startRun(writeConfig(stack.dir, "graceful", longApply), "graceful", ["--auto-apply"]);
    await stack.waitForRun(runId, ["applying"]);
    await waitForLog(runId, "apply", /local-exec/);
    const started = Date.now();
    agent.child.kill("SIGTERM");
    const exit = await agent.exited;
    const run = await stack.waitForRun(runId, ["errored", "applied", "canceled"], 30_000);
    assert.equal(run.status, "errored");
    assert.match(run.errorMessage ?? "", /agent stopped/);
    assert.match(await runLog(stack.server, runId, "apply"), /agent stopped/);
    assert.ok(Date.now() - started < 20_000, "graceful does not wait for the job to finish");
    assert.equal(exit.code, 0, agent.output());
    const agents = (await stack.server.api(routes.listAgents, { query: { pool: stack.pool } })).body.items;
    assert.equal(agents.find((a: any) => a.name === "graceful-agent").status, "offline", "the agent deregistered");
    const ws = (await stack.server.api(routes.getWorkspace, { params: { ws: "graceful" } })).body;
    assert.equal(ws.stateLocked, false);
  });

  test("drain: the running job is allowed to finish; no new job is taken", async () => {
    await workspace("drain");
    const agent = await stack.startAgent("drain-agent", {
      DROVER_AGENT_WORKER_ON_STOP_ACTION: "drain",
      DROVER_AGENT_GRACE_PERIOD_SECONDS: "120",
    });
    const cfg = writeConfig(stack.dir, "drain", {
      "main.tf":
        'resource "terraform_data" "d" {\n  input = timestamp()\n  provisioner "local-exec" {\n    command = "sleep 3"\n  }\n}\n',
    });
    const runId = await stack.startRun(cfg, "drain", ["--auto-apply"]);
    await stack.waitForRun(runId, ["applying"]);
    await waitForLog(runId, "apply", /local-exec/);
    agent.child.kill("SIGTERM");
    await new Promise((r) => setTimeout(r, 300));
    const later = await stack.startRun(cfg, "drain", ["--auto-apply"]);
    const exit = await agent.exited;
    assert.equal(
      (await stack.waitForRun(runId, ["applied", "errored"], 30_000)).status,
      "applied",
      "the draining job completed",
    );
    assert.equal(exit.code, 0, agent.output());
    const pending = (await stack.server.api(routes.getRun, { params: { id: later } })).body;
    assert.ok(
      ["pending", "queued"].includes(pending.status),
      `the draining agent took no new work (${pending.status})`,
    );
    await stack.cli(["run", "cancel", later]);
  });

  test("force: terraform is killed at once; the run ends errored (agent stopped)", async () => {
    await workspace("force");
    const agent = await stack.startAgent("force-agent", {
      DROVER_AGENT_WORKER_ON_STOP_ACTION: "force",
      DROVER_AGENT_GRACE_PERIOD_SECONDS: "10",
    });
    const runId = await stack.startRun(writeConfig(stack.dir, "force", longApply), "force", ["--auto-apply"]);
    await stack.waitForRun(runId, ["applying"]);
    await waitForLog(runId, "apply", /local-exec/);
    const started = Date.now();
    agent.child.kill("SIGTERM");
    await agent.exited;
    const run = await stack.waitForRun(runId, ["errored", "applied", "canceled"], 30_000);
    assert.equal(run.status, "errored");
    assert.match(run.errorMessage ?? "", /agent stopped/);
    assert.ok(Date.now() - started < 12_000);
  });
});

test("a revoked pool token stops the agent with a clear message", async () => {
  const tok = await stack.server.api(routes.createPoolToken, {
    params: { pool: stack.pool },
    body: { description: "to revoke" },
  });
  const agent = await stack.startAgent("revoked-agent", { DROVER_TOKEN: tok.body.token });
  const res = await stack.cli(["token", "revoke", tok.body.id]);
  assert.equal(res.code, 0, res.stderr);
  const exit = await Promise.race([agent.exited, new Promise<null>((r) => setTimeout(() => r(null), 70_000))]);
  assert.ok(exit, `the agent kept running:\n${agent.output()}`);
  assert.notEqual(exit.code, 0);
  assert.match(agent.output(), /revoked/i);
});

test("the apply reuses its plan's initialized directory on the agent that planned; turned off, or with a pre-init hook, it initializes again", async () => {
  const config = writeConfig(stack.dir, "reuse", {
    "main.tf":
      'resource "terraform_data" "r" {\n  input = "reused"\n}\noutput "r" {\n  value = terraform_data.r.output\n}\n',
  });
  const applyLog = async (ws: string, agentEnv: Record<string, string>) => {
    await workspace(ws);
    const agent = await stack.startAgent(`${ws}-agent`, agentEnv);
    try {
      const runId = await stack.startRun(config, ws, ["--auto-apply"]);
      const run = await stack.waitForRun(runId, ["applied", "errored", "planned_and_finished"]);
      assert.equal(run.status, "applied", run.errorMessage ?? "");
      const outputs = (await stack.server.api(routes.workspaceOutputs, { params: { ws } })).body;
      assert.deepEqual(outputs.items, [{ name: "r", sensitive: false, type: "string", value: "reused" }]);
      return await runLog(stack.server, runId, "apply");
    } finally {
      await agent.stop();
    }
  };

  // The server's request counter of the plan-file download route tells who fetched the plan back.
  const planDownloads = async () =>
    (await scrape(`${stack.server.url}/metrics`, "drover_http_request_duration_seconds_count", {
      method: "GET",
      route: routes.downloadPlan.path,
    })) ?? 0;
  const downloadsBefore = await planDownloads();
  const reused = await applyLog("reuse-on", {});
  assert.match(reused, /reusing this run's initialized plan directory/);
  assert.doesNotMatch(reused, /\$ terraform init/);
  assert.equal(await planDownloads(), downloadsBefore, "the kept directory's plan file is applied: none downloaded");
  assert.deepEqual(readdirSync(join(stack.dir, "agent-reuse-on-agent", "data")), [], "nothing is left behind");

  const off = await applyLog("reuse-off", { DROVER_AGENT_PLAN_REUSE_SECONDS: "0" });
  assert.match(off, /\$ terraform init/);
  assert.doesNotMatch(off, /reusing/);
  assert.equal(await planDownloads(), downloadsBefore + 1, "without reuse the apply downloads the plan");

  const hooks = join(stack.dir, "reuse-hooks");
  mkdirSync(hooks, { recursive: true });
  writeFileSync(join(hooks, "pre-init"), "#!/bin/sh\necho pre-init hook ran in $DROVER_RUN_PHASE\n");
  chmodSync(join(hooks, "pre-init"), 0o755);
  const hooked = await applyLog("reuse-hook", { DROVER_AGENT_HOOKS_DIR: hooks });
  assert.match(hooked, /pre-init hook ran in apply/);
  assert.match(hooked, /\$ terraform init/);
});

test("the agent's health port: /healthz and /readyz say it is running, /metrics counts its jobs", async () => {
  const port = await new Promise<number>((resolve) => {
    const probe = createServer().listen(0, "127.0.0.1", () => {
      const { port } = probe.address() as { port: number };
      probe.close(() => resolve(port));
    });
  });
  await workspace("health");
  const agent = await stack.startAgent("health-agent", { DROVER_AGENT_HEALTH_PORT: String(port) });
  try {
    const base = `http://127.0.0.1:${port}`;
    // eslint-disable-next-line no-restricted-globals -- the agent's health port, not the server
    const health = (await (await fetch(`${base}/healthz`)).json()) as any;
    assert.equal(health.status, "ok");
    assert.equal(health.state, "running");
    assert.ok(!Number.isNaN(Date.parse(health.currentTime)));
    // eslint-disable-next-line no-restricted-globals -- the agent's health port, not the server
    assert.equal((await fetch(`${base}/readyz`)).status, 200);

    const runId = await stack.startRun(
      writeConfig(stack.dir, "health", { "main.tf": 'resource "terraform_data" "h" {}\n' }),
      "health",
      ["--plan-only"],
    );
    await stack.waitForRun(runId, ["planned_and_finished", "errored"]);
    // eslint-disable-next-line no-restricted-globals -- the agent's health port, not the server
    const metrics = await fetch(`${base}/metrics`);
    assert.match(metrics.headers.get("content-type") ?? "", /^text\/plain; version=0\.0\.4/);
    const text = await metrics.text();
    assert.match(text, /^# TYPE drover_agent_jobs_running gauge$/m);
    assert.match(text, /^drover_agent_jobs_running 0$/m);
    assert.match(text, /^drover_agent_jobs_finished_total\{phase="plan"\} 1$/m);
    assert.match(text, /^drover_agent_poll_errors_total 0$/m);
    // eslint-disable-next-line no-restricted-globals -- the agent's health port, not the server
    const afterPoll = (await (await fetch(`${base}/healthz`)).json()) as any;
    assert.notEqual(afterPoll.lastActivity, null, "the long-poll counts as activity");
  } finally {
    await agent.stop();
  }
});
