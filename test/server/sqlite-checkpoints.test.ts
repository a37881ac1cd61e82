import assert from "node:assert/strict";
import { existsSync, statSync } from "node:fs";
import { test } from "node:test";
import { sql } from "kysely";
import { backstopPages, checkpointEveryBytes, openDatabase } from "@drover/server";
import { createTestDatabase } from "../support/databases.js";
import { eventually } from "../support/fault-runs.js";

// SQLite's checkpoints (copying the write-ahead log into the database file, with two fsyncs)
// run on a worker thread, not on the server's event loop after every 4 MiB of commits.

test("SQLite: the write-ahead log is copied into the database by the background checkpointer; the server's connection never does it itself", async () => {
  const database = await createTestDatabase("sqlite");
  const path = database.location.kind === "sqlite" ? database.location.path : "";
  try {
    let db = await openDatabase(database.location);
    const [setting] = (await sql<{ wal_autocheckpoint: number }>`pragma wal_autocheckpoint`.execute(db.kysely)).rows;
    assert.equal(setting?.wal_autocheckpoint, backstopPages, "the main connection's own checkpoint is only a backstop");
    await sql`create table blobs (n integer primary key, data blob not null)`.execute(db.kysely);
    const mib = 16;
    assert.ok(mib * 1024 * 1024 >= 2 * checkpointEveryBytes && mib * 256 < backstopPages, "more than the checkpoint step, less than the backstop");
    const before = statSync(path).size;
    for (let n = 0; n < mib; n++) {
      await sql`insert into blobs (n, data) values (${n}, ${Buffer.alloc(1024 * 1024, n)})`.execute(db.kysely);
    }
    // Only a checkpoint writes to the database file; the backstop is far above what was written.
    await eventually("the log copied into the database file", async () => (statSync(path).size - before >= (mib - checkpointEveryBytes / 1024 / 1024) * 1024 * 1024 ? true : undefined));
    await db.close();
    assert.equal(existsSync(`${path}-wal`), false, "the last connection to close removed the log");
    db = await openDatabase(database.location);
    const rows = (await sql<{ n: number; data: Buffer }>`select n, data from blobs order by n`.execute(db.kysely)).rows;
    assert.deepEqual(rows.map((r) => r.n), [...Array(mib).keys()]);
    for (const r of rows) assert.ok(r.data.equals(Buffer.alloc(1024 * 1024, r.n)), `blob ${r.n} whole after the restart`);
    await db.close();
  } finally {
    await database.drop();
  }
});
