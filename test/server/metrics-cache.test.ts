import assert from "node:assert/strict";
import { after, before, describe, test } from "node:test";
import { routes } from "@drover/protocol";
import { createMetrics, store, type StoreContext } from "@drover/server";
import { backends } from "../support/databases.js";
import { startTestServer, type TestServer } from "../support/server.js";
import { loggingStatements } from "../support/statement-log.js";
import { useStoreDatabase } from "../support/store-database.js";
import { client } from "../support/typed-api.js";

// Review 2026-11-28 N12: /metrics reads its database gauges at most once per cache period, and
// shows pool names only to a user token or when DROVER_METRICS_PUBLIC_NAMES allows it.

for (const backend of backends) {
  describe(`metrics cache: ${backend}`, () => {
    let ctx: StoreContext;
    let clock = 1_700_000_000_000;
    useStoreDatabase(
      backend,
      () => clock,
      (_db, context) => {
        ctx = context;
      },
    );

    test("scrapes in a row run the aggregate statements once per cache period", async () => {
      await store.createPool(ctx, "cached-pool");
      const logged = loggingStatements(ctx);
      const metrics = createMetrics(logged.ctx, { cacheMs: 5_000, now: () => clock });
      const first = await metrics.registry.metrics();
      assert.match(first, /drover_queue_depth\{pool="cached-pool"\} 0/);
      const once = logged.statements.length;
      assert.ok(once > 0, "the first scrape reads the database");
      for (let i = 0; i < 5; i++) await metrics.registry.metrics();
      for (let i = 0; i < 5; i++) await metrics.anonymousRegistry.metrics();
      clock += 4_999;
      await metrics.registry.metrics();
      assert.equal(logged.statements.length, once, "ten more scrapes within the period read nothing");
      clock += 1;
      await metrics.registry.metrics();
      await metrics.anonymousRegistry.metrics();
      assert.equal(logged.statements.length, 2 * once, "the first scrape after the period reads once more");
    });
  });
}

describe("metrics: pool names", () => {
  let server: TestServer;
  let named: TestServer;
  let poolId: string;
  before(async () => {
    server = await startTestServer({ DROVER_METRICS_CACHE_SECONDS: "0" });
    named = await startTestServer({ DROVER_METRICS_PUBLIC_NAMES: "true" });
    poolId = (await server.api(routes.createPool, { body: { name: "secret-pool-name" } })).body.id;
    await named.api(routes.createPool, { body: { name: "public-pool-name" } });
  });
  after(async () => {
    await server?.stop();
    await named?.stop();
  });
  const scrape = async (s: TestServer, token?: string) =>
    (await client(s.url, token).call(routes.metrics, {})).toString("utf8");

  test("an anonymous scrape labels pools by id, never by name; a user token sees names", async () => {
    const anonymous = await scrape(server);
    assert.ok(!anonymous.includes("secret-pool-name"), "no pool name without a token");
    assert.match(anonymous, new RegExp(`drover_pool_desired_agents\\{pool="${poolId}"\\} 0`));
    assert.match(anonymous, /drover_http_request_duration_seconds/);
    assert.match(await scrape(server, server.adminToken), /drover_pool_desired_agents\{pool="secret-pool-name"\} 0/);
  });

  test("DROVER_METRICS_PUBLIC_NAMES=true shows names to anonymous scrapes", async () => {
    assert.match(await scrape(named), /drover_queue_depth\{pool="public-pool-name"\} 0/);
  });
});
