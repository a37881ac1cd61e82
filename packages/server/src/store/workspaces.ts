import { DroverError, newId, type Engine, type Workspace, type WorkspaceSummary } from "@drover/protocol";
import { sql, type Selectable } from "kysely";
import type { WorkspacesTable } from "../db/schema.js";
import { isUniqueViolation } from "../db/storage-errors.js";
import { iso, type Queryable, type StoreContext } from "./context.js";
import { checkDeletable } from "./delete-safety.js";
import { getPool, requirePoolKind } from "./pools.js";
import { inTransaction } from "./transaction.js";

type Row = Omit<Selectable<WorkspacesTable>, "tfe_tags" | "execution_mode"> & {
  locked: number | string | null;
  pool_name: string;
};

/** What a `remote_state_consumers` column holds: workspace ids, and `"*"` for every workspace. */
export interface RemoteStateConsumers {
  global: boolean;
  ids: string[];
}

const everyWorkspace = "*";

/** Reads a `remote_state_consumers` column; anything unreadable allows no one. */
export function parseRemoteStateConsumers(raw: string): RemoteStateConsumers {
  let value: unknown;
  try {
    value = JSON.parse(raw);
  } catch {
    return { global: false, ids: [] };
  }
  const items = Array.isArray(value) ? value.filter((v): v is string => typeof v === "string") : [];
  return { global: items.includes(everyWorkspace), ids: items.filter((v) => v !== everyWorkspace) };
}

/**
 * Whether a run of workspace `readerId` may read the state of `target` (its id and its
 * `remote_state_consumers` column): its own always, another's when listed there or when that
 * one allows all.
 */
export function mayReadState(readerId: string, target: { id: string; consumers: string }): boolean {
  if (readerId === target.id) return true;
  const consumers = parseRemoteStateConsumers(target.consumers);
  return consumers.global || consumers.ids.includes(readerId);
}

/** Names of the consumer workspaces the rows list, by id; ids of deleted workspaces are left out. */
async function consumerNames(db: Queryable, rows: readonly Pick<Row, "remote_state_consumers">[]) {
  const ids = [...new Set(rows.flatMap((r) => parseRemoteStateConsumers(r.remote_state_consumers).ids))];
  if (ids.length === 0) return new Map<string, string>();
  const found = await db.selectFrom("workspaces").select(["id", "name"]).where("id", "in", ids).execute();
  return new Map(found.map((w) => [w.id, w.name]));
}

const toWorkspace = (r: Row, names: ReadonlyMap<string, string>): Workspace => ({
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
  ...consumersOf(r.remote_state_consumers, names),
  currentRunId: r.current_run_id,
  stateLocked: r.locked !== null,
  createdAt: iso(r.created_at),
});

function consumersOf(raw: string, names: ReadonlyMap<string, string>) {
  const { global, ids } = parseRemoteStateConsumers(raw);
  const listed = ids.flatMap((id) => names.get(id) ?? []).sort();
  return { remoteStateConsumers: listed, globalRemoteState: global };
}

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
  return toWorkspace({ ...row, remote_state_consumers: "[]", locked: null, pool_name: pool.name }, new Map());
}

/** Finds a workspace by id or name. */
export async function getWorkspace(ctx: StoreContext, idOrName: string, db: Queryable = ctx.db): Promise<Workspace> {
  const row = await selectWorkspaces(db)
    .where((eb) => eb.or([eb("workspaces.id", "=", idOrName), eb("workspaces.name", "=", idOrName)]))
    .executeTakeFirst();
  if (!row) throw new DroverError("not_found", `no workspace ${JSON.stringify(idOrName)}`);
  return toWorkspace(row, await consumerNames(db, [row]));
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
  const names = await consumerNames(ctx.db, pageRows);
  return {
    items: pageRows.map((r) => ({ ...toWorkspace(r, names), latestRun: byId.get(r.latest_run_id ?? "") ?? null })),
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
  /** Replaces who may read the state: workspace ids or names (decision 0072). */
  remoteStateConsumers?: readonly string[] | undefined;
  globalRemoteState?: boolean | undefined;
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
  if (input.remoteStateConsumers !== undefined || input.globalRemoteState !== undefined) {
    const given =
      input.remoteStateConsumers === undefined ? undefined : await consumerIds(ctx, ws, input.remoteStateConsumers);
    const next = (now: RemoteStateConsumers) => ({
      ids: given ?? now.ids,
      global: input.globalRemoteState ?? now.global,
    });
    await rewriteConsumers(ctx, ws.id, next, set);
  } else if (Object.keys(set).length > 0)
    await ctx.db.updateTable("workspaces").set(set).where("id", "=", ws.id).execute();
  return getWorkspace(ctx, ws.id);
}

/**
 * Reads and rewrites a workspace's consumers (with the other columns in `also`) in one
 * transaction, its row locked on PostgreSQL, so two changes made at once each keep the other's.
 */
async function rewriteConsumers(
  ctx: StoreContext,
  workspaceId: string,
  change: (now: RemoteStateConsumers) => RemoteStateConsumers,
  also: Partial<Selectable<WorkspacesTable>> = {},
): Promise<void> {
  await ctx.db.transaction().execute(async (trx) => {
    let q = trx.selectFrom("workspaces").select("remote_state_consumers").where("id", "=", workspaceId);
    if (ctx.dialect === "postgres") q = q.forUpdate();
    const row = await q.executeTakeFirst();
    const next = change(parseRemoteStateConsumers(row?.remote_state_consumers ?? "[]"));
    const column = JSON.stringify(next.global ? [everyWorkspace, ...next.ids] : next.ids);
    await trx
      .updateTable("workspaces")
      .set({ ...also, remote_state_consumers: column })
      .where("id", "=", workspaceId)
      .execute();
  });
}

/** The ids of the named consumer workspaces, each once, sorted; the workspace itself is refused (it always reads its own). */
async function consumerIds(ctx: StoreContext, ws: Workspace, idsOrNames: readonly string[]): Promise<string[]> {
  const ids = new Set<string>();
  for (const idOrName of idsOrNames) {
    const consumer = await getWorkspace(ctx, idOrName);
    if (consumer.id === ws.id)
      throw new DroverError(
        "bad_request",
        `workspace ${ws.name} always reads its own state: leave it out of its remote state consumers`,
      );
    ids.add(consumer.id);
  }
  return [...ids].sort();
}

/** Adds and removes remote state consumers (ids or names), for the TFE relationship endpoints. */
export async function changeRemoteStateConsumers(
  ctx: StoreContext,
  idOrName: string,
  change: { add?: readonly string[]; remove?: readonly string[] },
): Promise<Workspace> {
  const ws = await getWorkspace(ctx, idOrName);
  const added = await consumerIds(ctx, ws, change.add ?? []);
  const removed = new Set(await consumerIds(ctx, ws, change.remove ?? []));
  await rewriteConsumers(ctx, ws.id, (now) => ({
    ids: [...new Set([...now.ids, ...added])].filter((id) => !removed.has(id)).sort(),
    global: now.global,
  }));
  return getWorkspace(ctx, ws.id);
}

/**
 * Deletes a workspace with its runs, state and variables; refused while a run is active, and,
 * `safe`, while it is locked or its state manages resources (WorkspaceDeleteRefused says which).
 *
 * The checks and the delete are one transaction. On PostgreSQL it first takes the workspace's
 * row `FOR UPDATE`, which conflicts with every writer of what the checks read: a run's creation
 * takes the row too (`FOR NO KEY UPDATE`), and a lock or state version inserted references it
 * (its foreign key check takes `FOR KEY SHARE`). Such a writer has either committed before the
 * checks read, or waits and then fails on the workspace gone. SQLite runs one transaction at a
 * time on the server's one connection.
 */
export async function deleteWorkspace(
  ctx: StoreContext,
  idOrName: string,
  opts: { safe?: boolean } = {},
): Promise<void> {
  const { id } = await getWorkspace(ctx, idOrName);
  await inTransaction(ctx, async (trx) => {
    if (ctx.dialect === "postgres")
      await trx.selectFrom("workspaces").select("id").where("id", "=", id).forUpdate().execute();
    // Read again in the transaction: a run may have become current, or a lock been taken, since.
    const ws = await getWorkspace(ctx, id, trx);
    await checkDeletable(ctx, trx, ws, opts.safe === true);
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
