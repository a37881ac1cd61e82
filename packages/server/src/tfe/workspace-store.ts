import { DroverError, type Engine, type Workspace } from "@drover/protocol";
import { randomUUID } from "node:crypto";
import type { StoreContext } from "../store/context.js";
import { rethrowIfWorkspaceGone } from "../store/state.js";
import { getWorkspace, listWorkspaces } from "../store/workspaces.js";
import { JsonApiError } from "./jsonapi.js";

/*
 * What the cloud block adds to a Drover workspace (tags, execution mode), and its lock: the
 * `state_locks` row the http backend and runs take, so one lock guards the workspace whichever
 * protocol asks.
 */

export type ExecutionMode = "remote" | "local";

/** Who holds the lock, as the lock API reports it. */
export interface LockHolder {
  lockId: string;
  /** The run whose job took it, if a job did. */
  runId: string | null;
  /** The user token whose lock API call took it. */
  tokenId: string | null;
  info: string;
}

/** A workspace with what the TFE API shows beside Drover's fields. */
export interface TfeWorkspace {
  ws: Workspace;
  tags: string[];
  executionMode: ExecutionMode;
  lock: LockHolder | null;
}

/** The lock ID of a lock taken through the TFE API by a user token. */
const lockIdOf = (tokenId: string) => `tfe-${tokenId}`;

const parseTags = (raw: string): string[] => {
  try {
    const value = JSON.parse(raw) as unknown;
    return Array.isArray(value) ? value.filter((t): t is string => typeof t === "string") : [];
  } catch {
    return [];
  }
};

/** The workspaces of `ids` with their tags, mode and lock, in the order given. */
async function withExtras(ctx: StoreContext, list: Workspace[]): Promise<TfeWorkspace[]> {
  if (list.length === 0) return [];
  const ids = list.map((w) => w.id);
  const rows = await ctx.db
    .selectFrom("workspaces")
    .leftJoin("state_locks", "state_locks.workspace_id", "workspaces.id")
    .leftJoin("jobs", "jobs.id", "state_locks.job_id")
    .select([
      "workspaces.id",
      "workspaces.tfe_tags",
      "workspaces.execution_mode",
      "state_locks.lock_id",
      "state_locks.info",
      "jobs.run_id",
    ])
    .where("workspaces.id", "in", ids)
    .execute();
  const byId = new Map(rows.map((r) => [r.id, r]));
  return list.map((ws) => {
    const r = byId.get(ws.id);
    const lockId = r?.lock_id ?? null;
    return {
      ws,
      tags: parseTags(r?.tfe_tags ?? "[]"),
      executionMode: r?.execution_mode === "local" ? "local" : "remote",
      lock:
        lockId === null
          ? null
          : {
              lockId,
              runId: r?.run_id ?? null,
              tokenId: lockId.startsWith("tfe-") ? lockId.slice("tfe-".length) : null,
              info: r?.info ?? "",
            },
    };
  });
}

/** The 404 of a workspace that does not exist, or that the caller may not see. */
export const noWorkspace = (idOrName: string | undefined) =>
  new JsonApiError(404, "not found", `no workspace ${JSON.stringify(idOrName)}`);

/** One workspace by id or name; 404 when there is none. */
export async function tfeWorkspace(ctx: StoreContext, idOrName: string): Promise<TfeWorkspace> {
  let ws: Workspace;
  try {
    ws = await getWorkspace(ctx, idOrName);
  } catch (err) {
    if (err instanceof DroverError && err.code === "not_found") throw noWorkspace(idOrName);
    throw err;
  }
  const [found] = await withExtras(ctx, [ws]);
  if (!found) throw noWorkspace(idOrName);
  return found;
}

/** Workspaces whose names hold `search`, having every one of `tags`, by name. */
export async function listTfeWorkspaces(
  ctx: StoreContext,
  filter: { search: string | undefined; tags: string[] },
): Promise<TfeWorkspace[]> {
  const { items } = await listWorkspaces(ctx, { search: filter.search });
  const all = await withExtras(ctx, items);
  return all.filter((w) => filter.tags.every((t) => w.tags.includes(t)));
}

export async function addTags(ctx: StoreContext, w: TfeWorkspace, tags: readonly string[]): Promise<void> {
  const next = [...new Set([...w.tags, ...tags])].sort();
  await ctx.db
    .updateTable("workspaces")
    .set({ tfe_tags: JSON.stringify(next) })
    .where("id", "=", w.ws.id)
    .execute();
}

export async function removeTags(ctx: StoreContext, w: TfeWorkspace, tags: readonly string[]): Promise<void> {
  const next = w.tags.filter((t) => !tags.includes(t));
  await ctx.db
    .updateTable("workspaces")
    .set({ tfe_tags: JSON.stringify(next) })
    .where("id", "=", w.ws.id)
    .execute();
}

export async function setExecutionMode(ctx: StoreContext, w: TfeWorkspace, mode: ExecutionMode): Promise<void> {
  await ctx.db.updateTable("workspaces").set({ execution_mode: mode }).where("id", "=", w.ws.id).execute();
}

/** The holder as a sentence go-tfe recognises ("is locked by Run"/"User"), for 409 details. */
export function describeHolder(lock: LockHolder): string {
  if (lock.runId !== null) return `the workspace is locked by Run ${lock.runId}`;
  if (lock.tokenId !== null) return `the workspace is locked by User ${lock.tokenId}`;
  let who = "";
  try {
    const info = JSON.parse(lock.info) as { Who?: unknown; Operation?: unknown };
    if (typeof info.Who === "string")
      who = ` (${info.Who}${typeof info.Operation === "string" ? `, ${info.Operation}` : ""})`;
  } catch {
    // A LockInfo that is not JSON still names its lock ID.
  }
  return `the workspace is locked by User through the state backend, lock ${lock.lockId}${who}`;
}

/**
 * Takes the workspace lock for a user token, with a LockInfo the http backend can print. A lock
 * held by anyone, this token included, is a 409: the cloud block takes it once per operation.
 */
export async function lockWorkspace(ctx: StoreContext, w: TfeWorkspace, tokenId: string, reason: string) {
  const lockId = lockIdOf(tokenId);
  const info = JSON.stringify({
    ID: lockId,
    Operation: "terraform cloud block",
    Info: reason,
    Who: `user token ${tokenId}`,
    Version: "",
    Created: new Date(ctx.now()).toISOString(),
    Path: "",
    Nonce: randomUUID(),
  });
  const inserted = await ctx.db
    .insertInto("state_locks")
    .values({ workspace_id: w.ws.id, lock_id: lockId, info, job_id: null, created_at: ctx.now() })
    .onConflict((oc) => oc.column("workspace_id").doNothing())
    .executeTakeFirst()
    .catch((err: unknown) => rethrowIfWorkspaceGone(err, w.ws.id));
  if (Number(inserted.numInsertedOrUpdatedRows ?? 0) === 0) {
    const now = await tfeWorkspace(ctx, w.ws.id);
    throw new JsonApiError(409, "conflict", now.lock ? describeHolder(now.lock) : "the workspace is locked");
  }
}

/** Releases this token's lock; another holder's is a 409 naming it, no lock a 409 too. */
export async function unlockWorkspace(ctx: StoreContext, w: TfeWorkspace, tokenId: string): Promise<void> {
  if (w.lock === null) throw new JsonApiError(409, "conflict", "the workspace is already unlocked");
  if (w.lock.lockId !== lockIdOf(tokenId))
    throw new JsonApiError(409, "conflict", `Unable to unlock workspace: ${describeHolder(w.lock)}`);
  await releaseLock(ctx, w, w.lock.lockId);
}

/** Releases whoever's lock; no lock is a 409 (go-tfe: "workspace is not locked"). */
export async function forceUnlockWorkspace(ctx: StoreContext, w: TfeWorkspace): Promise<void> {
  if (w.lock === null) throw new JsonApiError(409, "conflict", "the workspace is not locked");
  await releaseLock(ctx, w, w.lock.lockId);
}

async function releaseLock(ctx: StoreContext, w: TfeWorkspace, lockId: string): Promise<void> {
  await ctx.db.deleteFrom("state_locks").where("workspace_id", "=", w.ws.id).where("lock_id", "=", lockId).execute();
}

/** The lock ID a state write through the TFE API by `tokenId` presents: its own lock's, if it holds one. */
export function writerLockId(w: TfeWorkspace, tokenId: string): string | undefined {
  return w.lock?.lockId === lockIdOf(tokenId) ? w.lock.lockId : undefined;
}

/** The engine of the client: OpenTofu names itself in its User-Agent, terraform does not. */
export function engineOfClient(userAgent: string | undefined): Engine {
  return /^OpenTofu\//i.test(userAgent ?? "") ? "tofu" : "terraform";
}
