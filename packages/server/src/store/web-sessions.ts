import { DroverError, hashToken, newId, newWebSessionToken } from "@drover/protocol";
import type { StoreContext } from "./context.js";
import { authenticateUserToken } from "./user-tokens.js";

/** A browser session as the server hands it out once: the cookie's value and when it ends. */
export interface NewWebSession {
  id: string;
  userTokenId: string;
  /** The session cookie's value (stored only as a hash). */
  token: string;
  expiresAt: number;
}

/**
 * Signs a browser in with an API token: a session of `ttlMs` standing for that token. The token
 * is checked as the API checks it (unknown, revoked and expired ones are refused the same way).
 */
export async function createWebSession(ctx: StoreContext, userToken: string, ttlMs: number): Promise<NewWebSession> {
  const { tokenId } = await authenticateUserToken(ctx, userToken);
  const id = newId("wses");
  const token = newWebSessionToken(id);
  const now = ctx.now();
  const expiresAt = now + ttlMs;
  await ctx.db
    .insertInto("web_sessions")
    .values({
      id,
      user_token_id: tokenId,
      token_hash: hashToken(token),
      created_at: now,
      expires_at: expiresAt,
      revoked_at: null,
    })
    .execute();
  // Sessions that ended long ago are of no use to anyone: each sign-in clears those older than a day.
  await ctx.db
    .deleteFrom("web_sessions")
    .where("expires_at", "<", now - 24 * 60 * 60 * 1000)
    .execute();
  return { id, userTokenId: tokenId, token, expiresAt };
}

/**
 * The session behind a session cookie: refused once it has ended (signed out, expired) or once
 * the API token it was made with no longer works (revoked, expired).
 */
export async function authenticateWebSession(
  ctx: StoreContext,
  token: string,
): Promise<{ sessionId: string; tokenId: string; expiresAt: number }> {
  const row = await ctx.db
    .selectFrom("web_sessions")
    .innerJoin("user_tokens", "user_tokens.id", "web_sessions.user_token_id")
    .select([
      "web_sessions.id",
      "web_sessions.user_token_id",
      "web_sessions.expires_at",
      "web_sessions.revoked_at",
      "user_tokens.revoked_at as token_revoked_at",
      "user_tokens.expires_at as token_expires_at",
    ])
    .where("web_sessions.token_hash", "=", hashToken(token))
    .executeTakeFirst();
  const now = ctx.now();
  if (!row) throw new DroverError("unauthorized", "not signed in: this browser session is unknown; sign in again");
  if (row.revoked_at !== null)
    throw new DroverError("unauthorized", "this browser session was signed out; sign in again");
  if (row.expires_at <= now) throw new DroverError("unauthorized", "this browser session has expired; sign in again");
  if (row.token_revoked_at !== null)
    throw new DroverError(
      "token_revoked",
      "the API token this browser signed in with was revoked; sign in with another",
    );
  if (row.token_expires_at !== null && row.token_expires_at <= now)
    throw new DroverError(
      "unauthorized",
      "the API token this browser signed in with has expired; sign in with another",
    );
  return { sessionId: row.id, tokenId: row.user_token_id, expiresAt: row.expires_at };
}

/** Ends a browser session at once (sign-out); ending one already ended changes nothing. */
export async function endWebSession(ctx: StoreContext, sessionId: string): Promise<void> {
  await ctx.db
    .updateTable("web_sessions")
    .set({ revoked_at: ctx.now() })
    .where("id", "=", sessionId)
    .where("revoked_at", "is", null)
    .execute();
}
