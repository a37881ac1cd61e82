import {
  DroverError,
  isFinishedJob,
  hashToken,
  newJobToken,
  parseJobToken,
  tokenMatches,
  type Agent,
  type Job,
  type JobAssignment,
  type JobHeartbeatResponse,
  type JobOutcome,
  type PlanSummary,
  type RunStatus,
} from "@drover/protocol";
import { waitForEvent } from "../events.js";
import { CoalescedReads } from "./coalesced-reads.js";
import { iso, isoOrNull, type StoreContext } from "./context.js";
import { applyJobOutcome, markPhaseStarted } from "./runs.js";
import { inTransaction } from "./transaction.js";
import { touchAgent } from "./agents.js";
import { recordPlanSummary } from "./plans.js";
import { currentAttempt } from "./current-attempt.js";
import { poolWaiters } from "./waiters.js";
import { planOptionsOf } from "./run-options.js";
import { moveAgentJobs, moveJob, moveLockedJob } from "./job-moves.js";

/*
 * The job queue. A claim is a lease: the claiming agent gets a job token bound to the job's
 * new attempt number and must renew the lease by heartbeat. When an attempt is superseded
 * (lease expired, job requeued and claimed again) every write carrying the old token is
 * refused with `stale_attempt`: the fencing that keeps a partitioned agent from writing.
 */

export type { JobRow } from "../db/schema.js";
import type { JobRow } from "../db/schema.js";

export const toJob = (r: JobRow, agentName: string | null = null): Job => ({
  id: r.id,
  runId: r.run_id,
  workspaceId: r.workspace_id,
  poolId: r.pool_id,
  phase: r.phase,
  status: r.status,
  attempt: r.attempt,
  agentId: r.agent_id,
  agentName,
  message: r.message,
  createdAt: iso(r.created_at),
  startedAt: isoOrNull(r.started_at),
  finishedAt: isoOrNull(r.finished_at),
});

/** Path (relative to the server URL) of a workspace's state, as the http backend uses it. */
export const statePath = (workspaceId: string): string => `/api/v1/workspaces/${workspaceId}/state`;

/** Pools per look at the queue: far below either database's parameter limit. */
const probeBatchSize = 200;

/** Which of `poolIds` have a queued job. */
async function poolsWithQueuedJobs(ctx: StoreContext, poolIds: string[]): Promise<Map<string, true>> {
  const found = new Map<string, true>();
  if (poolIds.length === 1) {
    // One pool (the usual case): the index answers `limit 1` without touching the other queued jobs.
    const row = await ctx.db
      .selectFrom("jobs")
      .select("pool_id")
      .where("pool_id", "=", poolIds[0]!)
      .where("status", "=", "queued")
      .limit(1)
      .executeTakeFirst();
    if (row) found.set(row.pool_id, true);
    return found;
  }
  // One row per pool: a correlated `exists` stops at each pool's first queued job in the index.
  const rows = await ctx.db
    .selectFrom("pools")
    .select("id")
    .where("id", "in", poolIds)
    .where((eb) =>
      eb.exists(
        eb
          .selectFrom("jobs")
          .select("jobs.id")
          .whereRef("jobs.pool_id", "=", "pools.id")
          .where("jobs.status", "=", "queued"),
      ),
    )
    .execute();
  for (const r of rows) found.set(r.id, true);
  return found;
}

const queueProbes = new WeakMap<StoreContext["db"], CoalescedReads<string, true>>();

/** Claims the oldest queued job of the agent's pool, or returns null when there is none. */
export async function claimNextJob(ctx: StoreContext, agent: Agent): Promise<JobAssignment | null> {
  // Most polls find nothing: a plain read answers them in one round trip, where the claiming
  // transaction would cost three on PostgreSQL (and a write lock on SQLite). The polls of one
  // event-loop turn share that read (coalesced-reads.ts), so thousands of idle agents cost a
  // few statements per turn, not one each. It is issued after this call, so a job queued
  // before it is seen.
  let probe = queueProbes.get(ctx.db);
  if (!probe)
    queueProbes.set(ctx.db, (probe = new CoalescedReads((pools) => poolsWithQueuedJobs(ctx, pools), probeBatchSize)));
  if (!(await probe.get(agent.poolId))) return null;
  return inTransaction(ctx, async (trx) => {
    let q = trx
      .selectFrom("jobs")
      .selectAll()
      .where("pool_id", "=", agent.poolId)
      .where("status", "=", "queued")
      .orderBy("queued_at")
      .orderBy("id")
      .limit(1);
    if (ctx.dialect === "postgres") q = q.forUpdate().skipLocked();
    const job = await q.executeTakeFirst();
    if (!job) return null;
    await requireClaimingAgent(ctx, trx, agent.id);
    const attempt = job.attempt + 1;
    const token = newJobToken(job.id, attempt);
    const leaseExpiresAt = ctx.now() + ctx.settings.leaseTtlMs;
    if (
      !(await moveJob(ctx, trx, job, "assigned", {
        attempt,
        agent_id: agent.id,
        token_hash: hashToken(token),
        lease_expires_at: leaseExpiresAt,
      }))
    )
      return null;
    await trx
      .insertInto("job_tokens")
      .values({ token_hash: hashToken(token), job_id: job.id, attempt, created_at: ctx.now() })
      .execute();
    // The run and its workspace in one statement.
    const rw = await trx
      .selectFrom("runs")
      .innerJoin("workspaces", "workspaces.id", "runs.workspace_id")
      .select(["runs.id as run_id", "runs.plan_only", "runs.is_destroy", "runs.configuration_version_id"])
      .select([
        "runs.plan_options",
        "runs.save_plan",
        "runs.engine as run_engine",
        "workspaces.id as ws_id",
        "workspaces.name",
        "workspaces.engine",
        "workspaces.engine_version",
        "workspaces.working_directory",
        "workspaces.runner_image",
      ])
      .where("runs.id", "=", job.run_id)
      .executeTakeFirstOrThrow();
    const assignment: JobAssignment = {
      jobId: job.id,
      attempt,
      jobToken: token,
      phase: job.phase,
      runId: rw.run_id,
      planOnly: rw.plan_only === 1,
      isDestroy: rw.is_destroy === 1,
      ...planOptionsOf(rw.plan_options),
      providerSchemas: rw.save_plan === 1,
      workspace: {
        id: rw.ws_id,
        name: rw.name,
        // A run started by the other engine's CLI runs that engine, at whatever version the agent has:
        // the workspace's pinned version is one of its own engine.
        engine: rw.run_engine ?? rw.engine,
        engineVersion: rw.run_engine === null || rw.run_engine === rw.engine ? rw.engine_version : null,
        workingDirectory: rw.working_directory,
        runnerImage: rw.runner_image,
      },
      configurationVersionId: rw.configuration_version_id,
      statePath: statePath(rw.ws_id),
      leaseTtlMs: ctx.settings.leaseTtlMs,
    };
    claimQueuedAt.set(assignment, Number(job.queued_at));
    return assignment;
  });
}

/**
 * Refuses a claim by an agent no longer online or whose pool token is revoked. The session
 * that let the poll in may have come from a server process's cache (store/sessions.ts), which
 * can lag a change made through another process by up to its maximum age; the claim hands out
 * work, so it reads the truth. It runs only when a job was found, so idle polls cost nothing
 * more. On PostgreSQL the rows are share-locked: a revocation or deregistration committing
 * meanwhile waits for this claim, so none is followed by a claim that read the row before it.
 */
async function requireClaimingAgent(
  ctx: StoreContext,
  trx: Parameters<Parameters<typeof inTransaction>[1]>[0],
  agentId: string,
): Promise<void> {
  let q = trx
    .selectFrom("agents")
    .innerJoin("pool_tokens", "pool_tokens.id", "agents.pool_token_id")
    .select(["agents.state", "pool_tokens.revoked_at"])
    .where("agents.id", "=", agentId);
  if (ctx.dialect === "postgres") q = q.forShare();
  const row = await q.executeTakeFirst();
  if (!row) throw new DroverError("unauthorized", "unknown agent session: register again with the pool token");
  if (row.revoked_at !== null)
    throw new DroverError("token_revoked", "the pool token this agent registered with was revoked");
  if (row.state !== "online")
    throw new DroverError("agent_lost", `this agent registration is ${row.state}; register again`, {
      details: { state: row.state },
    });
}

/** When each assignment's job was queued, as the claim read it (for the queue-wait figures). */
const claimQueuedAt = new WeakMap<JobAssignment, number>();

/** When the job of an assignment this process claimed was queued (ms), without reading it again. */
export function queuedAtOf(assignment: JobAssignment): number | undefined {
  return claimQueuedAt.get(assignment);
}

/**
 * The long-poll: claims a job, waiting up to `waitMs` for one to be queued. Joins the pool's
 * waiter queue before each claim attempt, so a job queued in between wakes it.
 */
export async function pollForJob(
  ctx: StoreContext,
  agent: Agent,
  waitMs: number,
  signal?: AbortSignal,
): Promise<JobAssignment | null> {
  const deadline = ctx.now() + waitMs;
  await touchAgent(ctx, agent.id);
  const waiters = poolWaiters(ctx.events);
  for (;;) {
    const wake = waiters.wait(agent.poolId, Math.max(0, deadline - ctx.now()), signal);
    let job: JobAssignment | null;
    try {
      job = await claimNextJob(ctx, agent);
    } catch (err) {
      wake.cancel();
      throw err;
    }
    if (job) {
      wake.cancel();
      return job;
    }
    if (signal?.aborted || ctx.now() >= deadline) {
      wake.cancel();
      return null;
    }
    const woken = await wake.promise;
    if (signal?.aborted) return null;
    // The wait ran out with nothing queued for this poller: answer now. The agent's next poll
    // starts with a claim, so a look here too would only double the statements of idle agents.
    if (!woken) return null;
  }
}

/**
 * Resolves a job token to its job, refusing tokens of finished jobs (`job_finished`) and of
 * superseded attempts (`stale_attempt`).
 */
export async function authenticateJobToken(ctx: StoreContext, token: string): Promise<JobRow> {
  const parsed = parseJobToken(token);
  const job = parsed
    ? await ctx.db.selectFrom("jobs").selectAll().where("id", "=", parsed.jobId).executeTakeFirst()
    : undefined;
  if (!parsed || !job) throw new DroverError("unauthorized", "unknown job token");
  if (job.token_hash !== null && tokenMatches(token, job.token_hash)) return job;
  const hash = hashToken(token);
  // Only a token this job was really given may learn that it is stale or how the job ended.
  const issued = await ctx.db
    .selectFrom("job_tokens")
    .select("attempt")
    .where("token_hash", "=", hash)
    .where("job_id", "=", job.id)
    .executeTakeFirst();
  if (!issued || issued.attempt !== parsed.attempt) throw new DroverError("unauthorized", "unknown job token");
  if (job.attempt !== parsed.attempt) {
    throw new DroverError(
      "stale_attempt",
      `job ${job.id} was reassigned (attempt ${job.attempt}; this token is for attempt ${parsed.attempt}); stop working on it`,
      {
        details: { attempt: job.attempt },
      },
    );
  }
  if (isFinishedJob(job.status)) {
    throw new DroverError("job_finished", `job ${job.id} has ended (${job.status}); its token is no longer valid`, {
      details: { status: job.status },
    });
  }
  // Back in the queue (its lease ran out before it started), not claimed again yet: the
  // attempt is over all the same.
  throw new DroverError(
    "stale_attempt",
    `job ${job.id} went back to the queue (attempt ${parsed.attempt} lost its lease); stop working on it`,
    { details: { attempt: job.attempt } },
  );
}

/**
 * The agent (or Kubernetes worker) begins executing the job; the run enters planning/applying.
 * `starter` names the calling process: the first start records it, a repeat with the same one
 * (a retried request) answers again, and any other is refused with job_already_started, so a
 * job's steps never run in two processes (a pod re-created by its Job, say).
 */
export async function startJob(ctx: StoreContext, job: JobRow, starter: string): Promise<RunStatus> {
  return inTransaction(ctx, async (trx, effects) => {
    const row = await currentAttempt(ctx, trx, job);
    if (row.status === "running") {
      // A job started before migration 0028 has no starter on record: the first one to call again takes it.
      if (row.started_by === null)
        await trx
          .updateTable("jobs")
          .set({ started_by: starter })
          .where("id", "=", row.id)
          .where("started_by", "is", null)
          .execute();
      else if (row.started_by !== starter) {
        throw new DroverError(
          "job_already_started",
          `job ${row.id} (attempt ${row.attempt}) was already started by another worker; this one must not run it and stops without running any step`,
        );
      }
      const run = await trx.selectFrom("runs").select("status").where("id", "=", row.run_id).executeTakeFirstOrThrow();
      return run.status;
    }
    const now = ctx.now();
    await moveLockedJob(ctx, trx, row, "running", {
      started_at: now,
      started_by: starter,
      lease_expires_at: now + ctx.settings.leaseTtlMs,
    });
    return markPhaseStarted(ctx, trx, effects, row.run_id, row.phase);
  });
}

/**
 * Renews the lease. With `waitMs`, holds the request until a cancel is requested or the wait
 * ends, so a cancel reaches the agent in milliseconds with one request in flight per job.
 */
export async function heartbeatJob(
  ctx: StoreContext,
  job: JobRow,
  waitMs: number,
  signal?: AbortSignal,
): Promise<JobHeartbeatResponse> {
  const renew = async (): Promise<JobHeartbeatResponse> =>
    inTransaction(ctx, async (trx) => {
      const row = await currentAttempt(ctx, trx, job);
      const leaseExpiresAt = ctx.now() + ctx.settings.leaseTtlMs;
      await trx.updateTable("jobs").set({ lease_expires_at: leaseExpiresAt }).where("id", "=", row.id).execute();
      return { cancelRequested: row.cancel_requested === 1, leaseExpiresAt: iso(leaseExpiresAt) };
    });
  if (waitMs <= 0) return renew();
  const wake = waitForEvent(ctx.events, "job-cancel", job.id, Math.min(waitMs, ctx.settings.leaseTtlMs / 2), signal);
  const first = await renew().catch((err: unknown) => {
    wake.cancel();
    throw err;
  });
  if (first.cancelRequested) {
    wake.cancel();
    return first;
  }
  const fired = await wake.promise;
  if (!fired || signal?.aborted) return first;
  return renew();
}

/**
 * Ends the job with the agent's outcome and moves its run on; the job token expires here. A
 * succeeded plan job's `planSummary` (terraform's own verdict) decides the run's next step
 * together with the plan JSON's.
 */
export async function finishJob(
  ctx: StoreContext,
  job: JobRow,
  outcome: JobOutcome,
  message: string | null,
  planSummary?: PlanSummary,
): Promise<void> {
  if (planSummary && job.phase !== "plan")
    throw new DroverError("bad_request", "only a plan job reports a plan summary");
  await inTransaction(ctx, async (trx, effects) => {
    const row = await currentAttempt(ctx, trx, job);
    await moveLockedJob(ctx, trx, row, outcome, { message, finished_at: ctx.now() });
    effects.push(["job-finished", row.id], ["log", row.id]);
    if (planSummary && outcome === "succeeded") await recordPlanSummary(ctx, trx, row.run_id, planSummary);
    await applyJobOutcome(ctx, trx, effects, row, outcome, message);
  });
}

/** Requeues jobs an agent claimed but never started (it is stopping or went away cleanly). */
export async function releaseUnstartedJobs(ctx: StoreContext, agentId: string): Promise<void> {
  await inTransaction(ctx, async (trx, effects) => {
    // One UPDATE for all of them (and one to retire their tokens): a stopping agent may hold
    // many, and the statements must not grow with their number.
    const moved = await moveAgentJobs(ctx, trx, agentId, "assigned", "queued", { agent_id: null });
    // One event per job: each wakes one waiting agent.
    for (const j of moved) effects.push(["job-queued", j.pool_id]);
  });
}

export async function getJob(ctx: StoreContext, id: string): Promise<Job> {
  const row = await ctx.db.selectFrom("jobs").selectAll().where("id", "=", id).executeTakeFirst();
  if (!row) throw new DroverError("not_found", `no job ${JSON.stringify(id)}`);
  return toJob(row);
}
