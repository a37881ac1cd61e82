import { newId, type RunStatus } from "@drover/protocol";
import type { Selectable, Transaction } from "kysely";
import type { Database, VcsReportsTable } from "../db/schema.js";
import type { StoreContext } from "./context.js";

/*
 * The outbox of reports to a VCS. A run with a source writes, in the transaction that changes its
 * status, that its commit status (and, when it ends and plans a pull request, the workspace's one
 * comment there) must be brought up to date; the reporter delivers it later, out of the run's
 * way, and retries with backoff while the VCS API fails. A row is one thing on the VCS, so later
 * changes coalesce into it: `version` counts them, and only the delivery of the version last
 * written clears `due_at`.
 */

/** Statuses a commit status shows; the others are passing steps between them. */
const statusReported = new Set<RunStatus>([
  "queued",
  "planned",
  "planned_and_finished",
  "applied",
  "errored",
  "canceled",
  "discarded",
]);
/** Statuses the pull-request comment shows: where the plan (or its failure) is known. */
const commentReported = new Set<RunStatus>([
  "planned",
  "planned_and_finished",
  "applied",
  "errored",
  "canceled",
  "discarded",
]);

type Trx = Transaction<Database>;
export type VcsReportRow = Selectable<VcsReportsTable>;

/** Records what a run's new status means for its VCS; nothing for a run without a source or link. */
export async function queueVcsReports(ctx: StoreContext, trx: Trx, runId: string, status: RunStatus): Promise<void> {
  if (!statusReported.has(status)) return;
  const run = await trx
    .selectFrom("runs")
    .innerJoin("workspace_vcs", "workspace_vcs.workspace_id", "runs.workspace_id")
    .select([
      "runs.workspace_id",
      "runs.source_repository",
      "runs.source_commit_sha",
      "runs.source_pull_request_number",
      "workspace_vcs.connection_id",
    ])
    .where("runs.id", "=", runId)
    .where("runs.source_commit_sha", "is not", null)
    .executeTakeFirst();
  if (!run || run.source_commit_sha === null || run.source_repository === null) return;
  const now = ctx.now();
  const row = {
    workspace_id: run.workspace_id,
    run_id: runId,
    connection_id: run.connection_id,
    repository: run.source_repository,
    commit_sha: run.source_commit_sha,
    pull_request_number: run.source_pull_request_number,
  };
  const upsert = (key: string, kind: "status" | "comment") =>
    trx
      .insertInto("vcs_reports")
      .values({
        id: newId("vrp"),
        key,
        kind,
        ...row,
        comment_id: null,
        version: 1,
        due_at: now,
        attempts: 0,
        last_error: null,
        updated_at: now,
      })
      .onConflict((oc) =>
        oc.column("key").doUpdateSet((eb) => ({
          ...row,
          version: eb("vcs_reports.version", "+", 1),
          due_at: now,
          attempts: 0,
          updated_at: now,
        })),
      )
      .execute();
  await upsert(`status:${runId}`, "status");
  if (run.source_pull_request_number !== null && commentReported.has(status))
    await upsert(`comment:${run.workspace_id}:${run.source_repository}#${run.source_pull_request_number}`, "comment");
}

/** Reports due now, oldest first. */
export async function dueVcsReports(ctx: StoreContext, limit: number): Promise<VcsReportRow[]> {
  return ctx.db
    .selectFrom("vcs_reports")
    .selectAll()
    .where("due_at", "<=", ctx.now())
    .orderBy("due_at")
    .limit(limit)
    .execute();
}

/**
 * Takes a due report for `forMs` (another process skips it meanwhile); false when another took
 * it or it changed since it was read.
 */
export async function claimVcsReport(ctx: StoreContext, r: VcsReportRow, forMs: number): Promise<boolean> {
  const claimed = await ctx.db
    .updateTable("vcs_reports")
    .set({ due_at: ctx.now() + forMs })
    .where("id", "=", r.id)
    .where("version", "=", r.version)
    .where("due_at", "=", r.due_at)
    .executeTakeFirst();
  return Number(claimed.numUpdatedRows) === 1;
}

/** A delivered report: done unless it changed meanwhile; the comment id is kept either way. */
export async function deliveredVcsReport(ctx: StoreContext, r: VcsReportRow, commentId: number | null): Promise<void> {
  if (commentId !== null)
    await ctx.db.updateTable("vcs_reports").set({ comment_id: commentId }).where("id", "=", r.id).execute();
  await ctx.db
    .updateTable("vcs_reports")
    .set({ due_at: null, attempts: 0, last_error: null, updated_at: ctx.now() })
    .where("id", "=", r.id)
    .where("version", "=", r.version)
    .execute();
}

/** A failed delivery: due again at `retryAt` (null: given up), unless it changed meanwhile. */
export async function failedVcsReport(
  ctx: StoreContext,
  r: VcsReportRow,
  error: string,
  retryAt: number | null,
): Promise<void> {
  await ctx.db
    .updateTable("vcs_reports")
    .set({ due_at: retryAt, attempts: r.attempts + 1, last_error: error.slice(0, 2000), updated_at: ctx.now() })
    .where("id", "=", r.id)
    .where("version", "=", r.version)
    .execute();
}

/** Every report of a workspace (tests, diagnostics). */
export async function listVcsReports(ctx: StoreContext, workspaceId: string): Promise<VcsReportRow[]> {
  return ctx.db
    .selectFrom("vcs_reports")
    .selectAll()
    .where("workspace_id", "=", workspaceId)
    .orderBy("updated_at")
    .execute();
}
