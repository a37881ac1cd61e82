import assert from "node:assert/strict";
import { after, before, describe, test } from "node:test";
import { DroverError } from "@drover/protocol";
import { localEventBus, openDatabase, store, type Db, type StoreContext } from "@drover/server";
import { backends, createTestDatabase, type TestDatabase } from "../support/databases.js";
import { loggingStatements } from "../support/statement-log.js";

/*
 * The session cache (store/sessions.ts, decision 0038) on both databases: kept sessions answer
 * without a statement, every change made through the store refuses at once, a change the cache
 * was not told of (another server process whose event was lost) within its maximum age.
 */

async function rejectsWith(promise: Promise<unknown>, code: string): Promise<void> {
  await assert.rejects(promise, (err: unknown) => err instanceof DroverError && err.code === code);
}

const maxAgeMs = 3_000;
const keepMs = 60_000;

for (const backend of backends) {
  describe(`session cache: ${backend}`, () => {
    let database: TestDatabase;
    let db: Db;
    let base: StoreContext;
    let clock = 1_700_000_000_000;
    let counter = 0;
    const unique = (p: string) => `${p}${++counter}`;

    before(async () => {
      database = await createTestDatabase(backend);
      db = await openDatabase(database.location);
      base = {
        db: db.kysely,
        dialect: db.dialect,
        events: localEventBus(),
        now: () => clock,
        settings: { leaseTtlMs: 30_000, agentTtlMs: 60_000, heartbeatIntervalMs: 10_000 },
      };
    });
    after(async () => {
      await db.close();
      await database.drop();
    });

    /** A store context with its own event bus, session cache and statement log; an agent registered in a fresh pool. */
    async function setup(name = unique("agent")) {
      const logged = loggingStatements({ ...base, events: localEventBus() });
      const ctx = logged.ctx;
      const sessions = store.createSessionCache(ctx, maxAgeMs, keepMs);
      ctx.sessions = sessions;
      const pool = await store.createPool(ctx, unique("pool"));
      const tok = await store.createPoolToken(ctx, pool.id, "t", "http://drover.test");
      const reg = await store.registerAgent(ctx, { poolId: pool.id, poolTokenId: tok.id, name, version: "t", driver: "local", capacity: 1 });
      const sessionReads = () => logged.statements.filter((s) => /from "agents" inner join "pool_tokens"/.test(s)).length;
      return { ctx, sessions, pool, tok, reg, sessionReads };
    }

    test("a checked session answers from the cache until it is older than the maximum age", async () => {
      const { ctx, sessions, reg, sessionReads } = await setup();
      assert.equal((await store.authenticateSession(ctx, reg.sessionToken)).id, reg.agent.id);
      assert.equal(sessionReads(), 1);
      assert.equal(sessions.size, 1);
      for (let i = 0; i < 5; i++) await store.authenticateSession(ctx, reg.sessionToken);
      assert.equal(sessionReads(), 1, "kept: no statement for later checks");
      clock += maxAgeMs + 1;
      await store.authenticateSession(ctx, reg.sessionToken);
      assert.equal(sessionReads(), 2, "too old: read again");
      // The secret is still compared on every request.
      await rejectsWith(store.authenticateSession(ctx, reg.sessionToken.replace(/.$/, (c) => (c === "a" ? "b" : "a"))), "unauthorized");
      sessions.stop();
    });

    test("revoking the pool token refuses a cached session at once", async () => {
      const { ctx, sessions, tok, reg } = await setup();
      await store.authenticateSession(ctx, reg.sessionToken);
      await store.revokePoolToken(ctx, tok.id);
      await rejectsWith(store.authenticateSession(ctx, reg.sessionToken), "token_revoked");
      assert.equal(sessions.size, 0, "refusals are not kept");
      sessions.stop();
    });

    test("a superseded, deregistered or lost agent is refused at once", async () => {
      const name = unique("same");
      const { ctx, sessions, pool, tok, reg } = await setup(name);
      await store.authenticateSession(ctx, reg.sessionToken);
      const second = await store.registerAgent(ctx, { poolId: pool.id, poolTokenId: tok.id, name, version: "t", driver: "local", capacity: 1 });
      await rejectsWith(store.authenticateSession(ctx, reg.sessionToken), "agent_lost");

      await store.authenticateSession(ctx, second.sessionToken);
      await store.deregisterAgent(ctx, second.agent.id);
      await rejectsWith(store.authenticateSession(ctx, second.sessionToken), "agent_lost");

      const third = await store.registerAgent(ctx, { poolId: pool.id, poolTokenId: tok.id, name: unique("silent"), version: "t", driver: "local", capacity: 1 });
      await store.authenticateSession(ctx, third.sessionToken);
      clock += 61_000;
      assert.ok((await store.markSilentAgentsLost(ctx)) >= 1);
      await rejectsWith(store.authenticateSession(ctx, third.sessionToken), "agent_lost");
      sessions.stop();
    });

    test("a change the cache is not told of is seen within the maximum age, or at the next refresh", async () => {
      const { ctx, sessions, tok, reg } = await setup();
      await store.authenticateSession(ctx, reg.sessionToken);
      // Another server process revoking, whose event never arrives: a write without the event.
      await db.kysely.updateTable("pool_tokens").set({ revoked_at: clock }).where("id", "=", tok.id).execute();
      await store.authenticateSession(ctx, reg.sessionToken);
      clock += maxAgeMs + 1;
      await rejectsWith(store.authenticateSession(ctx, reg.sessionToken), "token_revoked");

      const other = await setup();
      await store.authenticateSession(other.ctx, other.reg.sessionToken);
      await db.kysely.updateTable("agents").set({ state: "lost" }).where("id", "=", other.reg.agent.id).execute();
      clock += 1_001;
      await other.sessions.refresh();
      assert.equal(other.sessions.size, 0, "the refresh dropped the refused session");
      await rejectsWith(store.authenticateSession(other.ctx, other.reg.sessionToken), "agent_lost");
      sessions.stop();
      other.sessions.stop();
    });

    test("the refresh keeps sessions in use fresh in one statement, and forgets unused ones", async () => {
      const { ctx, sessions, pool, tok, reg, sessionReads } = await setup();
      const more = await Promise.all(
        Array.from({ length: 9 }, () => store.registerAgent(ctx, { poolId: pool.id, poolTokenId: tok.id, name: unique("fleet"), version: "t", driver: "local", capacity: 1 })),
      );
      const all = [reg, ...more];
      for (const r of all) await store.authenticateSession(ctx, r.sessionToken);
      const reads = sessionReads();
      for (let i = 0; i < 3; i++) {
        clock += maxAgeMs / 2;
        await sessions.refresh();
        for (const r of all) await store.authenticateSession(ctx, r.sessionToken);
      }
      assert.equal(sessionReads(), reads + 3, "one refresh statement per pass; no request read the database");
      clock += keepMs + 1;
      await sessions.refresh();
      assert.equal(sessions.size, 0, "unused for keepMs: forgotten");
      sessions.stop();
    });

    test("a read in flight across a change is not kept; a wake-all or the event empties the cache", async () => {
      const { ctx, sessions, reg } = await setup();
      // The check's read is issued, then a change is announced before it answers: answered, not kept.
      const checking = store.authenticateSession(ctx, reg.sessionToken);
      sessions.invalidate();
      assert.equal((await checking).id, reg.agent.id);
      assert.equal(sessions.size, 0);
      await store.authenticateSession(ctx, reg.sessionToken);
      assert.equal(sessions.size, 1);
      ctx.events.wakeAll();
      assert.equal(sessions.size, 0, "wake-all (database lost, events missed) drops every session");
      await store.authenticateSession(ctx, reg.sessionToken);
      // What another server process's change delivers (on PostgreSQL through NOTIFY).
      ctx.events.publish("sessions-changed", store.sessionsChangedKey);
      assert.equal(sessions.size, 0, "the event drops every session");
      sessions.stop();
    });
  });
}
