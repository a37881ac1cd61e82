import { DroverError, newId, type Engine, type Workspace, type WorkspaceSummary } from "@drover/protocol";
import { sql, type Selectable } from "kysely";
import type { WorkspacesTable } from "../db/schema.js";
import { isUniqueViolation } from "../db/storage-errors.js";
import { iso, type Queryable, type StoreContext } from "./context.js";
import { getPool, requirePoolKind } from "./pools.js";

type Row = Omit<Selectable<WorkspacesTable>, "tfe_tags" | "execution_mode"> & {
  locked: number | string | null;
  pool_name: string;
};

const toWorkspace = (r: Row): Workspace => ({
  id: r.id,
  name: r.name,
  poolId: r.pool_id,
  poolName: r.pool_name,
  engine: r.engine,
  engineVersion: r.engine_version,
  workingDirectory: r.working_directory,
  runnerImage: r.runner_image,
  autoApply: r.auto_apply === 1,
  allowDestroyAll: r.allow_destroy_all === 1,
  currentRunId: r.current_run_id,
  stateLocked: r.locked !== null,
  createdAt: iso(r.created_at),
});

function selectWorkspaces(db: Queryable) {
  return db
    .selectFrom("workspaces")
    .leftJoin("state_locks", "state_locks.workspace_id", "workspaces.id")
    .innerJoin("pools", "pools.id", "workspaces.pool_id")
    .selectAll("workspaces")
    .select(["state_locks.lock_id as locked", "pools.name as pool_name"]);
}

export interface CreateWorkspaceInput {
  name: string;
  pool: string;
  engine: Engine;
  engineVersion: string | null;
  workingDirectory: string;
  /** Docker driver: the runs' runner image; unset or null: the agents' own. */
  runnerImage?: string | null | undefined;
  autoApply: boolean;
  /** Runs that do not say otherwise may auto-apply a plan that destroys everything. */
  allowDestroyAll?: boolean | undefined;
}

export async function createWorkspace(ctx: StoreContext, input: CreateWorkspaceInput): Promise<Workspace> {
  const pool = await getPool(ctx, input.pool);
  requirePoolKind(pool, "runs", "a workspace");
  const exists = () =>
    new DroverError("already_exists", `a workspace named ${JSON.stringify(input.name)} already exists`);
  const taken = await ctx.db.selectFrom("workspaces").select("id").where("name", "=", input.name).executeTakeFirst();
  if (taken) throw exists();
  const row = {
    id: newId("ws"),
    name: input.name,
    pool_id: pool.id,
    engine: input.engine,
    engine_version: input.engineVersion,
    working_directory: input.workingDirectory,
    runner_image: input.runnerImage ?? null,
    auto_apply: input.autoApply ? 1 : 0,
    allow_destroy_all: input.allowDestroyAll === true ? 1 : 0,
    current_run_id: null,
    created_at: ctx.now(),
  };
  try {
    await ctx.db.insertInto("workspaces").values(row).execute();
  } catch (err) {
    // A concurrent create passed the check too; the unique index decides who got the name.
    if (isUniqueViolation(err)) throw exists();
    throw err;
  }
  return toWorkspace({ ...row, locked: null, pool_name: pool.name });
}

/** Finds a workspace by id or name. */
export async function getWorkspace(ctx: StoreContext, idOrName: string, db: Queryable = ctx.db): Promise<Workspace> {
  const row = await selectWorkspaces(db)
    .where((eb) => eb.or([eb("workspaces.id", "=", idOrName), eb("workspaces.name", "=", idOrName)]))
    .executeTakeFirst();
  if (!row) throw new DroverError("not_found", `no workspace ${JSON.stringify(idOrName)}`);
  return toWorkspace(row);
}

/** What a workspace list asks for: a name filter and a page. */
export interface ListWorkspacesInput {
  /** Only names holding this, case-insensitively. */
  search?: string | undefined;
  /** Only the workspaces of this pool (id or name). */
  pool?: string | undefined;
  /** The name the previous page ended with. */
  after?: string | undefined;
  /** Page size; every workspace without it. */
  limit?: number | undefined;
}

/** Workspaces ordered by name, each with its newest run; `next` is the cursor of the page after. */
export async function listWorkspaces(
  ctx: StoreContext,
  input: ListWorkspacesInput = {},
): Promise<{ items: WorkspaceSummary[]; next: string | null }> {
  let q = selectWorkspaces(ctx.db).select((eb) =>
    eb
      .selectFrom("runs")
      .select("runs.id")
      .whereRef("runs.workspace_id", "=", "workspaces.id")
      .orderBy("runs.created_at", "desc")
      .orderBy("runs.id", "desc")
      .limit(1)
      .as("latest_run_id"),
  );
  if (input.search) {
    // lower() on both sides: SQLite's LIKE ignores ASCII case, PostgreSQL's does not.
    const pattern = `%${input.search.toLowerCase().replace(/[\\%_]/g, (c) => `\\${c}`)}%`;
    q = q.where(sql<boolean>`lower(${sql.ref("workspaces.name")}) like ${pattern} escape '\\'`);
  }
  if (input.pool !== undefined) q = q.where("workspaces.pool_id", "=", (await getPool(ctx, input.pool)).id);
  if (input.after !== undefined) q = q.where("workspaces.name", ">", input.after);
  q = q.orderBy("workspaces.name");
  if (input.limit !== undefined) q = q.limit(input.limit + 1);
  const rows = await q.execute();
  const more = input.limit !== undefined && rows.length > input.limit;
  const pageRows = more ? rows.slice(0, input.limit) : rows;
  const runIds = pageRows.flatMap((r) => (r.latest_run_id ? [r.latest_run_id] : []));
  const runs =
    runIds.length === 0
      ? []
      : await ctx.db.selectFrom("runs").select(["id", "status", "created_at"]).where("id", "in", runIds).execute();
  const byId = new Map(runs.map((r) => [r.id, { id: r.id, status: r.status, createdAt: iso(r.created_at) }]));
  return {
    items: pageRows.map((r) => ({ ...toWorkspace(r), latestRun: byId.get(r.latest_run_id ?? "") ?? null })),
    next: more ? (pageRows.at(-1)?.name ?? null) : null,
  };
}

export interface UpdateWorkspaceInput {
  pool?: string | undefined;
  engine?: Engine | undefined;
  engineVersion?: string | null | undefined;
  workingDirectory?: string | undefined;
  runnerImage?: string | null | undefined;
  autoApply?: boolean | undefined;
  allowDestroyAll?: boolean | undefined;
}

export async function updateWorkspace(
  ctx: StoreContext,
  idOrName: string,
  input: UpdateWorkspaceInput,
): Promise<Workspace> {
  const ws = await getWorkspace(ctx, idOrName);
  const set: Partial<Selectable<WorkspacesTable>> = {};
  if (input.pool !== undefined) {
    const pool = await getPool(ctx, input.pool);
    requirePoolKind(pool, "runs", "a workspace");
    set.pool_id = pool.id;
  }
  if (input.engine !== undefined) set.engine = input.engine;
  if (input.engineVersion !== undefined) set.engine_version = input.engineVersion;
  if (input.workingDirectory !== undefined) set.working_directory = input.workingDirectory;
  if (input.runnerImage !== undefined) set.runner_image = input.runnerImage;
  if (input.autoApply !== undefined) set.auto_apply = input.autoApply ? 1 : 0;
  if (input.allowDestroyAll !== undefined) set.allow_destroy_all = input.allowDestroyAll ? 1 : 0;
  if (Object.keys(set).length > 0) await ctx.db.updateTable("workspaces").set(set).where("id", "=", ws.id).execute();
  return getWorkspace(ctx, ws.id);
}

/** Deletes a workspace with its runs, state and variables; refused while a run is active. */
export async function deleteWorkspace(ctx: StoreContext, idOrName: string): Promise<void> {
  const ws = await getWorkspace(ctx, idOrName);
  if (ws.currentRunId)
    throw new DroverError("conflict", `workspace ${ws.name} has an active run (${ws.currentRunId}); cancel it first`);
  await ctx.db.transaction().execute(async (trx) => {
    const runIds = trx.selectFrom("runs").select("id").where("workspace_id", "=", ws.id);
    const jobIds = trx.selectFrom("jobs").select("id").where("workspace_id", "=", ws.id);
    await trx.deleteFrom("log_chunks").where("job_id", "in", jobIds).execute();
    await trx.deleteFrom("jobs").where("workspace_id", "=", ws.id).execute();
    await trx.deleteFrom("plans").where("run_id", "in", runIds).execute();
    await trx.deleteFrom("runs").where("workspace_id", "=", ws.id).execute();
    await trx.deleteFrom("configuration_versions").where("workspace_id", "=", ws.id).execute();
    await trx.deleteFrom("variables").where("workspace_id", "=", ws.id).execute();
    await trx.deleteFrom("state_versions").where("workspace_id", "=", ws.id).execute();
    await trx.deleteFrom("state_locks").where("workspace_id", "=", ws.id).execute();
    await trx.deleteFrom("workspace_vcs").where("workspace_id", "=", ws.id).execute();
    await trx.deleteFrom("workspaces").where("id", "=", ws.id).execute();
  });
}
