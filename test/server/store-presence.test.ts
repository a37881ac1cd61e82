import assert from "node:assert/strict";
import { describe, test } from "node:test";
import { store, type StoreContext } from "@drover/server";
import { backends } from "../support/databases.js";
import { useStoreDatabase } from "../support/store-database.js";
import { loggingStatements } from "../support/statement-log.js";

// Coalesced presence (store/presence.ts) with more agents than one SQLite statement takes:
// every sighting written, job counts kept where a long-poll did not report one; on PostgreSQL
// one statement (unnest of three arrays) whatever the number of agents.

for (const backend of backends) {
  describe(`agent presence at scale: ${backend}`, () => {
    let ctx: StoreContext;
    let clock = 1_700_000_000_000;
    useStoreDatabase(
      backend,
      () => clock,
      (_db, opened) => (ctx = opened),
    );

    test("1,200 agents' sightings in one flush: all written, in one statement on PostgreSQL", async () => {
      const pool = await store.createPool(ctx, "fleet");
      const tok = await store.createPoolToken(ctx, pool.id, "t", "http://drover.test");
      const ids: string[] = [];
      for (let i = 0; i < 1200; i++)
        ids.push(
          (
            await store.registerAgent(ctx, {
              poolId: pool.id,
              poolTokenId: tok.id,
              name: `a${i}`,
              version: "t",
              driver: "local",
              capacity: 3,
            })
          ).agent.id,
        );
      const logged = loggingStatements(ctx);
      const presence = new store.AgentPresence(logged.ctx);
      clock += 30_000;
      ids.forEach((id, i) => (i % 2 === 0 ? presence.record(id, i % 3) : presence.record(id, null)));
      await presence.flush();
      const updates = logged.statements.filter((s) => /^update "?agents"?/i.test(s.trim()));
      assert.equal(updates.length, backend === "postgres" ? 1 : 3);
      const rows = new Map((await store.listAgents(ctx, pool.id)).map((a) => [a.id, a]));
      ids.forEach((id, i) => {
        const a = rows.get(id)!;
        assert.equal(a.lastSeenAt, new Date(clock).toISOString(), `agent ${i} seen`);
        assert.equal(a.runningJobs, i % 2 === 0 ? i % 3 : 0, `agent ${i}'s job count`);
      });
      await presence.stop();
    });
  });
}
