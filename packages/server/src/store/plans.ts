import { containsSecret, DroverError, secretForms, type Output, type PlanSummary } from "@drover/protocol";
import type { Transaction } from "kysely";
import type { Database, JobRow } from "../db/schema.js";
import { waitForEvent } from "../events.js";
import { variablesForJob } from "./variables.js";
import { renderPlanJson } from "./plan-json.js";
import { sourceSize, storedBody, writeChunks, type BodySource, type StoredBody } from "./bodies.js";
import type { StoreContext } from "./context.js";
import { transactionKeepingCause } from "./transaction.js";
import { currentAttempt } from "./current-attempt.js";

/** Stores the binary plan file of the run a plan job belongs to. */
export async function savePlanFile(ctx: StoreContext, job: JobRow, planFile: BodySource): Promise<void> {
  if (job.phase !== "plan") throw new DroverError("bad_request", "only a plan job uploads a plan file");
  const size = sourceSize(planFile);
  await transactionKeepingCause(ctx, async (trx) => {
    await trx
      .insertInto("plans")
      .values({ run_id: job.run_id, plan_file_size: size, plan_json_size: null, created_at: ctx.now() })
      .onConflict((oc) => oc.column("run_id").doUpdateSet({ plan_file_size: size }))
      .execute();
    await writeChunks(trx, "plan_file_chunks", job.run_id, planFile);
  });
}

/**
 * Stores `terraform show -json` output and the summary derived from it. That JSON carries
 * variable values verbatim, so the workspace's sensitive values are redacted before storing.
 * The plan job uploads it, or, when that job left it out (an auto-apply run with changes,
 * decision 0041), the run's apply job: then its counts replace the ones terraform's summary
 * line gave, and whether the run has changes stays what the plan decided. The apply job's
 * upload is written once; the same JSON sent again (its first answer lost) gets the same answer.
 */
export async function savePlanJson(ctx: StoreContext, job: JobRow, uploaded: BodySource): Promise<PlanSummary> {
  await mayUploadPlanJson(ctx, job);
  const sensitive = (await variablesForJob(ctx, job.workspace_id)).filter((v) => v.sensitive).map((v) => v.value);
  // Redacting needs the parsed document: a worker thread holds it, never the event loop.
  const { summary, json: planJson } = await renderPlanJson(uploaded, sourceSize(uploaded), sensitive);
  const written = await transactionKeepingCause(ctx, async (trx) => {
    // The token was checked before the body arrived; a plan job reclaimed since then made
    // another plan, and this JSON would describe one that is never applied. On PostgreSQL this
    // locks the job's row, so two uploads of one job take turns.
    await currentAttempt(ctx, trx, job);
    if (job.phase === "apply") {
      // Conditional inside the transaction: two uploads never both pass an "is it stored yet?" read.
      const claimed = await trx
        .insertInto("plans")
        .values({
          run_id: job.run_id,
          plan_file_size: null,
          plan_json_size: planJson.length,
          plan_json_phase: "apply",
          created_at: ctx.now(),
        })
        .onConflict((oc) =>
          oc
            .column("run_id")
            .doUpdateSet({ plan_json_size: planJson.length, plan_json_phase: "apply" })
            .where("plans.plan_json_size", "is", null),
        )
        .executeTakeFirst();
      if (Number(claimed.numInsertedOrUpdatedRows ?? 0) === 0) {
        if ((await storedPlanJson(trx, job.run_id))?.equals(planJson)) return false;
        throw new DroverError(
          "bad_request",
          "this run's plan JSON is already stored: an apply job uploads it only when the plan job left it out",
        );
      }
    } else {
      await trx
        .insertInto("plans")
        .values({
          run_id: job.run_id,
          plan_file_size: null,
          plan_json_size: planJson.length,
          plan_json_phase: "plan",
          created_at: ctx.now(),
        })
        .onConflict((oc) =>
          oc.column("run_id").doUpdateSet({ plan_json_size: planJson.length, plan_json_phase: "plan" }),
        )
        .execute();
    }
    await writeChunks(trx, "plan_json_chunks", job.run_id, planJson);
    const counts = {
      plan_add: summary.add,
      plan_change: summary.change,
      plan_destroy: summary.destroy,
      updated_at: ctx.now(),
    };
    // The apply of a run runs only when its plan had changes: that verdict stands.
    await trx
      .updateTable("runs")
      .set(job.phase === "apply" ? counts : { ...counts, has_changes: summary.hasChanges ? 1 : 0 })
      .where("id", "=", job.run_id)
      .execute();
    return true;
  });
  // Wakes readers waiting for a plan JSON the apply job renders (readPlanJsonWhenReady).
  if (written) ctx.events.publish("run-changed", job.run_id);
  return summary;
}

/**
 * Whether `job` may upload its run's plan JSON, decided from the job and the database alone, so
 * a refusal comes before the body is read: a plan job may; an apply job only when the plan job
 * left it out (decision 0041) or to resend the one it stored itself (its first answer lost).
 */
export async function mayUploadPlanJson(ctx: StoreContext, job: JobRow): Promise<void> {
  if (job.phase === "plan") return;
  if (job.phase !== "apply") throw new DroverError("forbidden", "only a plan or apply job uploads a plan JSON");
  const row = await ctx.db
    .selectFrom("plans")
    .select(["plan_json_size", "plan_json_phase"])
    .where("run_id", "=", job.run_id)
    .executeTakeFirst();
  if (row?.plan_json_size != null && row.plan_json_phase !== "apply") {
    throw new DroverError(
      "forbidden",
      "this run's plan JSON was stored by its plan job: an apply job uploads it only when the plan job left it out",
    );
  }
}

/** The plan JSON stored for a run, read whole inside a transaction; undefined when there is none. */
async function storedPlanJson(trx: Transaction<Database>, runId: string): Promise<Buffer | undefined> {
  const row = await trx.selectFrom("plans").select("plan_json_size").where("run_id", "=", runId).executeTakeFirst();
  if (row?.plan_json_size == null) return undefined;
  const chunks = await trx
    .selectFrom("plan_json_chunks")
    .select("data")
    .where("owner_id", "=", runId)
    .orderBy("seq")
    .execute();
  return Buffer.concat(chunks.map((c) => Buffer.from(c.data)));
}

/**
 * Records terraform's own summary of a plan (from `plan -detailed-exitcode` and its `Plan:`
 * line) as the plan job finishes. The counts stay the JSON's when it is already stored; the run
 * has changes when either says so, since a needless apply costs little and a skipped one loses
 * changes (a move-only plan, which older JSON does not show as a change).
 */
export async function recordPlanSummary(
  ctx: StoreContext,
  trx: Transaction<Database>,
  runId: string,
  reported: PlanSummary,
): Promise<void> {
  // A count above zero is a change whatever the flag says: a run never ends "no changes" showing some.
  const summary = {
    ...reported,
    hasChanges: reported.hasChanges || reported.add + reported.change + reported.destroy > 0,
  };
  const stored = await trx.selectFrom("plans").select("plan_json_size").where("run_id", "=", runId).executeTakeFirst();
  const runs = trx.updateTable("runs").where("id", "=", runId);
  if (stored?.plan_json_size == null) {
    await runs
      .set({
        plan_add: summary.add,
        plan_change: summary.change,
        plan_destroy: summary.destroy,
        has_changes: summary.hasChanges ? 1 : 0,
        updated_at: ctx.now(),
      })
      .execute();
  } else if (summary.hasChanges) {
    await runs.set({ has_changes: 1, updated_at: ctx.now() }).execute();
  }
}

/**
 * Records that the run's apply job could not render the plan JSON it was told to: readers
 * waiting for it get "no plan JSON" (with the reason) at once instead of when the apply ends.
 */
export async function recordPlanJsonUnavailable(ctx: StoreContext, job: JobRow, message: string): Promise<void> {
  if (job.phase !== "apply")
    throw new DroverError("bad_request", "only an apply job reports a plan JSON it could not render");
  await transactionKeepingCause(ctx, async (trx) => {
    await currentAttempt(ctx, trx, job);
    await trx
      .updateTable("plans")
      .set({ plan_json_error: message })
      .where("run_id", "=", job.run_id)
      .where("plan_json_size", "is", null)
      .execute();
  });
  ctx.events.publish("run-changed", job.run_id);
}

/** The plan file an apply job must apply. */
export async function readPlanFile(ctx: StoreContext, runId: string): Promise<StoredBody> {
  const row = await ctx.db.selectFrom("plans").select("plan_file_size").where("run_id", "=", runId).executeTakeFirst();
  if (row?.plan_file_size == null) throw new DroverError("not_found", `run ${runId} has no saved plan file`);
  return storedBody(ctx.db, "plan_file_chunks", runId, row.plan_file_size);
}

/**
 * The stored plan JSON of a run; while the run's apply job still renders it (an auto-apply run,
 * decision 0041), waits for it up to `waitMs`, so a reader sees the plan of every run that had
 * one as soon as it could before.
 */
export async function readPlanJsonWhenReady(
  ctx: StoreContext,
  runId: string,
  waitMs: number,
  signal?: AbortSignal,
): Promise<StoredBody> {
  const deadline = Date.now() + waitMs;
  for (;;) {
    // Subscribe before reading, so an upload in between wakes this loop.
    const wake = waitForEvent(ctx.events, "run-changed", runId, Math.max(0, deadline - Date.now()), signal);
    const row = await ctx.db
      .selectFrom("runs")
      .leftJoin("plans", "plans.run_id", "runs.id")
      .select(["runs.status", "runs.has_changes", "plans.plan_json_size", "plans.plan_json_error"])
      .where("runs.id", "=", runId)
      .executeTakeFirst();
    const pending =
      row !== undefined &&
      row.plan_json_size == null &&
      row.plan_json_error == null &&
      row.has_changes === 1 &&
      (row.status === "confirmed" || row.status === "applying");
    if (!pending || Date.now() >= deadline || signal?.aborted) {
      wake.cancel();
      if (pending)
        throw new DroverError(
          "plan_pending",
          `run ${runId}'s plan JSON is still being rendered by its apply job; ask again in a moment`,
        );
      return readPlanJson(ctx, runId);
    }
    await wake.promise;
  }
}

/** The stored plan JSON of a run. */
export async function readPlanJson(ctx: StoreContext, runId: string): Promise<StoredBody> {
  const row = await ctx.db
    .selectFrom("plans")
    .select(["plan_json_size", "plan_json_error"])
    .where("run_id", "=", runId)
    .executeTakeFirst();
  if (row?.plan_json_size == null) {
    const why = row?.plan_json_error != null ? `: its apply job could not render it (${row.plan_json_error})` : "";
    throw new DroverError("not_found", `run ${runId} has no plan JSON${why}`);
  }
  return storedBody(ctx.db, "plan_json_chunks", runId, row.plan_json_size);
}

/**
 * Records the outputs an apply produced; sensitive values are kept but never shown. An output
 * whose value holds a sensitive variable's value is sensitive too, whatever the code declares.
 * Only the apply job, still current, may: the workspace shows its latest outputs, and a plan
 * (never applied, perhaps never confirmed) must not change them.
 */
export async function saveOutputs(ctx: StoreContext, job: JobRow, outputs: Output[]): Promise<void> {
  if (job.phase !== "apply")
    throw new DroverError("forbidden", "only an apply job uploads outputs: a plan changes nothing until it is applied");
  const secrets = secretForms(
    (await variablesForJob(ctx, job.workspace_id)).filter((v) => v.sensitive).map((v) => v.value),
  );
  const marked = outputs.map((o) => (!o.sensitive && containsSecret(o.value, secrets) ? { ...o, sensitive: true } : o));
  await transactionKeepingCause(ctx, async (trx) => {
    await currentAttempt(ctx, trx, job);
    await trx
      .updateTable("runs")
      .set({ outputs_json: JSON.stringify(marked) })
      .where("id", "=", job.run_id)
      .execute();
  });
}

/** Masks sensitive output values for display. */
export function maskOutputs(outputs: Output[]): Output[] {
  return outputs.map((o) => (o.sensitive ? { ...o, value: null } : o));
}

/** Outputs of the workspace's latest run that recorded any, sensitive values masked. */
export async function workspaceOutputs(ctx: StoreContext, workspaceId: string): Promise<Output[]> {
  const row = await ctx.db
    .selectFrom("runs")
    .select("outputs_json")
    .where("workspace_id", "=", workspaceId)
    .where("outputs_json", "is not", null)
    .orderBy("updated_at", "desc")
    .limit(1)
    .executeTakeFirst();
  if (!row?.outputs_json) return [];
  return maskOutputs(JSON.parse(row.outputs_json) as Output[]);
}

/**
 * Of the runs whose plan directory an agent of `poolId` keeps, those that will never be
 * applied (discarded, canceled, errored, gone, or of another pool): the agent deletes their
 * directories, which hold the variables file and the plan.
 */
export async function plansNoLongerNeeded(
  ctx: StoreContext,
  poolId: string,
  runIds: readonly string[],
): Promise<string[]> {
  if (runIds.length === 0) return [];
  const waiting = await ctx.db
    .selectFrom("runs")
    .innerJoin("workspaces", "workspaces.id", "runs.workspace_id")
    .select("runs.id")
    .where("runs.id", "in", [...runIds])
    .where("workspaces.pool_id", "=", poolId)
    .where("runs.status", "in", ["planning", "planned", "confirmed", "applying"])
    .execute();
  const keep = new Set(waiting.map((r) => r.id));
  return runIds.filter((id) => !keep.has(id));
}
