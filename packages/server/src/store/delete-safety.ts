import { DroverError, terminalRunStatuses, type Workspace } from "@drover/protocol";
import type { Queryable, StoreContext } from "./context.js";
import { currentState } from "./state.js";

/*
 * Why a workspace is not deleted. Every delete refuses a workspace with an active run (its
 * agent would write to a workspace that is gone); a safe delete (the TFE API's `safe-delete`,
 * which terraform's `workspace delete` uses without `-force`) also refuses one that is locked or
 * whose current state manages resources, as HCP Terraform does.
 */

export type DeleteRefusal = "active_run" | "locked" | "manages_resources";

export class WorkspaceDeleteRefused extends DroverError {
  constructor(
    readonly reason: DeleteRefusal,
    message: string,
    /** The active run; the count of managed resource instances (null: the state could not be read). */
    readonly found: { runId?: string; instances?: number | null } = {},
  ) {
    super("conflict", message);
  }
}

/** Largest state read to count its resources; a larger one is taken to manage some. */
const maxCountedStateBytes = 64 * 1024 * 1024;

/**
 * Managed resource instances in a terraform state document (data sources manage nothing), or
 * null when it is not a state Drover reads (an encrypted OpenTofu state).
 */
export function managedInstances(state: unknown): number | null {
  if (typeof state !== "object" || state === null) return null;
  // An encrypted state has `encrypted_data` and no `resources`: what it manages is unknown.
  const resources = (state as { resources?: unknown }).resources;
  if (!Array.isArray(resources)) return null;
  let count = 0;
  for (const r of resources as unknown[]) {
    const { mode, instances } = (typeof r === "object" && r !== null ? r : {}) as {
      mode?: unknown;
      instances?: unknown;
    };
    if (mode === "data") continue;
    count += Array.isArray(instances) ? instances.length : 0;
  }
  return count;
}

/** Managed resource instances of the workspace's current state: 0 without state, null when unreadable. */
export async function currentManagedInstances(
  ctx: StoreContext,
  db: Queryable,
  workspaceId: string,
): Promise<number | null> {
  const body = await currentState(ctx, workspaceId, db);
  if (body === null) return 0;
  if (body.size > maxCountedStateBytes) return null;
  const chunks: Buffer[] = [];
  for await (const chunk of body.open()) chunks.push(chunk as Buffer);
  try {
    return managedInstances(JSON.parse(Buffer.concat(chunks).toString("utf8")));
  } catch {
    return null;
  }
}

/**
 * Throws why the workspace may not be deleted; `safe` adds the lock and the resources. `db` is
 * the delete's own transaction, `ws` as read in it: checked anywhere else, a run or lock taken
 * before the delete commits would not be seen.
 */
export async function checkDeletable(ctx: StoreContext, db: Queryable, ws: Workspace, safe: boolean): Promise<void> {
  // The workspace's current run, else a plan-only run, which runs beside the workspace's queue.
  const active =
    ws.currentRunId ??
    (
      await db
        .selectFrom("runs")
        .select("id")
        .where("workspace_id", "=", ws.id)
        .where("status", "not in", [...terminalRunStatuses])
        .limit(1)
        .executeTakeFirst()
    )?.id;
  if (active)
    throw new WorkspaceDeleteRefused(
      "active_run",
      `workspace ${ws.name} has an active run (${active}); cancel it first`,
      { runId: active },
    );
  if (!safe) return;
  if (ws.stateLocked)
    throw new WorkspaceDeleteRefused("locked", `workspace ${ws.name} is locked; unlock it before deleting it`);
  const instances = await currentManagedInstances(ctx, db, ws.id);
  if (instances === 0) return;
  // A state that cannot be read may manage anything: the safe delete fails closed.
  throw new WorkspaceDeleteRefused(
    "manages_resources",
    instances === null
      ? `workspace ${ws.name}'s current state cannot be read (encrypted, or over 64 MB), so it may still manage resources`
      : `workspace ${ws.name} is still managing ${instances} resource instance(s) in its current state`,
    { instances },
  );
}
