import { DroverError, hashToken, newId, newUserToken, tokenSubject } from "@drover/protocol";
import type { StoreContext } from "./context.js";

/** Creates a user/API token; its secret is returned only here. */
export async function createUserToken(ctx: StoreContext, description: string): Promise<{ id: string; token: string }> {
  const id = newId("utok");
  const token = newUserToken(id);
  await ctx.db.insertInto("user_tokens").values({ id, description, token_hash: hashToken(token), created_at: ctx.now() }).execute();
  return { id, token };
}

/** Stores a token chosen by the operator (DROVER_ADMIN_TOKEN), once. */
export async function ensureUserToken(ctx: StoreContext, token: string, description: string): Promise<void> {
  const hash = hashToken(token);
  const existing = await ctx.db.selectFrom("user_tokens").select("id").where("token_hash", "=", hash).executeTakeFirst();
  if (existing) return;
  await ctx.db.insertInto("user_tokens").values({ id: newId("utok"), description, token_hash: hash, created_at: ctx.now() }).execute();
}

export async function countUserTokens(ctx: StoreContext): Promise<number> {
  const row = await ctx.db.selectFrom("user_tokens").select((eb) => eb.fn.countAll<number>().as("n")).executeTakeFirstOrThrow();
  return Number(row.n);
}

/** Checks a user token; any user token is an administrator for now. */
export async function authenticateUserToken(ctx: StoreContext, token: string): Promise<{ tokenId: string }> {
  const row = await ctx.db.selectFrom("user_tokens").select("id").where("token_hash", "=", hashToken(token)).executeTakeFirst();
  if (!row) {
    const hint = tokenSubject(token, "user") ? "" : " (user tokens start with drv_u_, or are the DROVER_ADMIN_TOKEN value)";
    throw new DroverError("unauthorized", `unknown API token${hint}`);
  }
  return { tokenId: row.id };
}
