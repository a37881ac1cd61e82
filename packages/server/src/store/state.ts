import { createHash } from "node:crypto";
import { DroverError, newId, type StateVersion } from "@drover/protocol";
import type { Selectable } from "kysely";
import type { StateVersionsTable } from "../db/schema.js";
import { isForeignKeyViolation } from "../db/storage-errors.js";
import { sourceChunks, sourceSize, storedBody, writeChunks, type BodySource, type StoredBody } from "./bodies.js";
import { iso, type Queryable, type StoreContext } from "./context.js";
import { transactionKeepingCause } from "./transaction.js";
import { JsonScanError, JsonScanner } from "./json-scan.js";

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

const toStateVersion = (r: Omit<Selectable<StateVersionsTable>, "seq">): StateVersion => ({
  id: r.id,
  workspaceId: r.workspace_id,
  serial: r.serial,
  lineage: r.lineage,
  md5: r.md5,
  size: r.size,
  runId: r.run_id,
  createdAt: iso(r.created_at),
  deletedAt: r.deleted_at === null ? null : iso(r.deleted_at),
});

/** The newest state body, or null when the workspace has none yet. */
export async function currentState(
  ctx: StoreContext,
  workspaceId: string,
  db: Queryable = ctx.db,
): Promise<StoredBody | null> {
  const row = await db
    .selectFrom("state_versions")
    .select(["id", "size"])
    .where("workspace_id", "=", workspaceId)
    .where("deleted_at", "is", null)
    .orderBy("seq", "desc")
    .limit(1)
    .executeTakeFirst();
  return row ? storedBody(db, "state_version_chunks", row.id, row.size) : null;
}

/** Longest top-level `lineage` accepted; terraform's are UUIDs. */
const maxLineageBytes = 64 * 1024;

export interface WriteStateInput {
  workspaceId: string;
  body: BodySource;
  /** base64 MD5 terraform sends in Content-MD5; checked when present. */
  contentMd5: string | undefined;
  /** `?ID=` of the write: the lock id terraform holds. */
  lockId: string | undefined;
  runId: string | null;
  /** The new version's id when the caller already gave it out (an upload URL names it); else a new one. */
  id?: string | undefined;
}

/**
 * Stores a new state version; with a lock held, only its holder may write. The body must be a
 * JSON object with a lineage and serial (400 without, as `stateIdentity` says); a lineage other
 * than the current state's, or a lower serial, is refused (409), as terraform's own remote
 * backends do, so a stray or old state cannot replace the real one.
 */
export async function writeState(ctx: StoreContext, input: WriteStateInput): Promise<StateVersion> {
  // One pass over the body: its MD5, and a JSON check that keeps only the top-level serial and
  // lineage, so a state of any size is checked without holding it in memory.
  const hash = createHash("md5");
  const scanner = new JsonScanner({ keep: ["serial", "lineage", "encryption_version"], maxKeptBytes: maxLineageBytes });
  let invalid: JsonScanError | undefined;
  const attempt = (step: () => void) => {
    try {
      step();
    } catch (err) {
      if (!(err instanceof JsonScanError)) throw err;
      invalid = err;
    }
  };
  for await (const piece of sourceChunks(input.body)) {
    hash.update(piece);
    if (!invalid) attempt(() => scanner.push(piece));
  }
  if (!invalid) attempt(() => scanner.end());
  const md5 = hash.digest("base64");
  if (input.contentMd5 && input.contentMd5 !== md5) {
    throw new DroverError(
      "bad_request",
      "Content-MD5 does not match the state body; the upload was corrupted, retry it",
    );
  }
  if (invalid?.kind === "too_long")
    throw new DroverError("bad_request", `the state's ${invalid.message}; send a terraform state file`, {
      cause: invalid,
    });
  if (invalid)
    throw new DroverError(
      "invalid_json",
      `the state body is not JSON (${invalid.message}); send a terraform state file`,
      { cause: invalid },
    );
  const scanned = scanner.result();
  if (scanned.topLevel !== "object")
    throw new DroverError("bad_request", "the state body is not a JSON object; send a terraform state file");
  const identity = stateIdentity(scanned.fields);
  const { serial, lineage } = identity ?? { serial: null, lineage: null };
  return transactionKeepingCause(ctx, async (trx) => {
    const lock = await trx
      .selectFrom("state_locks")
      .select(["lock_id", "info"])
      .where("workspace_id", "=", input.workspaceId)
      .executeTakeFirst();
    if (lock && lock.lock_id !== input.lockId) throw new StateLockedError(lock.info);
    if (identity === undefined) {
      throw new DroverError(
        "bad_request",
        "the state has no `lineage` (a non-empty string) and `serial` (a non-negative integer): terraform sends both in every state; send a terraform state file",
      );
    }
    // The same state again from the same writer (terraform's http backend sends a POST again
    // after a reset or a 5xx, an agent retries its upload): the version it already made.
    if (input.id === undefined) {
      const latest = await trx
        .selectFrom("state_versions")
        .selectAll()
        .where("workspace_id", "=", input.workspaceId)
        .where("deleted_at", "is", null)
        .orderBy("seq", "desc")
        .limit(1)
        .executeTakeFirst();
      if (
        latest !== undefined &&
        latest.md5 === md5 &&
        latest.serial === serial &&
        latest.lineage === lineage &&
        latest.run_id === input.runId
      )
        return toStateVersion(latest);
    }
    // Compared with the newest version that has them: an encrypted state in between (which
    // carries neither) must not switch the checks off for the write after it.
    const current = await trx
      .selectFrom("state_versions")
      .select(["serial", "lineage"])
      .where("workspace_id", "=", input.workspaceId)
      .where("deleted_at", "is", null)
      .where("lineage", "is not", null)
      .orderBy("seq", "desc")
      .limit(1)
      .executeTakeFirst();
    if (current?.lineage && lineage !== null && lineage !== current.lineage) {
      throw new DroverError(
        "conflict",
        `the state's lineage ${JSON.stringify(lineage)} differs from the workspace's ${JSON.stringify(current.lineage)}: it is another state; delete the workspace state first if you mean to replace it`,
      );
    }
    if (current?.serial != null && serial !== null && serial < current.serial) {
      throw new DroverError(
        "conflict",
        `the state's serial ${serial} is lower than the workspace's ${current.serial}: it is older than the stored state; refresh and retry`,
      );
    }
    const row = {
      id: input.id ?? newId("sv"),
      workspace_id: input.workspaceId,
      serial,
      lineage,
      md5,
      size: sourceSize(input.body),
      run_id: input.runId,
      created_at: ctx.now(),
      deleted_at: null,
    };
    await trx
      .insertInto("state_versions")
      .values(row)
      .execute()
      .catch((err: unknown) => rethrowIfWorkspaceGone(err, input.workspaceId));
    await writeChunks(trx, "state_version_chunks", row.id, input.body);
    return toStateVersion(row);
  });
}

/**
 * A state row refused for its workspace reference: the workspace was deleted after the caller
 * found it (its delete cascades to state and locks), so the writer is told so, not given a 500.
 */
export function rethrowIfWorkspaceGone(err: unknown, workspaceId: string): never {
  if (isForeignKeyViolation(err))
    throw new DroverError("not_found", `workspace ${workspaceId} was deleted; nothing was written`, { cause: err });
  throw err;
}

/**
 * The lineage and serial a state is checked by. Terraform and OpenTofu write both into every
 * state; OpenTofu's encrypted state (`encryption_version`, the rest ciphertext) carries neither
 * and is stored unchecked (null, null). Anything else lacking them is not a state: undefined.
 */
function stateIdentity(fields: Map<string, unknown>): { serial: number | null; lineage: string | null } | undefined {
  const serial = fields.get("serial");
  const lineage = fields.get("lineage");
  if (
    typeof serial === "number" &&
    Number.isSafeInteger(serial) &&
    serial >= 0 &&
    typeof lineage === "string" &&
    lineage !== ""
  )
    return { serial, lineage };
  const encrypted =
    typeof fields.get("encryption_version") === "string" && serial === undefined && lineage === undefined;
  return encrypted ? { serial: null, lineage: null } : undefined;
}

/** Takes the state lock. Idempotent for the same lock ID (terraform retries); else StateLockedError. */
export async function lockState(
  ctx: StoreContext,
  workspaceId: string,
  infoJson: string,
  jobId: string | null,
): Promise<void> {
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
    .execute()
    .catch((err: unknown) => rethrowIfWorkspaceGone(err, workspaceId));
  const held = await ctx.db
    .selectFrom("state_locks")
    .select(["lock_id", "info"])
    .where("workspace_id", "=", workspaceId)
    .executeTakeFirst();
  if (held === undefined) throw new DroverError("not_found", `workspace ${workspaceId} was deleted; it was not locked`);
  if (held.lock_id !== lockId) throw new StateLockedError(held.info);
}

/**
 * Releases the lock. An empty body is terraform's force-unlock; otherwise the body's ID must
 * match the holder (terraform sends the stored LockInfo, OpenTofu one with the same ID).
 */
export async function unlockState(ctx: StoreContext, workspaceId: string, body: string): Promise<void> {
  const held = await ctx.db
    .selectFrom("state_locks")
    .select(["lock_id", "info"])
    .where("workspace_id", "=", workspaceId)
    .executeTakeFirst();
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
  await ctx.db
    .deleteFrom("state_locks")
    .where("workspace_id", "=", workspaceId)
    .where("lock_id", "=", held.lock_id)
    .execute();
}

/**
 * terraform's DELETE: the workspace has no current state afterwards, but every version stays
 * listed and downloadable (marked deleted). Refused while another holder has the lock.
 */
export async function deleteState(ctx: StoreContext, workspaceId: string, lockId: string | undefined): Promise<void> {
  await transactionKeepingCause(ctx, async (trx) => {
    const lock = await trx
      .selectFrom("state_locks")
      .select(["lock_id", "info"])
      .where("workspace_id", "=", workspaceId)
      .executeTakeFirst();
    if (lock && lock.lock_id !== lockId) throw new StateLockedError(lock.info);
    await trx
      .updateTable("state_versions")
      .set({ deleted_at: ctx.now() })
      .where("workspace_id", "=", workspaceId)
      .where("deleted_at", "is", null)
      .execute();
  });
}

export async function listStateVersions(ctx: StoreContext, workspaceId: string): Promise<StateVersion[]> {
  const rows = await ctx.db
    .selectFrom("state_versions")
    .select(["id", "workspace_id", "serial", "lineage", "md5", "size", "run_id", "created_at", "deleted_at"])
    .where("workspace_id", "=", workspaceId)
    .orderBy("seq", "desc")
    .execute();
  return rows.map(toStateVersion);
}

/** The body of one state version. */
export async function readStateVersion(ctx: StoreContext, id: string): Promise<StoredBody> {
  const row = await ctx.db.selectFrom("state_versions").select(["id", "size"]).where("id", "=", id).executeTakeFirst();
  if (!row) throw new DroverError("not_found", `no state version ${JSON.stringify(id)}`);
  return storedBody(ctx.db, "state_version_chunks", row.id, row.size);
}
