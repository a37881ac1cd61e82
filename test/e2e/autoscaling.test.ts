// Demand signals for autoscalers in the cases that break other products' scalers: a
// plan-only run started from the CLI is demand, a run awaiting confirmation is not, and a
// burst of 50 queued runs turns into a desired-agents figure — read the way KEDA's
// metrics-api scaler reads it (the pool token's endpoint) and on the server's /metrics.
import assert from "node:assert/strict";
import { after, before, test } from "node:test";
import { rawTarGz } from "../support/archives.js";
import { eventually } from "../support/fault-runs.js";
import { startStack, writeConfig, type Stack } from "../support/stack.js";
import type { Proc } from "../support/processes.js";
import { routes, type PoolDemand } from "@drover/protocol";
import { type ApiError } from "@drover/runtime";
import { client } from "../support/typed-api.js";

let stack: Stack;
before(async () => {
  // Every scrape reads the database: the test compares each with the step just taken.
  stack = await startStack({ DROVER_METRICS_CACHE_SECONDS: "0" });
});
after(() => stack?.stop());

/** The demand the pool token's endpoint reports (what the chart's KEDA trigger calls). */
async function demand(query: { jobsPerAgent?: number } = {}): Promise<PoolDemand> {
  return client(stack.server.url, stack.poolToken).call(routes.agentDemand, { query });
}

/** The pool's value of each demand series on /metrics. */
async function scraped(): Promise<Record<string, number>> {
  const text = (await client(stack.server.url, stack.server.adminToken).call(routes.metrics, {})).toString("utf8");
  const out: Record<string, number> = {};
  for (const m of text.matchAll(/^(drover_pool_[a-z_]+)\{pool="([^"]+)"\} (\S+)$/gm))
    if (m[2] === stack.pool) out[m[1]!] = Number(m[3]);
  return out;
}

let agent: Proc | undefined;

test("a plan-only run from the CLI is demand until an agent runs it", async () => {
  const dir = writeConfig(stack.dir, "speculative", { "main.tf": 'resource "terraform_data" "x" {}\n' });
  await stack.server.api(routes.createWorkspace, { body: { name: "speculative", pool: stack.pool } });
  const runId = await stack.startRun(dir, "speculative", ["--plan-only"]);
  const d = await demand();
  assert.deepEqual(
    {
      pending: d.pending,
      queued: d.queued,
      claimed: d.claimed,
      running: d.running,
      awaiting: d.awaitingConfirmation,
      desired: d.desiredAgents,
      online: d.agents.online,
    },
    { pending: 1, queued: 1, claimed: 0, running: 0, awaiting: 0, desired: 1, online: 0 },
  );
  assert.equal(d.pool.name, stack.pool);
  // The user API reports the same, by pool name.
  const byUser = await stack.server.api(routes.poolDemand, { params: { pool: stack.pool } });
  assert.equal(byUser.status, 200);
  assert.deepEqual(byUser.body, d);
  assert.deepEqual(await scraped(), {
    drover_pool_jobs_pending: 1,
    drover_pool_jobs_running: 0,
    drover_pool_runs_awaiting_confirmation: 0,
    drover_pool_desired_agents: 1,
  });

  agent = await stack.startAgent("scaler-1");
  assert.equal((await stack.waitForRun(runId, ["planned_and_finished", "errored"])).status, "planned_and_finished");
  const after = await eventually("the agent is idle again", async () => {
    const x = await demand();
    return x.agents.idle === 1 ? x : undefined;
  });
  assert.equal(after.desiredAgents, 0);
});

test("a run awaiting confirmation needs no agent", async () => {
  const dir = writeConfig(stack.dir, "approval", { "main.tf": 'resource "terraform_data" "x" {}\n' });
  await stack.server.api(routes.createWorkspace, { body: { name: "approval", pool: stack.pool } });
  const runId = await stack.startRun(dir, "approval");
  await stack.waitForRun(runId, ["planned"]);
  const d = await eventually("the agent reported itself idle", async () => {
    const x = await demand();
    return x.agents.busy === 0 ? x : undefined;
  });
  assert.deepEqual(
    { pending: d.pending, running: d.running, awaiting: d.awaitingConfirmation, desired: d.desiredAgents },
    { pending: 0, running: 0, awaiting: 1, desired: 0 },
  );
  assert.equal((await scraped()).drover_pool_runs_awaiting_confirmation, 1);
  assert.equal((await scraped()).drover_pool_desired_agents, 0);
  // Confirming it makes the apply demand again (or the idle agent has already taken it).
  await stack.server.api(routes.confirmRun, { params: { id: runId } });
  const confirmed = await demand();
  assert.equal(confirmed.awaitingConfirmation, 0);
  assert.equal(confirmed.pending + confirmed.running, confirmed.desiredAgents);
  assert.equal((await stack.waitForRun(runId, ["applied", "errored"])).status, "applied");
});

test("a burst of 50 queued runs asks for 50 agents of concurrency 1, 13 of concurrency 4; runs queued behind another run of their workspace are not demand", async () => {
  await agent?.stop("SIGTERM");
  await eventually("the agent deregistered", async () => ((await demand()).agents.online === 0 ? true : undefined));
  const archive = rawTarGz([{ path: "main.tf", content: 'resource "terraform_data" "x" {}\n' }]);
  for (let i = 0; i < 50; i++) {
    const ws = `burst-${i}`;
    assert.equal(
      (await stack.server.api(routes.createWorkspace, { body: { name: ws, pool: stack.pool } })).status,
      201,
    );
    const cv = await stack.server.api(routes.uploadConfiguration, { params: { ws }, body: archive });
    assert.equal(cv.status, 201, JSON.stringify(cv.body));
    // Two runs per workspace: the second waits for the first and needs no agent yet (runs that
    // may apply: a plan-only run goes beside the workspace's queue, and is demand at once).
    for (let r = 0; r < 2; r++) {
      const run = await stack.server.api(routes.createRun, {
        body: { workspace: ws, configurationVersionId: cv.body.id, planOnly: false },
      });
      assert.equal(run.status, 201, JSON.stringify(run.body));
    }
  }
  const d = await demand();
  assert.deepEqual(
    { pending: d.pending, running: d.running, jobsPerAgent: d.jobsPerAgent, desired: d.desiredAgents },
    { pending: 50, running: 0, jobsPerAgent: 1, desired: 50 },
  );
  assert.equal((await demand({ jobsPerAgent: 4 })).desiredAgents, 13);
  assert.equal((await scraped()).drover_pool_desired_agents, 50);
});

test("the pool-token endpoint refuses other tokens and bad parameters", async () => {
  const refused = (token: string | undefined, query: { jobsPerAgent?: number } = {}) =>
    client(stack.server.url, token)
      .call(routes.agentDemand, { query })
      .then(
        () => assert.fail("the demand endpoint answered"),
        (err: unknown) => err as ApiError,
      );
  const none = await refused(undefined);
  assert.equal(none.httpStatus, 401);
  const user = await refused(stack.server.adminToken);
  assert.equal(user.httpStatus, 401);
  assert.equal(user.code, "unauthorized");
  assert.equal((await refused(stack.poolToken, { jobsPerAgent: 0 })).httpStatus, 400);
  assert.equal((await stack.server.api(routes.poolDemand, { params: { pool: "no-such-pool" } })).status, 404);
});
