import assert from "node:assert/strict";
import { chmodSync, mkdirSync, readdirSync, writeFileSync } from "node:fs";
import { createServer } from "node:net";
import { join } from "node:path";
import { after, before, describe, test } from "node:test";
import { runLog, startStack, writeConfig, type Stack } from "../support/stack.js";
import { eventually } from "../support/fault-runs.js";
import { scrape } from "../support/metric-values.js";
import { within } from "../support/poll.js";
import { routes } from "@drover/protocol";

// The agent as an operator sees it: killed, stopped in each mode, its token revoked.

let stack: Stack;
const longApply = {
  "main.tf":
    'resource "terraform_data" "long" {\n  input = timestamp()\n  provisioner "local-exec" {\n    command = "sleep 60"\n  }\n}\n',
};

before(async () => {
  // Heartbeats twice a second: a revoked token is seen within half a second, not up to 10 s later.
  stack = await startStack({ DROVER_LEASE_TTL_SECONDS: "3", DROVER_AGENT_HEARTBEAT_SECONDS: "0.5" });
});
after(() => stack?.stop());

/**
 * A workspace in a pool of its own (named after it), and a way to start that pool's agents:
 * each test's runs land only on its own agents, so the tests run at once in any order.
 */
async function workspace(name: string) {
  const { pool, token } = await stack.createPool(`${name}-pool`);
  const res = await stack.server.api(routes.createWorkspace, { body: { name, pool } });
  assert.equal(res.status, 201, JSON.stringify(res.body));
  return {
    id: res.body.id as string,
    pool,
    token,
    startAgent: (agent: string, env: Record<string, string> = {}) =>
      stack.startAgent(agent, { DROVER_TOKEN: token, ...env }, pool),
  };
}

async function waitForLog(runId: string, phase: "plan" | "apply", pattern: RegExp) {
  for (let i = 0; i < 300; i++) {
    if (pattern.test(await runLog(stack.server, runId, phase))) return;
    await new Promise((r) => setTimeout(r, 100));
  }
  assert.fail(`log never matched ${pattern}`);
}

// Each test has its own pool, workspace and agents: none relies on another having run. They run
// one at a time: seven jobs at once on a busy 2-core machine lost their 3 s leases.
describe("the agent as an operator sees it", () => {
  test("kill -9 of the agent mid-run: the run ends errored (agent lost) and the workspace is usable again", async () => {
    const ws0 = await workspace("killed");
    const wsId = ws0.id;
    const agent = await ws0.startAgent("doomed");
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

    const rescuer = await ws0.startAgent("rescuer");
    const quick = writeConfig(stack.dir, "killed-ok", { "main.tf": 'resource "terraform_data" "ok" {}\n' });
    const next = await stack.startRun(quick, "killed", ["--auto-apply"]);
    assert.equal((await stack.waitForRun(next, ["applied", "errored"])).status, "applied");
    await rescuer.stop();
  });

  describe("SIGTERM stop modes", () => {
    test("graceful: terraform is interrupted at once; the run ends errored (agent stopped), never success", async () => {
      const ws = await workspace("graceful");
      const agent = await ws.startAgent("graceful-agent", {
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
      const agents = (await stack.server.api(routes.listAgents, { query: { pool: ws.pool } })).body.items;
      assert.equal(agents.find((a: any) => a.name === "graceful-agent").status, "offline", "the agent deregistered");
      const after = (await stack.server.api(routes.getWorkspace, { params: { ws: "graceful" } })).body;
      assert.equal(after.stateLocked, false);
    });

    test("drain: the running job is allowed to finish; no new job is taken", async () => {
      const ws = await workspace("drain");
      const agent = await ws.startAgent("drain-agent", {
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
      const ws = await workspace("force");
      const agent = await ws.startAgent("force-agent", {
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
    const { pool } = await stack.createPool("revoked-pool");
    const tok = await stack.server.api(routes.createPoolToken, {
      params: { pool },
      body: { description: "to revoke" },
    });
    const agent = await stack.startAgent("revoked-agent", { DROVER_TOKEN: tok.body.token }, pool);
    const res = await stack.cli(["token", "revoke", tok.body.id]);
    assert.equal(res.code, 0, res.stderr);
    const exit = await within(agent.exited, 70_000);
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
      const own = await workspace(ws);
      const agent = await own.startAgent(`${ws}-agent`, agentEnv);
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
    const ws = await workspace("health");
    const agent = await ws.startAgent("health-agent", { DROVER_AGENT_HEALTH_PORT: String(port) });
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
      // The server may say the run ended a moment before the agent counts its job finished.
      const text = await eventually("the agent to count its job finished", async () => {
        // eslint-disable-next-line no-restricted-globals -- the agent's health port, not the server
        const metrics = await fetch(`${base}/metrics`);
        assert.match(metrics.headers.get("content-type") ?? "", /^text\/plain; version=0\.0\.4/);
        const body = await metrics.text();
        return /^drover_agent_jobs_running 0$/m.test(body) ? body : undefined;
      });
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
});
