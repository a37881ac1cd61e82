import { createHash } from "node:crypto";
import { DroverError, newId, type StateVersion } from "@drover/protocol";
import type { Selectable } from "kysely";
import type { StateVersionsTable } from "../db/schema.js";
import { iso, type StoreContext } from "./context.js";

/*
 * Terraform state as the `http` backend protocol needs it (see shared notes): every version
 * kept, one lock per workspace holding terraform's LockInfo JSON verbatim.
 */

/** A refused lock or write: the current holder's LockInfo, which terraform prints. */
export class StateLockedError extends DroverError {
  constructor(readonly holderInfo: string) {
    super("state_locked", "the state is locked by another operation");
  }
}

const toStateVersion = (r: Omit<Selectable<StateVersionsTable>, "body" | "seq">): StateVersion => ({
  id: r.id,
  workspaceId: r.workspace_id,
  serial: r.serial,
  lineage: r.lineage,
  md5: r.md5,
  size: r.size,
  runId: r.run_id,
  createdAt: iso(r.created_at),
});

/** The newest state body, or null when the workspace has none yet. */
export async function currentState(ctx: StoreContext, workspaceId: string): Promise<Buffer | null> {
  const row = await ctx.db.selectFrom("state_versions").select("body").where("workspace_id", "=", workspaceId).orderBy("seq", "desc").limit(1).executeTakeFirst();
  return row ? Buffer.from(row.body) : null;
}

export interface WriteStateInput {
  workspaceId: string;
  body: Buffer;
  /** base64 MD5 terraform sends in Content-MD5; checked when present. */
  contentMd5: string | undefined;
  /** `?ID=` of the write: the lock id terraform holds. */
  lockId: string | undefined;
  runId: string | null;
}

/** Stores a new state version; with a lock held, only its holder may write. */
export async function writeState(ctx: StoreContext, input: WriteStateInput): Promise<StateVersion> {
  const md5 = createHash("md5").update(input.body).digest("base64");
  if (input.contentMd5 && input.contentMd5 !== md5) {
    throw new DroverError("bad_request", "Content-MD5 does not match the state body; the upload was corrupted, retry it");
  }
  let serial: number | null = null;
  let lineage: string | null = null;
  try {
    const parsed = JSON.parse(input.body.toString("utf8")) as { serial?: unknown; lineage?: unknown };
    if (typeof parsed.serial === "number") serial = parsed.serial;
    if (typeof parsed.lineage === "string") lineage = parsed.lineage;
  } catch {
    // Encrypted (OpenTofu) or otherwise opaque state is stored as it is.
  }
  return ctx.db.transaction().execute(async (trx) => {
    const lock = await trx.selectFrom("state_locks").select(["lock_id", "info"]).where("workspace_id", "=", input.workspaceId).executeTakeFirst();
    if (lock && lock.lock_id !== input.lockId) throw new StateLockedError(lock.info);
    const row = {
      id: newId("sv"),
      workspace_id: input.workspaceId,
      serial,
      lineage,
      md5,
      size: input.body.length,
      body: input.body,
      run_id: input.runId,
      created_at: ctx.now(),
    };
    await trx.insertInto("state_versions").values(row).execute();
    return toStateVersion(row);
  });
}

/** Takes the state lock. Idempotent for the same lock ID (terraform retries); else StateLockedError. */
export async function lockState(ctx: StoreContext, workspaceId: string, infoJson: string, jobId: string | null): Promise<void> {
  let lockId: unknown;
  try {
    lockId = (JSON.parse(infoJson) as { ID?: unknown }).ID;
  } catch (cause) {
    throw new DroverError("invalid_json", "the lock request body is not LockInfo JSON", { cause });
  }
  if (typeof lockId !== "string" || lockId === "") throw new DroverError("bad_request", "the lock request lacks an ID");
  await ctx.db
    .insertInto("state_locks")
    .values({ workspace_id: workspaceId, lock_id: lockId, info: infoJson, job_id: jobId, created_at: ctx.now() })
    .onConflict((oc) => oc.column("workspace_id").doNothing())
    .execute();
  const held = await ctx.db.selectFrom("state_locks").select(["lock_id", "info"]).where("workspace_id", "=", workspaceId).executeTakeFirstOrThrow();
  if (held.lock_id !== lockId) throw new StateLockedError(held.info);
}

/**
 * Releases the lock. An empty body is terraform's force-unlock; otherwise the body's ID must
 * match the holder (terraform sends the stored LockInfo, OpenTofu one with the same ID).
 */
export async function unlockState(ctx: StoreContext, workspaceId: string, body: string): Promise<void> {
  const held = await ctx.db.selectFrom("state_locks").select(["lock_id", "info"]).where("workspace_id", "=", workspaceId).executeTakeFirst();
  if (!held) return;
  if (body.trim() !== "") {
    let id: unknown;
    try {
      id = (JSON.parse(body) as { ID?: unknown }).ID;
    } catch (cause) {
      throw new DroverError("invalid_json", "the unlock request body is not LockInfo JSON", { cause });
    }
    if (id !== held.lock_id) throw new StateLockedError(held.info);
  }
  await ctx.db.deleteFrom("state_locks").where("workspace_id", "=", workspaceId).where("lock_id", "=", held.lock_id).execute();
}

/** Deletes every state version of a workspace (terraform's DELETE). */
export async function deleteState(ctx: StoreContext, workspaceId: string): Promise<void> {
  await ctx.db.deleteFrom("state_versions").where("workspace_id", "=", workspaceId).execute();
}

export async function listStateVersions(ctx: StoreContext, workspaceId: string): Promise<StateVersion[]> {
  const rows = await ctx.db
    .selectFrom("state_versions")
    .select(["id", "workspace_id", "serial", "lineage", "md5", "size", "run_id", "created_at"])
    .where("workspace_id", "=", workspaceId)
    .orderBy("seq", "desc")
    .execute();
  return rows.map(toStateVersion);
}

/** The body of one state version. */
export async function readStateVersion(ctx: StoreContext, id: string): Promise<Buffer> {
  const row = await ctx.db.selectFrom("state_versions").select("body").where("id", "=", id).executeTakeFirst();
  if (!row) throw new DroverError("not_found", `no state version ${JSON.stringify(id)}`);
  return Buffer.from(row.body);
}
