import {
  DroverError,
  hashToken,
  newId,
  newSessionToken,
  tokenMatches,
  tokenSubject,
  type Agent,
  type Driver,
} from "@drover/protocol";
import type { Selectable } from "kysely";
import type { AgentsTable } from "../db/schema.js";
import { CoalescedReads } from "./coalesced-reads.js";
import { iso, type StoreContext } from "./context.js";
import { announceSessionsChanged, monotonicMs, SessionCache, type SessionRow } from "./sessions.js";

/** Agent row states: online until it deregisters, is superseded by a namesake, or goes silent. */
export type AgentState = "online" | "deregistered" | "superseded" | "lost";

const toAgent = (r: Selectable<AgentsTable>): Agent => ({
  id: r.id,
  poolId: r.pool_id,
  name: r.name,
  version: r.version,
  driver: r.driver,
  capacity: r.capacity,
  runningJobs: r.running_jobs,
  status: r.state !== "online" ? "offline" : r.running_jobs > 0 ? "busy" : "idle",
  registeredAt: iso(r.registered_at),
  lastSeenAt: iso(r.last_seen_at),
});

export interface RegisterInput {
  poolId: string;
  poolTokenId: string;
  name: string;
  version: string;
  driver: Driver;
  capacity: number;
}

/**
 * Registers an agent and returns its session token. A name is unique among the pool's
 * online agents: a new registration supersedes an older one of the same name (a restarted
 * agent), whose session then gets `agent_lost`.
 */
export async function registerAgent(
  ctx: StoreContext,
  input: RegisterInput,
): Promise<{ agent: Agent; sessionToken: string }> {
  const id = newId("agent");
  const sessionToken = newSessionToken(id);
  const now = ctx.now();
  const row = {
    id,
    pool_id: input.poolId,
    pool_token_id: input.poolTokenId,
    name: input.name,
    version: input.version,
    driver: input.driver,
    capacity: input.capacity,
    running_jobs: 0,
    session_hash: hashToken(sessionToken),
    state: "online",
    registered_at: now,
    last_seen_at: now,
  };
  const superseded = await ctx.db.transaction().execute(async (trx) => {
    const rows = await trx
      .updateTable("agents")
      .set({ state: "superseded" })
      .where("pool_id", "=", input.poolId)
      .where("name", "=", input.name)
      .where("state", "=", "online")
      .returning("id")
      .execute();
    await trx.insertInto("agents").values(row).execute();
    return rows.map((r) => r.id);
  });
  // The new agent is announced too: pages that list agents show it at once.
  announceSessionsChanged(ctx.events, [...superseded, id]);
  return { agent: toAgent(row), sessionToken };
}

/** Agent ids per lookup statement: far below SQLite's and PostgreSQL's parameter limits. */
const sessionBatchSize = 500;

/*
 * Session checks, read together (coalesced-reads.ts). Every heartbeat and long-poll
 * authenticates its session, and with thousands of agents one query per request queued on the
 * database pool (5,000 agents on PostgreSQL: ~1,400 statements a second, heartbeats timing out
 * waiting for a connection). Each answer is still read from the database after its request
 * arrived, so a revoked token or a lost agent is refused exactly as before.
 */
function sessionReader(ctx: StoreContext): CoalescedReads<string, SessionRow> {
  return new CoalescedReads((ids) => readSessions(ctx, ids), sessionBatchSize);
}

/** The session rows of these agents (at most a few hundred ids), keyed by agent id. */
async function readSessions(ctx: Pick<StoreContext, "db">, ids: string[]): Promise<Map<string, SessionRow>> {
  const rows = await ctx.db
    .selectFrom("agents")
    .innerJoin("pool_tokens", "pool_tokens.id", "agents.pool_token_id")
    .selectAll("agents")
    .select("pool_tokens.revoked_at")
    .where("agents.id", "in", ids)
    .execute();
  return new Map(rows.map((r) => [r.id, r]));
}

/**
 * A session cache over this store (see store/sessions.ts): sessions are used for `maxAgeMs`
 * after they were read, and forgotten when unused for `keepMs`, both measured by `clock`
 * (monotonic milliseconds; tests inject one).
 */
export function createSessionCache(
  ctx: Pick<StoreContext, "db" | "events">,
  maxAgeMs: number,
  keepMs: number,
  clock: () => number = monotonicMs,
): SessionCache {
  return new SessionCache(ctx, (ids) => readSessions(ctx, ids), maxAgeMs, keepMs, clock);
}

const sessionReaders = new WeakMap<StoreContext["db"], CoalescedReads<string, SessionRow>>();

export async function authenticateSession(ctx: StoreContext, token: string): Promise<Agent> {
  const id = tokenSubject(token, "session");
  let reader = sessionReaders.get(ctx.db);
  if (!reader) sessionReaders.set(ctx.db, (reader = sessionReader(ctx)));
  let found = id ? ctx.sessions?.fresh(id) : undefined;
  if (id && !found) {
    const mark = ctx.sessions?.mark();
    found = await reader.get(id);
    if (mark) ctx.sessions!.keep(id, found, mark);
  }
  // Constant time: how long a comparison takes must not tell how much of a guessed session matched.
  const row = found && tokenMatches(token, found.session_hash) ? found : undefined;
  if (!row) throw new DroverError("unauthorized", "unknown agent session: register again with the pool token");
  if (row.revoked_at !== null)
    throw new DroverError("token_revoked", "the pool token this agent registered with was revoked");
  if (row.state !== "online") {
    throw new DroverError("agent_lost", `this agent registration is ${row.state}; register again`, {
      details: { state: row.state },
    });
  }
  return toAgent(row);
}

/** Records that an agent is alive and how many jobs it runs. */
export async function agentHeartbeat(ctx: StoreContext, agentId: string, runningJobs: number): Promise<void> {
  if (ctx.presence) return ctx.presence.record(agentId, runningJobs);
  await ctx.db
    .updateTable("agents")
    .set({ last_seen_at: ctx.now(), running_jobs: runningJobs })
    .where("id", "=", agentId)
    .where("state", "=", "online")
    .execute();
}

/** Marks an agent seen without changing its job count (each long-poll counts as a sign of life). */
export async function touchAgent(ctx: StoreContext, agentId: string): Promise<void> {
  if (ctx.presence) return ctx.presence.record(agentId, null);
  await ctx.db
    .updateTable("agents")
    .set({ last_seen_at: ctx.now() })
    .where("id", "=", agentId)
    .where("state", "=", "online")
    .execute();
}

export async function deregisterAgent(ctx: StoreContext, agentId: string): Promise<void> {
  await ctx.db
    .updateTable("agents")
    .set({ state: "deregistered", running_jobs: 0, last_seen_at: ctx.now() })
    .where("id", "=", agentId)
    .execute();
  announceSessionsChanged(ctx.events, [agentId]);
}

/** Agents of every pool or one pool, newest registration first; offline ones included. */
export async function listAgents(ctx: StoreContext, poolId?: string): Promise<Agent[]> {
  await ctx.presence?.flush();
  let q = ctx.db.selectFrom("agents").selectAll();
  if (poolId) q = q.where("pool_id", "=", poolId);
  const rows = await q.orderBy("registered_at", "desc").orderBy("id").execute();
  return rows.map(toAgent);
}

/** Declares agents silent for longer than the agent TTL lost; returns how many. */
export async function markSilentAgentsLost(ctx: StoreContext): Promise<number> {
  await ctx.presence?.flush();
  const cutoff = ctx.now() - ctx.settings.agentTtlMs;
  const result = await ctx.db
    .updateTable("agents")
    .set({ state: "lost", running_jobs: 0 })
    .where("state", "=", "online")
    .where("last_seen_at", "<", cutoff)
    .executeTakeFirst();
  const lost = Number(result.numUpdatedRows);
  if (lost > 0) announceSessionsChanged(ctx.events);
  return lost;
}

/** Forgets offline registrations older than `retainMs`. */
export async function pruneOfflineAgents(ctx: StoreContext, retainMs: number): Promise<void> {
  await ctx.db
    .deleteFrom("agents")
    .where("state", "!=", "online")
    .where("last_seen_at", "<", ctx.now() - retainMs)
    .execute();
}
