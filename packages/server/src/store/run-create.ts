import { DroverError, newId, type Engine, type Run, type RunSource } from "@drover/protocol";
import type { Queryable, StoreContext } from "./context.js";
import type { GuardOutcome } from "./destroy-guard.js";
import { checkPlanOptions, storedPlanOptions } from "./run-options.js";
import { storedRunVariables, type RunVariable } from "./run-variables.js";
import { getRun, promoteNextRun, queueSpeculativeRun } from "./runs.js";
import { inTransaction } from "./transaction.js";
import { getWorkspace } from "./workspaces.js";

export interface CreateRunInput {
  workspace: string;
  configurationVersionId: string;
  planOnly: boolean;
  isDestroy: boolean;
  autoApply?: boolean | undefined;
  message: string;
  /** Auto-apply even a plan that destroys everything the workspace manages; unset: the workspace's setting. */
  allowDestroyAll?: boolean | undefined;
  /** What the run becomes when the destroy-all guard holds it (default `wait`: planned). */
  whenGuarded?: GuardOutcome | undefined;
  /** The user token that starts it: its description is kept as who started the run. */
  createdByTokenId?: string | undefined;
  /** `-target=` addresses. */
  targets?: string[] | undefined;
  /** `-replace=` addresses. */
  replaces?: string[] | undefined;
  refreshOnly?: boolean | undefined;
  /** false: plan without refreshing (`-refresh=false`). */
  refresh?: boolean | undefined;
  /** The commit of a linked repository the configuration was fetched from. */
  source?: RunSource | undefined;
  /** The engine of the client that started it; unset: the workspace's. */
  engine?: Engine | undefined;
  /** Terraform variables for this run only, HCL expressions; they win over the workspace's. */
  variables?: RunVariable[] | undefined;
  /** A saved cloud plan (`terraform plan -out`): its plan job also uploads the providers' schemas. */
  savePlan?: boolean | undefined;
}

/**
 * Creates a run; it is queued at once when the workspace is free, else pending behind the active
 * one. A plan-only run is queued at once, whatever the workspace runs (see queueSpeculativeRun).
 */
export async function createRun(ctx: StoreContext, input: CreateRunInput): Promise<Run> {
  return getRun(ctx, await insertRun(ctx, input));
}

/**
 * Creates a run only if `claim` holds, taken first in the run's own transaction: a VCS link's
 * move to the run's commit. A crash between the two then leaves both or neither, never a commit
 * taken with no run of it. Null when the claim fails: another process took it.
 *
 * The configuration version is one stored for this run alone (a fetched commit): when no run
 * comes of it, it is deleted unless a run uses it, so a commit two servers fetched at once
 * leaves one stored copy, not two.
 */
export async function createClaimedRun(
  ctx: StoreContext,
  input: CreateRunInput,
  claim: (db: Queryable) => Promise<boolean>,
): Promise<Run | null> {
  // Best effort: a copy left behind costs storage only, and the caller wants the run's outcome
  // (or the insert's own failure, which may be the database's), not the clean-up's.
  const discard = () => deleteUnusedConfigurationVersion(ctx, input.configurationVersionId).catch(() => undefined);
  let id: string | null;
  try {
    id = await insertRun(ctx, input, claim);
  } catch (err) {
    await discard();
    throw err;
  }
  if (id === null) await discard();
  return id === null ? null : getRun(ctx, id);
}

async function deleteUnusedConfigurationVersion(ctx: StoreContext, id: string): Promise<void> {
  await ctx.db
    .deleteFrom("configuration_versions")
    .where("id", "=", id)
    .where(({ not, exists, selectFrom }) =>
      not(exists(selectFrom("runs").select("id").where("configuration_version_id", "=", id))),
    )
    .execute();
}

/** Inserts the run (after `claim`, when given, holds); its id, or null when the claim failed. */
async function insertRun(ctx: StoreContext, input: CreateRunInput): Promise<string>;
async function insertRun(
  ctx: StoreContext,
  input: CreateRunInput,
  claim: (db: Queryable) => Promise<boolean>,
): Promise<string | null>;
async function insertRun(
  ctx: StoreContext,
  input: CreateRunInput,
  claim?: (db: Queryable) => Promise<boolean>,
): Promise<string | null> {
  checkPlanOptions(input);
  const ws = await getWorkspace(ctx, input.workspace);
  const cv = await ctx.db
    .selectFrom("configuration_versions")
    .select(["id", "workspace_id"])
    .where("id", "=", input.configurationVersionId)
    .executeTakeFirst();
  if (!cv)
    throw new DroverError("not_found", `no configuration version ${JSON.stringify(input.configurationVersionId)}`);
  if (cv.workspace_id !== ws.id)
    throw new DroverError("bad_request", `configuration version ${cv.id} belongs to another workspace`);
  const creator =
    input.createdByTokenId === undefined
      ? undefined
      : await ctx.db
          .selectFrom("user_tokens")
          .select("description")
          .where("id", "=", input.createdByTokenId)
          .executeTakeFirst();
  const id = newId("run");
  const created = await inTransaction(ctx, async (trx, effects) => {
    // On PostgreSQL the workspace's row is held from the start: a run ending meanwhile in another
    // transaction frees the workspace either before this one looks, or after this run is
    // committed, where its own promotion sees it. Else this run could stay pending for ever.
    // Holding it also orders this run against a delete of the workspace (see deleteWorkspace).
    let held = trx.selectFrom("workspaces").select("id").where("id", "=", ws.id);
    if (ctx.dialect === "postgres") held = held.forNoKeyUpdate();
    // Gone: a delete committed since the workspace was read above (on PostgreSQL, maybe while
    // this transaction waited for the row).
    if (!(await held.executeTakeFirst())) throw new DroverError("not_found", `no workspace ${JSON.stringify(ws.name)}`);
    if (claim && !(await claim(trx))) return false;
    const now = ctx.now();
    await trx
      .insertInto("runs")
      .values({
        id,
        workspace_id: ws.id,
        configuration_version_id: cv.id,
        status: "pending",
        plan_only: input.planOnly ? 1 : 0,
        is_destroy: input.isDestroy ? 1 : 0,
        auto_apply: (input.autoApply ?? ws.autoApply) ? 1 : 0,
        message: input.message,
        error_message: null,
        cancel_requested: 0,
        plan_add: null,
        plan_change: null,
        plan_destroy: null,
        has_changes: null,
        plan_job_id: null,
        apply_job_id: null,
        outputs_json: null,
        created_by: creator?.description ?? null,
        destroys_all: null,
        allow_destroy_all: (input.allowDestroyAll ?? ws.allowDestroyAll) ? 1 : 0,
        guard_outcome: input.whenGuarded ?? "wait",
        plan_options: storedPlanOptions({
          targets: input.targets ?? [],
          replaces: input.replaces ?? [],
          refreshOnly: input.refreshOnly ?? false,
          refresh: input.refresh ?? true,
        }),
        source_repository: input.source?.repository ?? null,
        source_branch: input.source?.branch ?? null,
        source_commit_sha: input.source?.commitSha ?? null,
        source_message: input.source?.message ?? null,
        source_author: input.source?.author ?? null,
        source_pull_request_number: input.source?.pullRequest?.number ?? null,
        source_pull_request_url: input.source?.pullRequest?.url ?? null,
        engine: input.engine ?? null,
        run_variables: storedRunVariables(input.variables ?? []),
        save_plan: input.savePlan ? 1 : 0,
        created_at: now,
        updated_at: now,
      })
      .execute();
    if (input.planOnly) await queueSpeculativeRun(ctx, trx, effects, id);
    else await promoteNextRun(ctx, trx, effects, ws.id);
    return true;
  });
  return created ? id : null;
}
