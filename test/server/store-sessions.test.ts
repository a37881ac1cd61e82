import assert from "node:assert/strict";
import { after, before, describe, test } from "node:test";
import pg from "pg";
import { pino } from "pino";
import { DroverError } from "@drover/protocol";
import {
  loadServerConfig,
  localEventBus,
  openDatabase,
  postgresEventBus,
  startServer,
  store,
  type Db,
  type EventBus,
  type StoreContext,
} from "@drover/server";
import { rawTarGz } from "../support/archives.js";
import { backends, createTestDatabase, type TestDatabase } from "../support/databases.js";
import { useStoreDatabase } from "../support/store-database.js";
import { loggingStatements } from "../support/statement-log.js";
import { workspaceWithConfiguration } from "../support/store-fixtures.js";

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
const archive = rawTarGz([{ path: "main.tf", content: "" }]);
const quiet = pino({ level: "silent" });

/** Resolves once `check` holds; fails after `timeoutMs` (a bound far above what is expected, not a measurement). */
async function waitUntil(what: string, check: () => boolean | Promise<boolean>, timeoutMs = 20_000): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  while (!(await check())) {
    if (Date.now() > deadline) assert.fail(`timed out waiting until ${what}`);
    await new Promise((r) => setTimeout(r, 20));
  }
}

for (const backend of backends) {
  describe(`session cache: ${backend}`, () => {
    let db: Db;
    let base: StoreContext;
    /** The wall clock the store reads (ctx.now), and the monotonic one the cache ages its entries by. */
    let clock = 1_700_000_000_000;
    let mono = 0;
    const advance = (ms: number) => {
      clock += ms;
      mono += ms;
    };
    let counter = 0;
    const unique = (p: string) => `${p}${++counter}`;

    useStoreDatabase(
      backend,
      () => clock,
      (opened, context) => {
        db = opened;
        base = context;
      },
    );

    /** A store context with its own event bus, session cache and statement log; an agent registered in a fresh pool. */
    async function setup(name = unique("agent")) {
      const logged = loggingStatements({ ...base, events: localEventBus() });
      const ctx = logged.ctx;
      const sessions = store.createSessionCache(ctx, maxAgeMs, keepMs, () => mono);
      ctx.sessions = sessions;
      const pool = await store.createPool(ctx, unique("pool"));
      const tok = await store.createPoolToken(ctx, pool.id, "t", "http://drover.test");
      const reg = await store.registerAgent(ctx, {
        poolId: pool.id,
        poolTokenId: tok.id,
        name,
        version: "t",
        driver: "local",
        capacity: 1,
      });
      const sessionReads = () =>
        logged.statements.filter((s) => /from "agents" inner join "pool_tokens"/.test(s)).length;
      return { ctx, sessions, pool, tok, reg, sessionReads };
    }

    test("a checked session answers from the cache until it is older than the maximum age", async () => {
      const { ctx, sessions, reg, sessionReads } = await setup();
      assert.equal((await store.authenticateSession(ctx, reg.sessionToken)).id, reg.agent.id);
      assert.equal(sessionReads(), 1);
      assert.equal(sessions.size, 1);
      for (let i = 0; i < 5; i++) await store.authenticateSession(ctx, reg.sessionToken);
      assert.equal(sessionReads(), 1, "kept: no statement for later checks");
      advance(maxAgeMs + 1);
      await store.authenticateSession(ctx, reg.sessionToken);
      assert.equal(sessionReads(), 2, "too old: read again");
      // The secret is still compared on every request.
      await rejectsWith(
        store.authenticateSession(
          ctx,
          reg.sessionToken.replace(/.$/, (c) => (c === "a" ? "b" : "a")),
        ),
        "unauthorized",
      );
      await sessions.stop();
    });

    test("revoking the pool token refuses a cached session at once", async () => {
      const { ctx, sessions, tok, reg } = await setup();
      await store.authenticateSession(ctx, reg.sessionToken);
      await store.revokePoolToken(ctx, tok.id);
      await rejectsWith(store.authenticateSession(ctx, reg.sessionToken), "token_revoked");
      assert.equal(sessions.size, 0, "refusals are not kept");
      await sessions.stop();
    });

    test("a superseded, deregistered or lost agent is refused at once", async () => {
      const name = unique("same");
      const { ctx, sessions, pool, tok, reg } = await setup(name);
      await store.authenticateSession(ctx, reg.sessionToken);
      const second = await store.registerAgent(ctx, {
        poolId: pool.id,
        poolTokenId: tok.id,
        name,
        version: "t",
        driver: "local",
        capacity: 1,
      });
      await rejectsWith(store.authenticateSession(ctx, reg.sessionToken), "agent_lost");

      await store.authenticateSession(ctx, second.sessionToken);
      await store.deregisterAgent(ctx, second.agent.id);
      await rejectsWith(store.authenticateSession(ctx, second.sessionToken), "agent_lost");

      const third = await store.registerAgent(ctx, {
        poolId: pool.id,
        poolTokenId: tok.id,
        name: unique("silent"),
        version: "t",
        driver: "local",
        capacity: 1,
      });
      await store.authenticateSession(ctx, third.sessionToken);
      advance(61_000);
      assert.ok((await store.markSilentAgentsLost(ctx)) >= 1);
      await rejectsWith(store.authenticateSession(ctx, third.sessionToken), "agent_lost");
      await sessions.stop();
    });

    test("a change the cache is not told of is seen within the maximum age, or at the next refresh", async () => {
      const { ctx, sessions, tok, reg } = await setup();
      await store.authenticateSession(ctx, reg.sessionToken);
      // Another server process revoking, whose event never arrives: a write without the event.
      await db.kysely.updateTable("pool_tokens").set({ revoked_at: clock }).where("id", "=", tok.id).execute();
      await store.authenticateSession(ctx, reg.sessionToken);
      advance(maxAgeMs + 1);
      await rejectsWith(store.authenticateSession(ctx, reg.sessionToken), "token_revoked");

      const other = await setup();
      await store.authenticateSession(other.ctx, other.reg.sessionToken);
      await db.kysely.updateTable("agents").set({ state: "lost" }).where("id", "=", other.reg.agent.id).execute();
      advance(1_001);
      await other.sessions.refresh();
      assert.equal(other.sessions.size, 0, "the refresh dropped the refused session");
      await rejectsWith(store.authenticateSession(other.ctx, other.reg.sessionToken), "agent_lost");
      await sessions.stop();
      await other.sessions.stop();
    });

    test("the refresh keeps sessions in use fresh in one statement, and forgets unused ones", async () => {
      const { ctx, sessions, pool, tok, reg, sessionReads } = await setup();
      const more = await Promise.all(
        Array.from({ length: 9 }, () =>
          store.registerAgent(ctx, {
            poolId: pool.id,
            poolTokenId: tok.id,
            name: unique("fleet"),
            version: "t",
            driver: "local",
            capacity: 1,
          }),
        ),
      );
      const all = [reg, ...more];
      for (const r of all) await store.authenticateSession(ctx, r.sessionToken);
      const reads = sessionReads();
      for (let i = 0; i < 3; i++) {
        advance(maxAgeMs / 2);
        await sessions.refresh();
        for (const r of all) await store.authenticateSession(ctx, r.sessionToken);
      }
      assert.equal(sessionReads(), reads + 3, "one refresh statement per pass; no request read the database");
      advance(keepMs + 1);
      await sessions.refresh();
      assert.equal(sessions.size, 0, "unused for keepMs: forgotten");
      await sessions.stop();
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
      await sessions.stop();
    });

    test("a wall clock stepped back does not keep a session past its maximum age (entries age by a monotonic clock)", async () => {
      const { ctx, sessions, reg, sessionReads } = await setup();
      await store.authenticateSession(ctx, reg.sessionToken);
      assert.equal(sessionReads(), 1);
      // An NTP step or an operator moves the wall clock an hour back; the monotonic clock goes on.
      clock -= 3_600_000;
      mono += maxAgeMs + 1;
      await store.authenticateSession(ctx, reg.sessionToken);
      assert.equal(sessionReads(), 2, "older than the maximum age by the monotonic clock: read again");
      clock += 3_600_000;
      await sessions.stop();
    });

    test("a deregistration or a supersede drops only that agent's session; a read of it in flight is not kept", async () => {
      const name = unique("same");
      const { ctx, sessions, pool, tok, reg, sessionReads } = await setup(name);
      const register = (n: string) =>
        store.registerAgent(ctx, {
          poolId: pool.id,
          poolTokenId: tok.id,
          name: n,
          version: "t",
          driver: "local",
          capacity: 1,
        });
      const [a, b] = [await register(unique("keep")), await register(unique("leave"))];
      for (const r of [reg, a, b]) await store.authenticateSession(ctx, r.sessionToken);
      assert.equal(sessions.size, 3);
      const reads = sessionReads();

      await store.deregisterAgent(ctx, b.agent.id);
      assert.equal(sessions.size, 2, "only the deregistered agent's session is dropped");
      await rejectsWith(store.authenticateSession(ctx, b.sessionToken), "agent_lost");
      const successor = await register(name);
      assert.equal(sessions.size, 1, "only the superseded agent's session is dropped");
      await rejectsWith(store.authenticateSession(ctx, reg.sessionToken), "agent_lost");
      await store.authenticateSession(ctx, a.sessionToken);
      assert.equal(sessionReads(), reads + 2, "the other agent still answers from the cache");

      // Two reads in flight; one agent's change comes in before they answer: only the other is kept.
      sessions.invalidate();
      const checks = [
        store.authenticateSession(ctx, a.sessionToken),
        store.authenticateSession(ctx, successor.sessionToken),
      ];
      sessions.drop(successor.agent.id);
      await Promise.all(checks);
      assert.equal(sessions.size, 1);
      assert.ok(sessions.fresh(a.agent.id), "the read of the unchanged agent is kept");
      assert.equal(sessions.fresh(successor.agent.id), undefined, "the read across the change is not");
      await sessions.stop();
    });

    test("a claim re-checks the agent: a cached session whose token was revoked elsewhere gets no job", async () => {
      const { ctx, sessions, pool, tok, reg } = await setup();
      const { ws, cv } = await workspaceWithConfiguration(ctx, unique("ws"), pool.id, archive);
      await store.createRun(ctx, {
        workspace: ws.id,
        configurationVersionId: cv.id,
        planOnly: false,
        isDestroy: false,
        message: "",
      });
      const [queued] = await ctx.db.selectFrom("jobs").select("id").where("pool_id", "=", pool.id).execute();
      assert.ok(queued);
      await store.authenticateSession(ctx, reg.sessionToken);
      // Another server process revokes the token; its event has not arrived (in flight or lost).
      await db.kysely.updateTable("pool_tokens").set({ revoked_at: clock }).where("id", "=", tok.id).execute();
      const agent = await store.authenticateSession(ctx, reg.sessionToken);
      await rejectsWith(store.pollForJob(ctx, agent, 0), "token_revoked");
      assert.equal((await store.getJob(ctx, queued.id)).status, "queued", "the job stays queued");

      // Likewise an agent declared lost (or deregistered, superseded) by another process.
      await db.kysely.updateTable("pool_tokens").set({ revoked_at: null }).where("id", "=", tok.id).execute();
      await db.kysely.updateTable("agents").set({ state: "lost" }).where("id", "=", reg.agent.id).execute();
      await rejectsWith(store.claimNextJob(ctx, agent), "agent_lost");
      assert.equal((await store.getJob(ctx, queued.id)).status, "queued");

      // The agent as it should be claims the job.
      await db.kysely.updateTable("agents").set({ state: "online" }).where("id", "=", reg.agent.id).execute();
      assert.equal((await store.claimNextJob(ctx, agent))?.jobId, queued.id);
      await sessions.stop();
    });
  });
}

/** A session row as the database would answer it. */
function sessionRow(id: string): store.SessionRow {
  return {
    id,
    pool_id: "p",
    pool_token_id: "t",
    name: id,
    version: "t",
    driver: "local",
    capacity: 1,
    running_jobs: 0,
    session_hash: "h",
    state: "online",
    registered_at: 0,
    last_seen_at: 0,
    revoked_at: null,
  };
}

test("stopping the cache waits for a refresh in progress and issues no further batch", async () => {
  let mono = 0;
  const batches: string[][] = [];
  let release = () => {};
  const read = (ids: string[]) => {
    batches.push(ids);
    return new Promise<Map<string, store.SessionRow>>((resolve) => {
      release = () => resolve(new Map(ids.map((id) => [id, sessionRow(id)])));
    });
  };
  const sessions = new store.SessionCache({ events: localEventBus() }, read, maxAgeMs, keepMs, () => mono);
  // Two batches' worth (500 agents each).
  for (let i = 0; i < 600; i++) sessions.keep(`agent-${i}`, sessionRow(`agent-${i}`), sessions.mark());
  mono += maxAgeMs;
  const refreshing = sessions.refresh();
  assert.equal(batches.length, 1, "the first batch is being read");
  let stopped = false;
  const stopping = sessions.stop().then(() => (stopped = true));
  await new Promise((r) => setImmediate(r));
  assert.equal(stopped, false, "stop waits for the batch in flight");
  release();
  await stopping;
  await refreshing;
  assert.equal(batches.length, 1, "no batch after stop (the database may be closing)");
  assert.equal(sessions.size, 0);
  await sessions.refresh();
  assert.equal(batches.length, 1, "a stopped cache does not refresh");
});

describe("session events between server processes: postgres", () => {
  let database: TestDatabase;
  const opened: Array<{ db: Db; events: EventBus }> = [];
  let counter = 0;
  const unique = (p: string) => `${p}${++counter}`;

  before(async () => {
    database = await createTestDatabase("postgres");
  });
  after(async () => {
    for (const { db, events } of opened) {
      await events.close();
      await db.close();
    }
    await database.drop();
  });

  /** One server process's store: its own database pool and PostgreSQL event bus (LISTEN/NOTIFY). */
  async function processStore(): Promise<StoreContext> {
    const db = await openDatabase(database.location);
    assert.ok(db.postgres);
    const events = await postgresEventBus(db.postgres.pool, db.postgres.settings, quiet);
    opened.push({ db, events });
    return {
      db: db.kysely,
      dialect: db.dialect,
      events,
      now: () => Date.now(),
      settings: { leaseTtlMs: 30_000, agentTtlMs: 60_000, heartbeatIntervalMs: 10_000 },
    };
  }

  test("a deregistration and a revocation on one process reach the other's cache through NOTIFY", async () => {
    const [a, b] = [await processStore(), await processStore()];
    // B's entries never age (a frozen clock): only the event can refuse them.
    const sessions = store.createSessionCache(b, maxAgeMs, keepMs, () => 0);
    b.sessions = sessions;
    const pool = await store.createPool(a, unique("pool"));
    const tok = await store.createPoolToken(a, pool.id, "t", "http://drover.test");
    const other = await store.createPoolToken(a, pool.id, "t2", "http://drover.test");
    const register = (tokenId: string) =>
      store.registerAgent(a, {
        poolId: pool.id,
        poolTokenId: tokenId,
        name: unique("agent"),
        version: "t",
        driver: "local",
        capacity: 1,
      });
    const heard = new Set<string>();
    const stopHearing = b.events.subscribeTopic("sessions-changed", (key) => heard.add(key));
    const [leaving, revoked, staying] = [await register(tok.id), await register(tok.id), await register(other.id)];
    // A registration announces its agent; heard by B during B's read of that agent, it would
    // rightly drop the entry just read. B caches once it has heard all three.
    await waitUntil("B hears the registrations", () => [leaving, revoked, staying].every((r) => heard.has(r.agent.id)));
    stopHearing();
    for (const r of [leaving, revoked, staying]) await store.authenticateSession(b, r.sessionToken);
    assert.equal(sessions.size, 3);

    await store.deregisterAgent(a, leaving.agent.id);
    await waitUntil("B drops the deregistered agent's session", () => sessions.fresh(leaving.agent.id) === undefined);
    assert.equal(sessions.size, 2, "the event names the agent: the others stay cached");
    await rejectsWith(store.authenticateSession(b, leaving.sessionToken), "agent_lost");

    await store.revokePoolToken(a, tok.id);
    await waitUntil("B refuses the revoked token's agent", () =>
      store.authenticateSession(b, revoked.sessionToken).then(
        () => false,
        (err: unknown) => err instanceof DroverError && err.code === "token_revoked",
      ),
    );
    assert.equal((await store.authenticateSession(b, staying.sessionToken)).id, staying.agent.id);
    await sessions.stop();
  });

  test("a start that fails after its timers started closes the database and the event listener", async () => {
    const failing = await createTestDatabase("postgres");
    const watcher = new pg.Client({ connectionString: failing.url });
    try {
      // Migrated, then the user tokens table made unreadable: the start fails counting tokens.
      const db = await openDatabase(failing.location);
      await db.kysely.schema.alterTable("user_tokens").renameTo("user_tokens_gone").execute();
      await db.close();
      const config = loadServerConfig({ env: { DROVER_PORT: "0", DROVER_DATABASE_URL: failing.url } });
      await assert.rejects(startServer(config, { logger: quiet }), /user_tokens|relation/);
      await watcher.connect();
      const others = async () => {
        const res = await watcher.query<{ n: string }>(
          "select count(*) as n from pg_stat_activity where datname = current_database() and pid <> pg_backend_pid()",
        );
        return Number(res.rows[0]!.n);
      };
      // Closed on the failure path, not by an idle timeout: the LISTEN connection never idles out.
      await waitUntil("no connection of the failed server remains", async () => (await others()) === 0);
    } finally {
      await watcher.end().catch(() => undefined);
      await failing.drop();
    }
  });
});
