import {
  DroverError,
  newId,
  vcsFetchResultSchema,
  vcsFetchTaskSchema,
  vcsOperationResultSchemas,
  relayedVcsOperationSchema,
  type Agent,
  type CompleteVcsTask,
  type ErrorCode,
  type VcsProvider,
  type VcsTaskEnvelope,
} from "@drover/protocol";
import type { ArchiveLimits } from "@drover/runtime";
import type { Selectable } from "kysely";
import type { z } from "zod";
import type { BodySource } from "./bodies.js";
import type { VcsTasksTable } from "../db/schema.js";
import { waitForEvent } from "../events.js";
import { createConfigurationVersion } from "./configuration-versions.js";
import type { StoreContext } from "./context.js";
import { iso } from "./context.js";
import { touchAgent } from "./agents.js";
import { poolKindOf, requirePoolKind } from "./pools.js";
import { poolWaiters } from "./waiters.js";

/*
 * Tasks for VCS agents, leased like jobs. A claim raises the attempt number and sets a lease;
 * every later call of the agent names its attempt, and one of a superseded attempt is refused
 * (stale_attempt). A leased task whose lease ran out is claimable again by any agent of the pool,
 * so a VCS agent that dies mid-fetch is replaced without a sweep: the pool's waiters re-check
 * the queue every few seconds (waiters.ts) and a waiting agent takes it.
 */

type TaskRow = Selectable<VcsTasksTable>;

export interface EnqueueVcsTaskInput {
  poolId: string;
  connectionId: string;
  task: { kind: "operation"; operation: unknown } | { kind: "fetch"; fetch: unknown };
  /** A fetch's workspace (its archive becomes a configuration version of it). */
  workspaceId?: string | undefined;
  /** How long the caller waits for the result; past it the task is not handed out. */
  deadlineMs: number;
}

/** Queues a task for the pool's VCS agents, after checking it against the closed schemas. */
export async function enqueueVcsTask(ctx: StoreContext, input: EnqueueVcsTaskInput): Promise<string> {
  const payload =
    input.task.kind === "operation"
      ? parsed(relayedVcsOperationSchema, input.task.operation, "VCS operation a VCS agent runs")
      : parsed(vcsFetchTaskSchema, input.task.fetch, "VCS fetch");
  const now = ctx.now();
  const id = newId("vtask");
  await ctx.db
    .insertInto("vcs_tasks")
    .values({
      id,
      pool_id: input.poolId,
      connection_id: input.connectionId,
      kind: input.task.kind,
      payload: JSON.stringify(payload),
      workspace_id: input.workspaceId ?? null,
      status: "queued",
      agent_id: null,
      lease_expires_at: null,
      deadline_at: now + input.deadlineMs,
      result: null,
      error: null,
      configuration_version_id: null,
      created_at: now,
      finished_at: null,
    })
    .execute();
  // The pool's waiters listen on the job topic: a vcs pool never has jobs, so it wakes VCS agents only.
  ctx.events.publish("job-queued", input.poolId);
  return id;
}

function parsed<T>(schema: z.ZodType<T>, value: unknown, what: string): T {
  const r = schema.safeParse(value);
  if (!r.success) throw new DroverError("bad_request", `not a valid ${what}: ${r.error.message}`);
  return r.data;
}

async function requireVcsAgent(ctx: StoreContext, agent: Agent): Promise<void> {
  requirePoolKind(await poolKindOf(ctx, agent.poolId), "vcs", "taking VCS tasks");
}

/** Claims the oldest task of the agent's pool that is queued or whose lease ran out; null when none. */
export async function claimVcsTask(ctx: StoreContext, agent: Agent): Promise<VcsTaskEnvelope | null> {
  for (let tries = 0; tries < 5; tries++) {
    const now = ctx.now();
    const row = await ctx.db
      .selectFrom("vcs_tasks")
      .innerJoin("vcs_connections", "vcs_connections.id", "vcs_tasks.connection_id")
      .selectAll("vcs_tasks")
      .select("vcs_connections.name as connection")
      .where("vcs_tasks.pool_id", "=", agent.poolId)
      .where("vcs_tasks.deadline_at", ">", now)
      .where((eb) =>
        eb.or([
          eb("vcs_tasks.status", "=", "queued"),
          eb.and([eb("vcs_tasks.status", "=", "leased"), eb("vcs_tasks.lease_expires_at", "<", now)]),
        ]),
      )
      .orderBy("vcs_tasks.created_at")
      .orderBy("vcs_tasks.id")
      .limit(1)
      .executeTakeFirst();
    if (!row) return null;
    const attempt = row.attempt + 1;
    // Conditional on the row as read: of two agents (or server processes) claiming it, one wins.
    const moved = await ctx.db
      .updateTable("vcs_tasks")
      .set({
        status: "leased",
        attempt,
        agent_id: agent.id,
        lease_expires_at: now + ctx.settings.leaseTtlMs,
      })
      .where("id", "=", row.id)
      .where("attempt", "=", row.attempt)
      .where("status", "=", row.status)
      .executeTakeFirst();
    if (Number(moved.numUpdatedRows) !== 1) continue;
    // Checked against the closed schemas when it was queued; the agent checks it again.
    const payload: unknown = JSON.parse(row.payload);
    return { id: row.id, attempt, connection: row.connection, kind: row.kind, [row.kind]: payload };
  }
  return null;
}

/** The long-poll of a VCS agent: a task, or null after `waitMs` without one. */
export async function pollForVcsTask(
  ctx: StoreContext,
  agent: Agent,
  waitMs: number,
  signal?: AbortSignal,
): Promise<VcsTaskEnvelope | null> {
  await requireVcsAgent(ctx, agent);
  const deadline = ctx.now() + waitMs;
  await touchAgent(ctx, agent.id);
  const waiters = poolWaiters(ctx.events);
  for (;;) {
    const wake = waiters.wait(agent.poolId, Math.max(0, deadline - ctx.now()), signal);
    let task: VcsTaskEnvelope | null;
    try {
      task = await claimVcsTask(ctx, agent);
    } catch (err) {
      wake.cancel();
      throw err;
    }
    if (task || signal?.aborted || ctx.now() >= deadline) {
      wake.cancel();
      return task;
    }
    if (!(await wake.promise) || signal?.aborted) return null;
  }
}

/** The task as its current leaseholder sees it; any other caller is refused. */
async function leasedTask(ctx: StoreContext, agent: Agent, id: string, attempt: number): Promise<TaskRow> {
  await requireVcsAgent(ctx, agent);
  const row = await ctx.db
    .selectFrom("vcs_tasks")
    .selectAll()
    .where("id", "=", id)
    .where("pool_id", "=", agent.poolId)
    .executeTakeFirst();
  if (!row) throw new DroverError("not_found", `no VCS task ${JSON.stringify(id)} in this agent's pool`);
  if (row.attempt !== attempt || row.agent_id !== agent.id || row.status !== "leased")
    throw new DroverError(
      "stale_attempt",
      `VCS task ${id} is no longer this agent's (attempt ${row.attempt}, ${row.status}); stop working on it`,
      { details: { attempt: row.attempt } },
    );
  return row;
}

/** Renews the lease of a task the agent is working on. */
export async function renewVcsTask(
  ctx: StoreContext,
  agent: Agent,
  id: string,
  attempt: number,
): Promise<{ leaseExpiresAt: string }> {
  await leasedTask(ctx, agent, id, attempt);
  const expires = ctx.now() + ctx.settings.leaseTtlMs;
  await ctx.db
    .updateTable("vcs_tasks")
    .set({ lease_expires_at: expires })
    .where("id", "=", id)
    .where("attempt", "=", attempt)
    .execute();
  return { leaseExpiresAt: iso(expires) };
}

/**
 * Checks a fetch task's archive exactly like a CLI upload (size limit included) and stores it as
 * a configuration version of the task's workspace.
 */
export async function storeVcsArchive(
  ctx: StoreContext,
  agent: Agent,
  id: string,
  attempt: number,
  archive: BodySource,
  limits: ArchiveLimits,
): Promise<void> {
  const row = await leasedTask(ctx, agent, id, attempt);
  if (row.kind !== "fetch" || row.workspace_id === null)
    throw new DroverError("bad_request", `VCS task ${id} is not a fetch: it takes no archive`);
  const cv = await createConfigurationVersion(ctx, row.workspace_id, archive, limits);
  await ctx.db
    .updateTable("vcs_tasks")
    .set({ configuration_version_id: cv.id })
    .where("id", "=", id)
    .where("attempt", "=", attempt)
    .execute();
}

/** Ends a task with its result (checked against the operation's result schema) or its error. */
export async function completeVcsTask(
  ctx: StoreContext,
  agent: Agent,
  id: string,
  body: CompleteVcsTask,
): Promise<void> {
  const row = await leasedTask(ctx, agent, id, body.attempt);
  let set: { status: "succeeded" | "failed"; result: string | null; error: string | null };
  if ("error" in body)
    set = { status: "failed", result: null, error: JSON.stringify({ message: body.error, code: body.code ?? null }) };
  else {
    let result: unknown;
    if (row.kind === "fetch") {
      const fetched = parsed(vcsFetchResultSchema, body.result, "result of a fetch");
      if (fetched.wanted && row.configuration_version_id === null)
        throw new DroverError("bad_request", `VCS task ${id} says its commit is wanted but uploaded no archive`);
      result = fetched;
    } else {
      const { op } = parsed(relayedVcsOperationSchema, JSON.parse(row.payload), "VCS operation");
      const schema: z.ZodType = vcsOperationResultSchemas[op];
      result = parsed(schema, body.result, `result of ${op}`);
    }
    set = { status: "succeeded", result: JSON.stringify(result), error: null };
  }
  const done = await ctx.db
    .updateTable("vcs_tasks")
    .set({ ...set, finished_at: ctx.now() })
    .where("id", "=", id)
    .where("attempt", "=", body.attempt)
    .where("status", "=", "leased")
    .executeTakeFirst();
  if (Number(done.numUpdatedRows) !== 1)
    throw new DroverError("stale_attempt", `VCS task ${id} is no longer this agent's; stop working on it`);
  ctx.events.publish("vcs-task-done", id);
}

/** A failed task's error as its waiter sees it: the agent's code kept, so a refused archive stays one. */
function failure(stored: string | null): DroverError {
  const { message, code } = JSON.parse(stored ?? "{}") as { message?: string; code?: ErrorCode | null };
  return new DroverError(code ?? "internal", `the VCS agent failed: ${message ?? "no reason"}`);
}

/** A finished task as its waiter reads it. */
export interface VcsTaskOutcome {
  result: unknown;
  configurationVersionId: string | null;
}

/** No VCS agent of the pool took a task before its deadline: none runs, or every one was busy throughout. */
export class UntakenVcsTaskError extends DroverError {
  constructor() {
    super("internal", "no VCS agent of the connection's pool took the task in time: is one running?");
  }
}

/**
 * Waits for a task's end: resolves with its result, rejects with its error or when its deadline
 * passes (then the task is withdrawn, so no agent takes it after nobody waits any more).
 */
export async function awaitVcsTask(ctx: StoreContext, id: string, signal?: AbortSignal): Promise<VcsTaskOutcome> {
  for (;;) {
    // Subscribed before the read: an end between the two still wakes this wait.
    const row0 = await ctx.db.selectFrom("vcs_tasks").select("deadline_at").where("id", "=", id).executeTakeFirst();
    if (!row0) throw new DroverError("not_found", `no VCS task ${JSON.stringify(id)}`);
    const wake = waitForEvent(ctx.events, "vcs-task-done", id, Math.max(0, row0.deadline_at - ctx.now()), signal);
    const row = await ctx.db.selectFrom("vcs_tasks").selectAll().where("id", "=", id).executeTakeFirstOrThrow();
    if (row.status === "succeeded" || row.status === "failed") {
      wake.cancel();
      await ctx.db.deleteFrom("vcs_tasks").where("id", "=", id).execute();
      if (row.status === "failed") throw failure(row.error);
      return { result: JSON.parse(row.result ?? "null"), configurationVersionId: row.configuration_version_id };
    }
    if (signal?.aborted || ctx.now() >= row.deadline_at) {
      wake.cancel();
      await ctx.db.deleteFrom("vcs_tasks").where("id", "=", id).where("status", "in", ["queued", "leased"]).execute();
      if (row.status === "queued") throw new UntakenVcsTaskError();
      throw new DroverError("internal", `the VCS agent did not finish the task in time (attempt ${row.attempt})`);
    }
    await wake.promise;
  }
}

/**
 * The connection a VCS agent forwards a webhook delivery for: one its own pool relays (by name),
 * with the provider that tells how to read the delivery.
 */
export async function relayedConnection(
  ctx: StoreContext,
  agent: Agent,
  name: string,
): Promise<{ id: string; provider: VcsProvider }> {
  await requireVcsAgent(ctx, agent);
  const connection = await ctx.db
    .selectFrom("vcs_connections")
    .select(["id", "provider", "via_pool_id"])
    .where("name", "=", name)
    .executeTakeFirst();
  if (!connection) throw new DroverError("not_found", `no VCS connection ${JSON.stringify(name)}`);
  if (connection.via_pool_id !== agent.poolId)
    throw new DroverError("forbidden", `VCS connection ${name} is not relayed by this agent's pool`);
  return { id: connection.id, provider: connection.provider };
}
