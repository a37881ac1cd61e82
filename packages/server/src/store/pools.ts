import {
  DroverError,
  hashToken,
  newId,
  newPoolToken,
  type Pool,
  type PoolKind,
  type PoolSummary,
  type PoolToken,
} from "@drover/protocol";
import type { Selectable } from "kysely";
import type { PoolTokensTable, PoolsTable } from "../db/schema.js";
import { isUniqueViolation } from "../db/storage-errors.js";
import { iso, isoOrNull, type StoreContext } from "./context.js";
import { announceSessionsChanged } from "./sessions.js";

const toPool = (r: Selectable<PoolsTable>): Pool => ({
  id: r.id,
  name: r.name,
  kind: r.kind,
  createdAt: iso(r.created_at),
});
const toPoolToken = (r: Selectable<PoolTokensTable>): PoolToken => ({
  id: r.id,
  poolId: r.pool_id,
  description: r.description,
  createdAt: iso(r.created_at),
  lastUsedAt: isoOrNull(r.last_used_at),
  revokedAt: isoOrNull(r.revoked_at),
});

/** Creates a pool; a taken name is `already_exists`, also when another request takes it first. */
export async function createPool(ctx: StoreContext, name: string, kind: PoolKind = "runs"): Promise<Pool> {
  const taken = () => new DroverError("already_exists", `a pool named ${JSON.stringify(name)} already exists`);
  const existing = await ctx.db.selectFrom("pools").select("id").where("name", "=", name).executeTakeFirst();
  if (existing) throw taken();
  const row = { id: newId("pool"), name, kind, created_at: ctx.now() };
  try {
    await ctx.db.insertInto("pools").values(row).execute();
  } catch (err) {
    // A concurrent create passed the check too; the unique index decides who got the name.
    if (isUniqueViolation(err)) throw taken();
    throw err;
  }
  return toPool(row);
}

/** Pools with their agent counts: registrations kept (total) and online ones among them. */
export async function listPools(ctx: StoreContext): Promise<PoolSummary[]> {
  await ctx.presence?.flush();
  const rows = await ctx.db.selectFrom("pools").selectAll().orderBy("created_at").orderBy("id").execute();
  const counts = await ctx.db
    .selectFrom("agents")
    .select(["pool_id", "state", (eb) => eb.fn.countAll<number | string | bigint>().as("n")])
    .groupBy(["pool_id", "state"])
    .execute();
  const agents = new Map<string, { online: number; total: number }>();
  for (const c of counts) {
    const a = agents.get(c.pool_id) ?? { online: 0, total: 0 };
    a.total += Number(c.n);
    if (c.state === "online") a.online += Number(c.n);
    agents.set(c.pool_id, a);
  }
  return rows.map((r) => ({ ...toPool(r), agents: agents.get(r.id) ?? { online: 0, total: 0 } }));
}

/**
 * Deletes a pool no workspace uses: its tokens stop working and its agents' sessions end (they
 * are told their token was revoked); refused while a workspace or an unfinished job needs it.
 */
export async function deletePool(
  ctx: StoreContext,
  idOrName: string,
): Promise<Pool & { tokensRevoked: number; agentsEnded: number }> {
  const pool = await getPool(ctx, idOrName);
  const result = await ctx.db.transaction().execute(async (trx) => {
    const users = await trx.selectFrom("workspaces").select("name").where("pool_id", "=", pool.id).execute();
    if (users.length > 0)
      throw new DroverError(
        "conflict",
        `pool ${pool.name} is used by ${users.length} workspace(s) (${users
          .slice(0, 5)
          .map((w) => w.name)
          .join(", ")}${users.length > 5 ? ", …" : ""}): move or delete them first`,
        { hint: "drover workspace delete <workspace> --yes, or move it with the API (PATCH pool)" },
      );
    const active = await trx
      .selectFrom("jobs")
      .select("id")
      .where("pool_id", "=", pool.id)
      .where("status", "in", ["queued", "assigned", "running"])
      .executeTakeFirst();
    if (active) throw new DroverError("conflict", `pool ${pool.name} still has a job to finish (${active.id})`);
    const relayed = await trx
      .selectFrom("vcs_connections")
      .select("name")
      .where("via_pool_id", "=", pool.id)
      .executeTakeFirst();
    if (relayed)
      throw new DroverError("conflict", `pool ${pool.name} relays VCS connection ${relayed.name}: delete it first`);
    const now = ctx.now();
    const revoked = await trx
      .updateTable("pool_tokens")
      .set({ revoked_at: now })
      .where("pool_id", "=", pool.id)
      .where("revoked_at", "is", null)
      .executeTakeFirst();
    const ended = await trx
      .updateTable("agents")
      .set({ state: "deregistered", running_jobs: 0, last_seen_at: now })
      .where("pool_id", "=", pool.id)
      .where("state", "=", "online")
      .executeTakeFirst();
    await trx.deleteFrom("agents").where("pool_id", "=", pool.id).execute();
    await trx.deleteFrom("pool_tokens").where("pool_id", "=", pool.id).execute();
    await trx.deleteFrom("pools").where("id", "=", pool.id).execute();
    return { tokensRevoked: Number(revoked.numUpdatedRows), agentsEnded: Number(ended.numUpdatedRows) };
  });
  // Sessions kept by any server process are read again, and refused.
  announceSessionsChanged(ctx.events);
  return { ...pool, ...result };
}

/** Finds a pool by id or by name; not found is a DroverError. */
export async function getPool(ctx: StoreContext, idOrName: string): Promise<Pool> {
  const row = await ctx.db
    .selectFrom("pools")
    .selectAll()
    .where((eb) => eb.or([eb("id", "=", idOrName), eb("name", "=", idOrName)]))
    .executeTakeFirst();
  if (!row) throw new DroverError("not_found", `no pool ${JSON.stringify(idOrName)}`);
  return toPool(row);
}

/** Creates a pool token embedding `serverUrl`; the secret is returned here and never again. */
export async function createPoolToken(
  ctx: StoreContext,
  poolIdOrName: string,
  description: string,
  serverUrl: string,
): Promise<PoolToken & { token: string }> {
  const pool = await getPool(ctx, poolIdOrName);
  const token = newPoolToken({ url: serverUrl, pool: pool.id });
  const row = {
    id: newId("ptok"),
    pool_id: pool.id,
    description,
    token_hash: hashToken(token),
    created_at: ctx.now(),
    last_used_at: null,
    revoked_at: null,
  };
  await ctx.db.insertInto("pool_tokens").values(row).execute();
  return { ...toPoolToken(row), token };
}

export async function listPoolTokens(ctx: StoreContext, poolIdOrName: string): Promise<PoolToken[]> {
  const pool = await getPool(ctx, poolIdOrName);
  const rows = await ctx.db
    .selectFrom("pool_tokens")
    .selectAll()
    .where("pool_id", "=", pool.id)
    .orderBy("created_at")
    .execute();
  return rows.map(toPoolToken);
}

/** Revokes a token; the agents registered with it lose their sessions at their next call. */
export async function revokePoolToken(ctx: StoreContext, tokenId: string): Promise<PoolToken> {
  const row = await ctx.db.selectFrom("pool_tokens").selectAll().where("id", "=", tokenId).executeTakeFirst();
  if (!row) throw new DroverError("not_found", `no pool token ${JSON.stringify(tokenId)}`);
  if (row.revoked_at === null) {
    const now = ctx.now();
    await ctx.db.updateTable("pool_tokens").set({ revoked_at: now }).where("id", "=", tokenId).execute();
    row.revoked_at = now;
    // Agents registered with it are refused from now on, also where their sessions are cached.
    announceSessionsChanged(ctx.events);
  }
  return toPoolToken(row);
}

/** Looks a presented pool token up; unknown and revoked tokens are distinct 401s. */
export async function authenticatePoolToken(
  ctx: StoreContext,
  token: string,
): Promise<{ tokenId: string; pool: Pool }> {
  const row = await ctx.db
    .selectFrom("pool_tokens")
    .innerJoin("pools", "pools.id", "pool_tokens.pool_id")
    .select([
      "pool_tokens.id as tokenId",
      "pool_tokens.revoked_at",
      "pools.id",
      "pools.name",
      "pools.kind",
      "pools.created_at",
    ])
    .where("pool_tokens.token_hash", "=", hashToken(token))
    .executeTakeFirst();
  if (!row)
    throw new DroverError("unauthorized", "unknown pool token: create one with `drover token create --pool <pool>`");
  if (row.revoked_at !== null)
    throw new DroverError("token_revoked", "this pool token was revoked; give the agent a new one");
  await ctx.db.updateTable("pool_tokens").set({ last_used_at: ctx.now() }).where("id", "=", row.tokenId).execute();
  return { tokenId: row.tokenId, pool: toPool(row) };
}

/**
 * Refuses work of one kind to a pool of the other: run jobs go to `runs` pools only, VCS tasks
 * to `vcs` pools only, whoever asks (a workspace placed in a pool, an agent polling).
 */
export function requirePoolKind(pool: Pick<Pool, "name" | "kind">, kind: PoolKind, what: string): void {
  if (pool.kind === kind) return;
  throw new DroverError("forbidden", `pool ${pool.name} is a ${pool.kind} pool: ${what} needs a ${kind} pool`, {
    hint:
      kind === "vcs"
        ? "Create one with `drover pool create <name> --kind vcs`."
        : "VCS agent pools take VCS tasks only; use a runs pool (`drover pool create <name>`).",
  });
}

/** Kinds by pool id, per database: a pool's kind never changes, so every poll need not read it. */
const kinds = new WeakMap<StoreContext["db"], Map<string, Pick<Pool, "name" | "kind">>>();

/** The kind of a pool by id (a VCS agent's or run agent's session names its pool by id). */
export async function poolKindOf(ctx: StoreContext, poolId: string): Promise<Pick<Pool, "name" | "kind">> {
  let known = kinds.get(ctx.db);
  if (!known) kinds.set(ctx.db, (known = new Map()));
  const cached = known.get(poolId);
  if (cached) return cached;
  const row = await ctx.db.selectFrom("pools").select(["name", "kind"]).where("id", "=", poolId).executeTakeFirst();
  if (!row) throw new DroverError("not_found", `no pool ${JSON.stringify(poolId)}`);
  if (known.size > 10_000) known.clear();
  known.set(poolId, row);
  return row;
}
