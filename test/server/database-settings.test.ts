import assert from "node:assert/strict";
import { createServer, type Socket } from "node:net";
import { after, before, test } from "node:test";
import { sql } from "kysely";
import { pino } from "pino";
import { loadServerConfig, startServer } from "@drover/server";
import { createTestDatabase, type TestDatabase } from "../support/databases.js";
import { routes } from "@drover/protocol";
import { client } from "../support/typed-api.js";
import { testServerDiagnostics } from "../support/processes.js";

// DROVER_DATABASE_CONNECT_TIMEOUT_SECONDS and DROVER_DATABASE_STATEMENT_TIMEOUT_SECONDS: every
// database call has a deadline, so a stuck database turns into a coded error, never a hang.

let database: TestDatabase;
before(async () => {
  database = await createTestDatabase("postgres");
});
after(() => database?.drop());

const quiet = pino({ level: "silent" });

test("the settings are read in seconds and bad values are refused with the variable's name", () => {
  const config = loadServerConfig({
    env: {
      DROVER_DATABASE_URL: "postgres://x@127.0.0.1/db",
      DROVER_DATABASE_CONNECT_TIMEOUT_SECONDS: "3",
      DROVER_DATABASE_STATEMENT_TIMEOUT_SECONDS: "7",
    },
  });
  assert.deepEqual(config.database, {
    kind: "postgres",
    url: "postgres://x@127.0.0.1/db",
    connectTimeoutMs: 3000,
    statementTimeoutMs: 7000,
  });
  const defaults = loadServerConfig({ env: { DROVER_DATABASE_URL: "postgres://x@127.0.0.1/db" } }).database;
  assert.deepEqual(defaults, {
    kind: "postgres",
    url: "postgres://x@127.0.0.1/db",
    connectTimeoutMs: 10_000,
    statementTimeoutMs: 60_000,
  });
  for (const [name, value] of [
    ["DROVER_DATABASE_CONNECT_TIMEOUT_SECONDS", "0"],
    ["DROVER_DATABASE_STATEMENT_TIMEOUT_SECONDS", "soon"],
  ] as const) {
    assert.throws(
      () => loadServerConfig({ env: { DROVER_DATABASE_URL: "postgres://x@127.0.0.1/db", [name]: value } }),
      new RegExp(name),
    );
  }
});

test("DROVER_DATABASE_STATEMENT_TIMEOUT_SECONDS: a statement running past it fails with database_unavailable; the server stays ready", async () => {
  const config = loadServerConfig({
    env: {
      DROVER_PORT: "0",
      DROVER_DATABASE_URL: database.url,
      DROVER_ADMIN_TOKEN: "drv_u_settings.0123456789abcdefghij0123456789ab",
      DROVER_DATABASE_STATEMENT_TIMEOUT_SECONDS: "1",
      ...testServerDiagnostics,
    },
  });
  const server = await startServer(config, { logger: quiet });
  try {
    const started = Date.now();
    await assert.rejects(sql`select pg_sleep(5)`.execute(server.store.db), (err: Error & { code?: string }) => {
      assert.equal(err.code, "database_unavailable");
      assert.match(err.message, /DROVER_DATABASE_STATEMENT_TIMEOUT_SECONDS/);
      return true;
    });
    assert.ok(Date.now() - started < 4_500, "cut off by the 1 s statement timeout, well before pg_sleep(5) ends");
    // One slow statement is not an outage.
    assert.equal((await client(server.url).call(routes.readyz, {})).status, "ready");
    await sql`select 1`.execute(server.store.db);
  } finally {
    await server.close();
  }
});

test("DROVER_DATABASE_CONNECT_TIMEOUT_SECONDS: a database that accepts but never answers fails the start with one clear line", async () => {
  const sockets: Socket[] = [];
  const silent = createServer((s) => sockets.push(s));
  await new Promise<void>((r) => silent.listen(0, "127.0.0.1", r));
  const address = silent.address();
  const port = typeof address === "object" && address ? address.port : 0;
  try {
    const config = loadServerConfig({
      env: {
        DROVER_PORT: "0",
        DROVER_DATABASE_URL: `postgres://x@127.0.0.1:${port}/db`,
        DROVER_DATABASE_CONNECT_TIMEOUT_SECONDS: "1",
      },
    });
    const started = Date.now();
    await assert.rejects(startServer(config, { logger: quiet }), (err: Error) => {
      assert.match(err.message, /^cannot open the database: .*timeout/i);
      assert.doesNotMatch(err.message, /\n/);
      return true;
    });
    assert.ok(Date.now() - started < 8_000, `gave up after ${Date.now() - started} ms with a 1 s connect timeout`);
  } finally {
    for (const s of sockets) s.destroy();
    silent.close();
  }
});
