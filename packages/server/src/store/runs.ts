import {
  assertRunTransition,
  DroverError,
  isTerminalRun,
  newId,
  type JobOutcome,
  type Phase,
  type Run,
  type RunStatus,
} from "@drover/protocol";
import type { Selectable, Transaction } from "kysely";
import type { Database, JobsTable, RunsTable } from "../db/schema.js";
import { iso, type Queryable, type StoreContext } from "./context.js";
import { heldByDestroyGuard, holdForDestroyGuard } from "./destroy-guard.js";
import { inTransaction, type Effects } from "./transaction.js";
import { getWorkspace } from "./workspaces.js";
import { planOptionsOf } from "./run-options.js";
import { queueVcsReports } from "./vcs-reports.js";

/*
 * Run lifecycle. A workspace runs one run at a time: `workspaces.current_run_id` is the
 * mutex, taken with a conditional update so two server processes cannot both take it.
 *
 *   pending ─▶ queued ─▶ planning ─▶ planned ─▶ confirmed ─▶ applying ─▶ applied
 *                              │          └──▶ discarded
 *                              └──▶ planned_and_finished (plan-only, or nothing to change)
 *   any non-terminal state ─▶ canceled | errored
 *
 * The full table is packages/protocol/src/lifecycle.ts; every status change goes through
 * moveRun, which refuses one the table does not allow.
 */

type Trx = Transaction<Database>;
type RunRow = Selectable<RunsTable>;

const toRun = (r: RunRow & { workspace_name: string }): Run => ({
  id: r.id,
  workspaceId: r.workspace_id,
  workspaceName: r.workspace_name,
  configurationVersionId: r.configuration_version_id,
  status: r.status,
  planOnly: r.plan_only === 1,
  savedPlan: r.save_plan === 1,
  isDestroy: r.is_destroy === 1,
  autoApply: r.auto_apply === 1,
  message: r.message,
  errorMessage: r.error_message,
  cancelRequested: r.cancel_requested === 1,
  planSummary:
    r.plan_add === null || r.plan_change === null || r.plan_destroy === null
      ? null
      : { add: r.plan_add, change: r.plan_change, destroy: r.plan_destroy, hasChanges: r.has_changes === 1 },
  planJobId: r.plan_job_id,
  createdBy: r.created_by,
  applyJobId: r.apply_job_id,
  source:
    r.source_commit_sha === null
      ? null
      : {
          repository: r.source_repository ?? "",
          branch: r.source_branch ?? "",
          commitSha: r.source_commit_sha,
          message: r.source_message ?? "",
          author: r.source_author ?? "",
          pullRequest:
            r.source_pull_request_number === null
              ? null
              : { number: r.source_pull_request_number, url: r.source_pull_request_url ?? "" },
        },
  createdAt: iso(r.created_at),
  updatedAt: iso(r.updated_at),
  ...planOptionsOf(r.plan_options),
});

/** Runs with their workspace's name. */
const selectRuns = (db: Queryable) =>
  db
    .selectFrom("runs")
    .innerJoin("workspaces", "workspaces.id", "runs.workspace_id")
    .selectAll("runs")
    .select("workspaces.name as workspace_name");

/**
 * Changes a run's status (with `fields`), refusing a change the lifecycle table does not allow
 * (invalid_transition). `run` is the row as read in this transaction.
 */
export async function moveRun(
  ctx: StoreContext,
  trx: Trx,
  run: Pick<RunRow, "id" | "status">,
  to: RunStatus,
  fields: Partial<Omit<RunRow, "id" | "status">> = {},
): Promise<void> {
  assertRunTransition(run.id, run.status, to);
  const moved = await trx
    .updateTable("runs")
    .set({ ...fields, status: to, updated_at: ctx.now() })
    .where("id", "=", run.id)
    .where("status", "=", run.status)
    .executeTakeFirst();
  // The row changed under this transaction: a bug in locking, not a user error.
  if (Number(moved.numUpdatedRows) !== 1)
    throw new Error(`run ${run.id} was no longer ${run.status} when it was moved to ${to}`);
  // A caller holding the whole row spares runs without a source the look-up.
  if (!("source_commit_sha" in run) || run.source_commit_sha !== null) await queueVcsReports(ctx, trx, run.id, to);
}

export async function getRun(ctx: StoreContext, id: string, db: Queryable = ctx.db): Promise<Run> {
  const row = await selectRuns(db).where("runs.id", "=", id).executeTakeFirst();
  if (!row) throw new DroverError("not_found", `no run ${JSON.stringify(id)}`);
  return toRun(row);
}

/** What a run list asks for: a workspace, a status and a page. */
export interface ListRunsInput {
  workspace?: string | undefined;
  status?: RunStatus | undefined;
  /** Page size (default 100). */
  limit?: number | undefined;
  /** The id of the run the previous page ended with. */
  after?: string | undefined;
}

/** Runs of a workspace (or all), newest first, a page at a time; `next` is the cursor of the page after. */
export async function listRuns(
  ctx: StoreContext,
  input: ListRunsInput,
): Promise<{ items: Run[]; next: string | null }> {
  const limit = input.limit ?? 100;
  let q = ctx.db.selectFrom("runs").selectAll();
  if (input.workspace) q = q.where("workspace_id", "=", (await getWorkspace(ctx, input.workspace)).id);
  if (input.status) q = q.where("status", "=", input.status);
  if (input.after !== undefined) {
    const last = await ctx.db
      .selectFrom("runs")
      .select(["id", "created_at"])
      .where("id", "=", input.after)
      .executeTakeFirst();
    if (!last) throw new DroverError("bad_request", `no run ${JSON.stringify(input.after)} to list after`);
    q = q.where((eb) =>
      eb.or([
        eb("created_at", "<", last.created_at),
        eb.and([eb("created_at", "=", last.created_at), eb("id", "<", last.id)]),
      ]),
    );
  }
  const rows = await q
    .orderBy("created_at", "desc")
    .orderBy("id", "desc")
    .limit(limit + 1)
    .execute();
  const more = rows.length > limit;
  const pageRows = more ? rows.slice(0, limit) : rows;
  // The names in a second look-up: the page's query stays the one its indexes serve.
  const wsIds = [...new Set(pageRows.map((r) => r.workspace_id))];
  const names = new Map(
    wsIds.length === 0
      ? []
      : (await ctx.db.selectFrom("workspaces").select(["id", "name"]).where("id", "in", wsIds).execute()).map(
          (w) => [w.id, w.name] as const,
        ),
  );
  const items = pageRows.map((r) => toRun({ ...r, workspace_name: names.get(r.workspace_id) ?? r.workspace_id }));
  return { items, next: more ? (items.at(-1)?.id ?? null) : null };
}

/** Inserts a queued job for a run phase and wakes the pool's waiting agents after commit. */
async function enqueueJob(ctx: StoreContext, trx: Trx, effects: Effects, run: RunRow, phase: Phase): Promise<string> {
  const ws = await trx
    .selectFrom("workspaces")
    .select("pool_id")
    .where("id", "=", run.workspace_id)
    .executeTakeFirstOrThrow();
  const now = ctx.now();
  const id = newId("job");
  await trx
    .insertInto("jobs")
    .values({
      id,
      run_id: run.id,
      workspace_id: run.workspace_id,
      pool_id: ws.pool_id,
      phase,
      status: "queued",
      attempt: 0,
      agent_id: null,
      token_hash: null,
      lease_expires_at: null,
      cancel_requested: 0,
      message: null,
      log_size: 0,
      log_truncated: 0,
      queued_at: now,
      created_at: now,
      started_at: null,
      finished_at: null,
    })
    .execute();
  effects.push(["job-queued", ws.pool_id]);
  return id;
}

/**
 * Queues a plan-only (speculative) run at once, beside its workspace's queue: it changes no state,
 * so it waits for no other run of the workspace and none waits for it. Its plan reads the state
 * without locking it (the agent plans it with -lock=false).
 */
export async function queueSpeculativeRun(ctx: StoreContext, trx: Trx, effects: Effects, runId: string): Promise<void> {
  const run = await trx.selectFrom("runs").selectAll().where("id", "=", runId).executeTakeFirstOrThrow();
  const jobId = await enqueueJob(ctx, trx, effects, run, "plan");
  await moveRun(ctx, trx, run, "queued", { plan_job_id: jobId });
  effects.push(["run-changed", run.id]);
}

/** Moves the oldest pending run of a free workspace to queued, with its plan job. */
export async function promoteNextRun(
  ctx: StoreContext,
  trx: Trx,
  effects: Effects,
  workspaceId: string,
): Promise<void> {
  const next = await trx
    .selectFrom("runs")
    .selectAll()
    .where("workspace_id", "=", workspaceId)
    .where("status", "=", "pending")
    .orderBy("created_at")
    .orderBy("id")
    .limit(1)
    .executeTakeFirst();
  if (!next) return;
  const taken = await trx
    .updateTable("workspaces")
    .set({ current_run_id: next.id })
    .where("id", "=", workspaceId)
    .where("current_run_id", "is", null)
    .executeTakeFirst();
  if (Number(taken.numUpdatedRows) === 0) return;
  const jobId = await enqueueJob(ctx, trx, effects, next, "plan");
  await moveRun(ctx, trx, next, "queued", { plan_job_id: jobId });
  effects.push(["run-changed", next.id]);
}

/**
 * Ends a run in a terminal state: releases the workspace and any state lock its jobs took,
 * then starts the next pending run.
 */
export async function endRun(
  ctx: StoreContext,
  trx: Trx,
  effects: Effects,
  run: RunRow,
  status: RunStatus,
  errorMessage: string | null,
): Promise<void> {
  await moveRun(ctx, trx, run, status, { error_message: errorMessage ?? run.error_message });
  const jobIds = [run.plan_job_id, run.apply_job_id].filter((j): j is string => j !== null);
  if (status !== "applied" && status !== "planned_and_finished" && jobIds.length > 0) {
    await trx
      .deleteFrom("state_locks")
      .where("workspace_id", "=", run.workspace_id)
      .where("job_id", "in", jobIds)
      .execute();
  }
  await trx
    .updateTable("workspaces")
    .set({ current_run_id: null })
    .where("id", "=", run.workspace_id)
    .where("current_run_id", "=", run.id)
    .execute();
  effects.push(["run-changed", run.id]);
  await promoteNextRun(ctx, trx, effects, run.workspace_id);
}

/** The run's row in this transaction, locked on PostgreSQL until it commits. */
export async function lockedRun(ctx: StoreContext, trx: Trx, runId: string): Promise<RunRow> {
  let q = trx.selectFrom("runs").selectAll().where("id", "=", runId);
  if (ctx.dialect === "postgres") q = q.forUpdate();
  const row = await q.executeTakeFirst();
  if (!row) throw new DroverError("not_found", `no run ${JSON.stringify(runId)}`);
  return row;
}

/** Applies a planned run: queues its apply job. */
export async function confirmRun(ctx: StoreContext, runId: string): Promise<Run> {
  await inTransaction(ctx, async (trx, effects) => {
    const run = await lockedRun(ctx, trx, runId);
    if (run.status !== "planned") {
      throw new DroverError(
        "invalid_transition",
        `run ${run.id} is ${run.status}; only a planned run can be confirmed`,
      );
    }
    const jobId = await enqueueJob(ctx, trx, effects, run, "apply");
    await moveRun(ctx, trx, run, "confirmed", { apply_job_id: jobId });
    effects.push(["run-changed", run.id]);
  });
  return getRun(ctx, runId);
}

/** Discards a planned run without applying it. */
export async function discardRun(ctx: StoreContext, runId: string): Promise<Run> {
  await inTransaction(ctx, async (trx, effects) => {
    const run = await lockedRun(ctx, trx, runId);
    if (run.status !== "planned") {
      throw new DroverError(
        "invalid_transition",
        `run ${run.id} is ${run.status}; only a planned run can be discarded`,
      );
    }
    await endRun(ctx, trx, effects, run, "discarded", null);
  });
  return getRun(ctx, runId);
}

/** How a finished job moves its run on. Called inside the transaction that finished the job. */
export async function applyJobOutcome(
  ctx: StoreContext,
  trx: Trx,
  effects: Effects,
  job: Selectable<JobsTable>,
  outcome: JobOutcome,
  message: string | null,
): Promise<void> {
  const run = await lockedRun(ctx, trx, job.run_id);
  if (isTerminalRun(run.status)) return;
  if (outcome === "canceled") return endRun(ctx, trx, effects, run, "canceled", message);
  if (outcome === "failed" || outcome === "errored") {
    return endRun(ctx, trx, effects, run, "errored", message ?? `${job.phase} ${outcome}`);
  }
  if (job.phase === "apply") return endRun(ctx, trx, effects, run, "applied", null);
  // A plan succeeded.
  if (run.cancel_requested === 1) return endRun(ctx, trx, effects, run, "canceled", null);
  if (run.plan_only === 1 || run.has_changes === 0) return endRun(ctx, trx, effects, run, "planned_and_finished", null);
  const held = heldByDestroyGuard(run);
  if (held) {
    // An emptied or wrong configuration plans to destroy everything: a person must say so.
    const error = await holdForDestroyGuard(trx, run, job.id);
    if (error !== null) return endRun(ctx, trx, effects, run, "errored", error);
  }
  if (run.auto_apply === 1 && !held) {
    const jobId = await enqueueJob(ctx, trx, effects, run, "apply");
    await moveRun(ctx, trx, run, "confirmed", { apply_job_id: jobId });
  } else {
    await moveRun(ctx, trx, run, "planned");
  }
  effects.push(["run-changed", run.id]);
}

/** Marks the run as executing its phase when the agent starts the job. */
export async function markPhaseStarted(
  ctx: StoreContext,
  trx: Trx,
  effects: Effects,
  runId: string,
  phase: Phase,
): Promise<RunStatus> {
  const status: RunStatus = phase === "plan" ? "planning" : "applying";
  await moveRun(ctx, trx, await lockedRun(ctx, trx, runId), status);
  effects.push(["run-changed", runId]);
  return status;
}
