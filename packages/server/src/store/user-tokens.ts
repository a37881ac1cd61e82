import { DroverError, hashToken, newId, newUserToken, tokenSubject, type UserToken } from "@drover/protocol";
import type { Selectable } from "kysely";
import type { UserTokensTable } from "../db/schema.js";
import { iso, isoOrNull, type StoreContext } from "./context.js";

/** Shortest DROVER_ADMIN_TOKEN accepted: a guessable bootstrap token is every secret's key. */
export const minAdminTokenLength = 32;

const toUserToken = (r: Omit<Selectable<UserTokensTable>, "token_hash">): UserToken => ({
  id: r.id,
  description: r.description,
  createdAt: iso(r.created_at),
  expiresAt: isoOrNull(r.expires_at),
  revokedAt: isoOrNull(r.revoked_at),
  bootstrap: r.bootstrap === 1,
});

/** Creates a user/API token; its secret is returned only here. */
export async function createUserToken(
  ctx: StoreContext,
  description: string,
  expiresAt: number | null = null,
): Promise<UserToken & { token: string }> {
  const id = newId("utok");
  const token = newUserToken(id);
  const row = {
    id,
    description,
    token_hash: hashToken(token),
    created_at: ctx.now(),
    expires_at: expiresAt,
    revoked_at: null,
    bootstrap: 0,
  };
  await ctx.db.insertInto("user_tokens").values(row).execute();
  return { ...toUserToken(row), token };
}

/**
 * Installs the operator's DROVER_ADMIN_TOKEN. A new value revokes the bootstrap token installed
 * before it (rotation); a value that was revoked is refused. Returns how many it revoked.
 */
export async function ensureBootstrapToken(ctx: StoreContext, token: string): Promise<{ revoked: number }> {
  const hash = hashToken(token);
  const existing = await ctx.db
    .selectFrom("user_tokens")
    .select(["id", "revoked_at", "bootstrap"])
    .where("token_hash", "=", hash)
    .executeTakeFirst();
  if (existing?.revoked_at != null)
    throw new DroverError("bad_request", "DROVER_ADMIN_TOKEN was revoked; set a new value");
  const now = ctx.now();
  let id = existing?.id;
  if (!id) {
    id = newId("utok");
    await ctx.db
      .insertInto("user_tokens")
      .values({
        id,
        description: "DROVER_ADMIN_TOKEN",
        token_hash: hash,
        created_at: now,
        expires_at: null,
        revoked_at: null,
        bootstrap: 1,
      })
      .execute();
  }
  const res = await ctx.db
    .updateTable("user_tokens")
    .set({ revoked_at: now })
    .where("bootstrap", "=", 1)
    .where("revoked_at", "is", null)
    .where("id", "!=", id)
    .executeTakeFirst();
  return { revoked: Number(res.numUpdatedRows) };
}

export async function countUserTokens(ctx: StoreContext): Promise<number> {
  const row = await ctx.db
    .selectFrom("user_tokens")
    .select((eb) => eb.fn.countAll<number>().as("n"))
    .executeTakeFirstOrThrow();
  return Number(row.n);
}

/** Every user token, newest first; secrets are never returned. */
export async function listUserTokens(ctx: StoreContext): Promise<UserToken[]> {
  const rows = await ctx.db
    .selectFrom("user_tokens")
    .select(["id", "description", "created_at", "expires_at", "revoked_at", "bootstrap"])
    .orderBy("created_at", "desc")
    .orderBy("id")
    .execute();
  return rows.map(toUserToken);
}

/** Revokes a user token at once. Refused when it is the last one that works: nobody could log in again. */
export async function revokeUserToken(ctx: StoreContext, id: string): Promise<UserToken> {
  return ctx.db.transaction().execute(async (trx) => {
    const row = await trx
      .selectFrom("user_tokens")
      .select(["id", "description", "created_at", "expires_at", "revoked_at", "bootstrap"])
      .where("id", "=", id)
      .executeTakeFirst();
    if (!row) throw new DroverError("not_found", `no user token ${JSON.stringify(id)}`);
    if (row.revoked_at !== null) return toUserToken(row);
    const now = ctx.now();
    const others = await trx
      .selectFrom("user_tokens")
      .select("id")
      .where("id", "!=", id)
      .where("revoked_at", "is", null)
      .where((eb) => eb.or([eb("expires_at", "is", null), eb("expires_at", ">", now)]))
      .limit(1)
      .executeTakeFirst();
    if (!others)
      throw new DroverError("conflict", `user token ${id} is the last valid one; create another before revoking it`);
    await trx.updateTable("user_tokens").set({ revoked_at: now }).where("id", "=", id).execute();
    return toUserToken({ ...row, revoked_at: now });
  });
}

/** Checks a user token; any user token is an administrator for now. */
export async function authenticateUserToken(ctx: StoreContext, token: string): Promise<{ tokenId: string }> {
  const row = await ctx.db
    .selectFrom("user_tokens")
    .select(["id", "revoked_at", "expires_at"])
    .where("token_hash", "=", hashToken(token))
    .executeTakeFirst();
  if (!row) {
    const hint = tokenSubject(token, "user")
      ? ""
      : " (user tokens start with drv_u_, or are the DROVER_ADMIN_TOKEN value)";
    throw new DroverError("unauthorized", `unknown API token${hint}`);
  }
  if (row.revoked_at !== null)
    throw new DroverError("token_revoked", "this API token was revoked; ask an administrator for a new one");
  if (row.expires_at !== null && row.expires_at <= ctx.now())
    throw new DroverError(
      "unauthorized",
      "this API token has expired; create a new one with `drover user-token create`",
    );
  return { tokenId: row.id };
}
