import { DroverError, type Output, type PlanSummary } from "@drover/protocol";
import { sensitiveValues } from "@drover/runtime";
import { Readable } from "node:stream";
import type { Transaction } from "kysely";
import type { Database, JobRow } from "../db/schema.js";
import { variablesForJob } from "./variables.js";
import { markSecretOutputs } from "./outputs.js";
import { renderPlanJson } from "./plan-json.js";
import { sourceChunks, sourceSize, storedBody, writeChunks, type BodySource, type StoredBody } from "./bodies.js";
import type { StoreContext } from "./context.js";
import { transactionKeepingCause } from "./transaction.js";
import { currentAttempt } from "./current-attempt.js";

/** A body stored with a run's plan: its size column in `plans` and the table of its chunks. */
const planBodies = {
  file: { size: "plan_file_size", chunks: "plan_file_chunks", what: "saved plan file" },
  json: { size: "plan_json_size", chunks: "plan_json_chunks", what: "plan JSON" },
  schemas: { size: "provider_schemas_size", chunks: "provider_schema_chunks", what: "providers' schemas" },
} as const;

/** Writes one of a run's plan bodies, creating its `plans` row or updating that body's size. */
async function writePlanBody(
  ctx: StoreContext,
  trx: Transaction<Database>,
  runId: string,
  kind: keyof typeof planBodies,
  body: BodySource,
): Promise<void> {
  const { size, chunks } = planBodies[kind];
  const bytes = sourceSize(body);
  const row = { run_id: runId, plan_file_size: null, plan_json_size: null, provider_schemas_size: null };
  await trx
    .insertInto("plans")
    .values({ ...row, [size]: bytes, created_at: ctx.now() })
    .onConflict((oc) => oc.column("run_id").doUpdateSet({ [size]: bytes }))
    .execute();
  await writeChunks(trx, chunks, runId, body);
}

/** One of a run's stored plan bodies; not_found when it has none. */
async function readPlanBody(ctx: StoreContext, runId: string, kind: keyof typeof planBodies): Promise<StoredBody> {
  const { size, chunks, what } = planBodies[kind];
  const row = await ctx.db.selectFrom("plans").select(size).where("run_id", "=", runId).executeTakeFirst();
  const bytes = row?.[size];
  if (bytes == null) throw new DroverError("not_found", `run ${runId} has no ${what}`);
  return storedBody(ctx.db, chunks, runId, bytes);
}

/** Stores the binary plan file of the run a plan job belongs to. */
export async function savePlanFile(ctx: StoreContext, job: JobRow, planFile: BodySource): Promise<void> {
  if (job.phase !== "plan") throw new DroverError("bad_request", "only a plan job uploads a plan file");
  await transactionKeepingCause(ctx, (trx) => writePlanBody(ctx, trx, job.run_id, "file", planFile));
}

/**
 * Stores `terraform show -json` output of a plan job's plan and the summary derived from it.
 * That JSON carries variable values verbatim, so the workspace's sensitive values are redacted
 * before storing. The plan job uploads it before it finishes, so a run that has left planning
 * has its plan JSON (or none at all, when it was too large to store).
 */
export async function savePlanJson(ctx: StoreContext, job: JobRow, uploaded: BodySource): Promise<PlanSummary> {
  mayUploadPlanJson(job);
  const sensitive = (await variablesForJob(ctx, job.workspace_id)).filter((v) => v.sensitive).flatMap(sensitiveValues);
  // Redacting needs the parsed document: a worker thread holds it, never the event loop.
  const { summary, destroysAll, json: planJson } = await renderPlanJson(uploaded, sourceSize(uploaded), sensitive);
  await transactionKeepingCause(ctx, async (trx) => {
    // The token was checked before the body arrived; a plan job reclaimed since then made
    // another plan, and this JSON would describe one that is never applied. On PostgreSQL this
    // locks the job's row, so two uploads of one job take turns.
    await currentAttempt(ctx, trx, job);
    await writePlanBody(ctx, trx, job.run_id, "json", planJson);
    await trx
      .updateTable("runs")
      .set({
        plan_add: summary.add,
        plan_change: summary.change,
        plan_destroy: summary.destroy,
        has_changes: summary.hasChanges ? 1 : 0,
        destroys_all: destroysAll ? 1 : 0,
        updated_at: ctx.now(),
      })
      .where("id", "=", job.run_id)
      .execute();
  });
  return summary;
}

/** Whether `job` may upload its run's plan JSON, from the job alone, so a refusal comes before the body is read. */
export function mayUploadPlanJson(job: JobRow, what = "plan JSON"): void {
  if (job.phase !== "plan") throw new DroverError("forbidden", `only a plan job uploads its run's ${what}`);
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

/** The plan file an apply job must apply. */
export function readPlanFile(ctx: StoreContext, runId: string): Promise<StoredBody> {
  return readPlanBody(ctx, runId, "file");
}

/** The stored plan JSON of a run. */
export function readPlanJson(ctx: StoreContext, runId: string): Promise<StoredBody> {
  return readPlanBody(ctx, runId, "json");
}

/**
 * Stores the providers' schemas of a saved cloud plan's plan job (the `provider_schemas` object
 * of `terraform providers schema -json`): the human `terraform show` of the plan renders with
 * them. They describe providers, not values, so they are kept as uploaded; a large document is
 * never parsed here, only its start checked.
 */
export async function saveProviderSchemas(ctx: StoreContext, job: JobRow, uploaded: BodySource): Promise<void> {
  mayUploadPlanJson(job, "providers' schemas");
  const chunks = sourceChunks(uploaded);
  const first = (await chunks.next()).value as Buffer | undefined;
  await chunks.return(undefined);
  if (!first || !/^\s*\{/.test(first.subarray(0, 64).toString("latin1")))
    throw new DroverError("invalid_json", "the providers' schemas are not a JSON object");
  await transactionKeepingCause(ctx, async (trx) => {
    await currentAttempt(ctx, trx, job);
    await writePlanBody(ctx, trx, job.run_id, "schemas", uploaded);
  });
}

/** The stored providers' schemas of a saved cloud plan's run. */
export function readProviderSchemas(ctx: StoreContext, runId: string): Promise<StoredBody> {
  return readPlanBody(ctx, runId, "schemas");
}

/**
 * A saved plan as terraform's human `show` reads it (json-output-redacted): the stored plan JSON
 * with the providers' schemas beside its changes, joined as bytes rather than parsed.
 */
export async function readRedactedPlan(ctx: StoreContext, runId: string): Promise<StoredBody> {
  const [plan, schemas] = await Promise.all([readPlanJson(ctx, runId), readProviderSchemas(ctx, runId)]);
  // The plan JSON is stored serialized without spaces: two bytes are `{}`, which takes no comma.
  const middle = Buffer.from(`${plan.size > 2 ? "," : ""}"provider_format_version":"1.0","provider_schemas":`);
  return {
    size: plan.size - 1 + middle.length + schemas.size + 1,
    open: () => Readable.from(joinedPlan(runId, plan, middle, schemas)),
  };
}

async function* joinedPlan(runId: string, plan: StoredBody, middle: Buffer, schemas: StoredBody) {
  let held: Buffer | undefined;
  for await (const piece of plan.open() as AsyncIterable<Buffer>) {
    if (held) yield held;
    held = piece;
  }
  // The stored plan JSON is a serialized object, its last byte its closing brace.
  if (held?.[held.length - 1] !== 0x7d) throw new Error(`the stored plan JSON of run ${runId} is not a JSON object`);
  yield held.subarray(0, held.length - 1);
  yield middle;
  yield* schemas.open() as AsyncIterable<Buffer>;
  yield Buffer.from("}");
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
  const marked = await markSecretOutputs(ctx, job.workspace_id, outputs);
  await transactionKeepingCause(ctx, async (trx) => {
    await currentAttempt(ctx, trx, job);
    await trx
      .updateTable("runs")
      .set({ outputs_json: JSON.stringify(marked) })
      .where("id", "=", job.run_id)
      .execute();
  });
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
