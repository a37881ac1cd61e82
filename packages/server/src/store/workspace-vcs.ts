import { DroverError, repositoryProblem, type WorkspaceVcs } from "@drover/protocol";
import { iso, type Queryable, type StoreContext } from "./context.js";
import { getVcsConnection } from "./vcs-connections.js";
import { getWorkspace } from "./workspaces.js";

/*
 * A workspace linked to a repository branch: the poller starts a run for each new head of the
 * branch. `last_commit_sha` is the head a run was last started for; moving it is conditional,
 * so of several server processes polling at once exactly one starts the run.
 */

export interface LinkWorkspaceVcsInput {
  connection: string;
  repository: string;
  branch: string;
  triggerPaths: string[];
  applyOnMerge?: boolean | null | undefined;
}

const selectLinks = (ctx: StoreContext) =>
  ctx.db
    .selectFrom("workspace_vcs")
    .innerJoin("vcs_connections", "vcs_connections.id", "workspace_vcs.connection_id")
    .innerJoin("workspaces", "workspaces.id", "workspace_vcs.workspace_id")
    .select([
      "workspace_vcs.workspace_id",
      "workspace_vcs.connection_id",
      "workspace_vcs.repository",
      "workspace_vcs.branch",
      "workspace_vcs.trigger_paths",
      "workspace_vcs.last_commit_sha",
      "workspace_vcs.last_error",
      "workspace_vcs.last_error_sha",
      "workspace_vcs.webhook_id",
      "workspace_vcs.apply_on_merge",
      "workspace_vcs.created_at",
      "vcs_connections.name as connection_name",
      "vcs_connections.provider",
      "workspaces.name as workspace_name",
      "workspaces.working_directory",
    ]);
type LinkRow = Awaited<ReturnType<ReturnType<typeof selectLinks>["executeTakeFirstOrThrow"]>>;

const toLink = (r: LinkRow): WorkspaceVcs => ({
  workspaceId: r.workspace_id,
  connectionId: r.connection_id,
  connection: r.connection_name,
  provider: r.provider,
  repository: r.repository,
  branch: r.branch,
  triggerPaths: JSON.parse(r.trigger_paths) as string[],
  applyOnMerge: r.apply_on_merge === null ? null : r.apply_on_merge === 1,
  lastCommitSha: r.last_commit_sha,
  lastError: r.last_error,
  webhookId: r.webhook_id === null ? null : Number(r.webhook_id),
  createdAt: iso(r.created_at),
});

/** Links (or re-links) a workspace; a new repository or branch starts over from its current head. */
export async function linkWorkspaceVcs(
  ctx: StoreContext,
  workspace: string,
  input: LinkWorkspaceVcsInput,
): Promise<WorkspaceVcs> {
  const ws = await getWorkspace(ctx, workspace);
  const conn = await getVcsConnection(ctx, input.connection);
  const problem = repositoryProblem(conn.provider, input.repository);
  if (problem) throw new DroverError("bad_request", problem);
  const fields = {
    connection_id: conn.id,
    repository: input.repository,
    branch: input.branch,
    trigger_paths: JSON.stringify(input.triggerPaths),
    apply_on_merge: input.applyOnMerge == null ? null : input.applyOnMerge ? 1 : 0,
  };
  await ctx.db
    .insertInto("workspace_vcs")
    .values({
      workspace_id: ws.id,
      ...fields,
      last_commit_sha: null,
      last_error: null,
      last_error_sha: null,
      webhook_id: null,
      created_at: ctx.now(),
    })
    .onConflict((oc) =>
      oc
        .column("workspace_id")
        .doUpdateSet({ ...fields, last_commit_sha: null, last_error: null, last_error_sha: null }),
    )
    .execute();
  return getWorkspaceVcs(ctx, ws.id);
}

export async function getWorkspaceVcs(ctx: StoreContext, workspace: string): Promise<WorkspaceVcs> {
  const ws = await getWorkspace(ctx, workspace);
  const row = await selectLinks(ctx).where("workspace_vcs.workspace_id", "=", ws.id).executeTakeFirst();
  if (!row) throw new DroverError("not_found", `workspace ${ws.name} is not linked to a repository`);
  return toLink(row);
}

/** Unlinks a workspace; answers what the link was, so its webhook can be removed. */
export async function unlinkWorkspaceVcs(ctx: StoreContext, workspace: string): Promise<WorkspaceVcs> {
  const ws = await getWorkspace(ctx, workspace);
  const link = await getWorkspaceVcs(ctx, ws.id);
  const deleted = await ctx.db.deleteFrom("workspace_vcs").where("workspace_id", "=", ws.id).executeTakeFirst();
  if (Number(deleted.numDeletedRows) === 0)
    throw new DroverError("not_found", `workspace ${ws.name} is not linked to a repository`);
  return link;
}

/**
 * The webhook of a connection's repository as the links record it: one per repository, shared by
 * every workspace linked to it (a webhook per workspace would deliver each push once per workspace).
 */
export async function repositoryWebhookId(
  ctx: StoreContext,
  connectionId: string,
  repository: string,
): Promise<number | null> {
  const row = await ctx.db
    .selectFrom("workspace_vcs")
    .select("webhook_id")
    .where("connection_id", "=", connectionId)
    .where("repository", "=", repository)
    .where("webhook_id", "is not", null)
    .executeTakeFirst();
  return row?.webhook_id == null ? null : Number(row.webhook_id);
}

/** Records the webhook of a workspace's link (null: none Drover registered). */
export async function setVcsWebhookId(ctx: StoreContext, workspaceId: string, webhookId: number | null): Promise<void> {
  await ctx.db
    .updateTable("workspace_vcs")
    .set({ webhook_id: webhookId })
    .where("workspace_id", "=", workspaceId)
    .execute();
}

/** A link as the poller sees it. */
export interface PolledLink extends WorkspaceVcs {
  workspaceName: string;
  /** Files there always trigger a run, whatever the trigger paths. */
  workingDirectory: string;
  /** The commit `lastError` is about. */
  lastErrorSha: string | null;
}

/** Every link, for the poller; or only those of one connection, for its webhook deliveries. */
export async function listVcsLinks(ctx: StoreContext, connectionId?: string): Promise<PolledLink[]> {
  let query = selectLinks(ctx);
  if (connectionId !== undefined) query = query.where("workspace_vcs.connection_id", "=", connectionId);
  const rows = await query.orderBy("workspace_vcs.workspace_id").execute();
  return rows.map((r) => ({
    ...toLink(r),
    workspaceName: r.workspace_name,
    workingDirectory: r.working_directory,
    lastErrorSha: r.last_error_sha,
  }));
}

/**
 * Moves the link's last commit from `from` to `to`; false when another process moved it first
 * (or the link changed): then that process starts the run, not this one. `db`: the transaction
 * that creates the commit's run (createClaimedRun), so the two happen together or not at all.
 */
export async function claimVcsCommit(
  ctx: StoreContext,
  link: Pick<PolledLink, "workspaceId" | "connectionId" | "repository" | "branch">,
  from: string | null,
  to: string,
  db: Queryable = ctx.db,
): Promise<boolean> {
  const moved = await db
    .updateTable("workspace_vcs")
    .set({ last_commit_sha: to, last_error: null, last_error_sha: null })
    .where("workspace_id", "=", link.workspaceId)
    .where("connection_id", "=", link.connectionId)
    .where("repository", "=", link.repository)
    .where("branch", "=", link.branch)
    .where("last_commit_sha", from === null ? "is" : "=", from)
    .executeTakeFirst();
  return Number(moved.numUpdatedRows) === 1;
}

/** Records why a commit started no run (shown by `GET …/vcs` and `drover workspace show`). */
export async function recordVcsError(ctx: StoreContext, workspaceId: string, sha: string | null, error: string) {
  await ctx.db
    .updateTable("workspace_vcs")
    .set({ last_error: error.slice(0, 4000), last_error_sha: sha })
    .where("workspace_id", "=", workspaceId)
    .execute();
}
