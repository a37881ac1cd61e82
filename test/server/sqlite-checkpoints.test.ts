import assert from "node:assert/strict";
import { existsSync, statSync } from "node:fs";
import { createRequire } from "node:module";
import { test } from "node:test";
import { sql } from "kysely";
import { Worker } from "node:worker_threads";
import BetterSqlite3 from "better-sqlite3";
import { pino, type Logger } from "pino";
import {
  backstopPages,
  checkpointEveryBytes,
  openDatabase,
  startCheckpointer,
  startCheckpointWorker,
  walSizeLimitBytes,
} from "@drover/server";
import { createTestDatabase } from "../support/databases.js";
import { eventually } from "../support/fault-runs.js";

const require = createRequire(import.meta.url);

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
    assert.ok(
      mib * 1024 * 1024 >= 2 * checkpointEveryBytes && mib * 256 < backstopPages,
      "more than the checkpoint step, less than the backstop",
    );
    const before = statSync(path).size;
    for (let n = 0; n < mib; n++) {
      await sql`insert into blobs (n, data) values (${n}, ${Buffer.alloc(1024 * 1024, n)})`.execute(db.kysely);
    }
    // Only a checkpoint writes to the database file; the backstop is far above what was written.
    await eventually("the log copied into the database file", async () =>
      statSync(path).size - before >= (mib - checkpointEveryBytes / 1024 / 1024) * 1024 * 1024 ? true : undefined,
    );
    // Had the worker stopped, the main connection would be back at SQLite's 1,000 pages and
    // would have copied the log itself: the backstop still in place says the worker did it.
    const [after] = (await sql<{ wal_autocheckpoint: number }>`pragma wal_autocheckpoint`.execute(db.kysely)).rows;
    assert.equal(after?.wal_autocheckpoint, backstopPages, "the worker is still the one checkpointing");
    await db.close();
    assert.equal(existsSync(`${path}-wal`), false, "the last connection to close removed the log");
    db = await openDatabase(database.location);
    const rows = (await sql<{ n: number; data: Buffer }>`select n, data from blobs order by n`.execute(db.kysely)).rows;
    assert.deepEqual(
      rows.map((r) => r.n),
      [...Array(mib).keys()],
    );
    for (const r of rows)
      assert.ok(r.data.equals(Buffer.alloc(1024 * 1024, r.n)), `blob ${r.n} whole after the restart`);
    await db.close();
  } finally {
    await database.drop();
  }
});

test("SQLite: the write-ahead log is cut back to the size limit once a write starts it over after a burst", async () => {
  const database = await createTestDatabase("sqlite");
  const path = database.location.kind === "sqlite" ? database.location.path : "";
  try {
    const db = await openDatabase(database.location);
    try {
      const [limit] = (await sql<{ journal_size_limit: number }>`pragma journal_size_limit`.execute(db.kysely)).rows;
      assert.equal(limit?.journal_size_limit, walSizeLimitBytes);
      await sql`create table blobs (n integer primary key, data blob not null)`.execute(db.kysely);
      // One transaction larger than the limit: the log must grow past it to hold it.
      const burst = walSizeLimitBytes / (1024 * 1024) + 8;
      await db.kysely.transaction().execute(async (tx) => {
        for (let n = 0; n < burst; n++)
          await sql`insert into blobs (n, data) values (${n}, ${Buffer.alloc(1024 * 1024, n)})`.execute(tx);
      });
      assert.ok(statSync(`${path}-wal`).size > walSizeLimitBytes, "the burst made the log larger than the limit");
      let n = burst;
      await eventually("the log cut back to the limit", async () => {
        await sql`insert into blobs (n, data) values (${n}, ${Buffer.alloc(256 * 1024, 1)})`.execute(db.kysely);
        n++;
        return statSync(`${path}-wal`).size <= walSizeLimitBytes ? true : undefined;
      });
    } finally {
      await db.close();
    }
  } finally {
    await database.drop();
  }
});

/** A logger whose warnings the test reads. */
function recordingLogger(): { log: Logger; warnings: string[] } {
  const warnings: string[] = [];
  const log = pino(
    { level: "warn" },
    { write: (line: string) => void warnings.push((JSON.parse(line) as { msg: string }).msg) },
  );
  return { log, warnings };
}

test("SQLite: if the checkpoint worker dies, the main connection checkpoints itself again, says so, and writes go on", async () => {
  const database = await createTestDatabase("sqlite");
  const path = database.location.kind === "sqlite" ? database.location.path : "";
  const sqlite = new BetterSqlite3(path);
  sqlite.pragma("journal_mode = WAL");
  let worker: Worker | undefined;
  const { log, warnings } = recordingLogger();
  const checkpointer = startCheckpointer(sqlite, path, log, {
    startWorker: (data) => (worker = startCheckpointWorker(data)),
  });
  try {
    assert.equal(sqlite.pragma("wal_autocheckpoint", { simple: true }), backstopPages);
    const db = checkpointer.counting(sqlite);
    db.prepare("create table blobs (n integer primary key, data blob not null)").run([]);
    await worker!.terminate();
    await eventually("the fallback to SQLite's own checkpoints", async () =>
      sqlite.pragma("wal_autocheckpoint", { simple: true }) === 1000 ? true : undefined,
    );
    assert.ok(
      warnings.some((w) => w.startsWith("background checkpoints stopped")),
      `a warning says so: ${JSON.stringify(warnings)}`,
    );
    for (let n = 0; n < 8; n++)
      db.prepare("insert into blobs (n, data) values (?, ?)").run([n, Buffer.alloc(1024 * 1024, n)]);
    assert.deepEqual(sqlite.prepare("select count(*) as c from blobs").get(), { c: 8 });
  } finally {
    await checkpointer.close();
    sqlite.close();
    await database.drop();
  }
});

test("SQLite: closing does not wait for ever on a checkpoint worker that never answers", async () => {
  const database = await createTestDatabase("sqlite");
  const path = database.location.kind === "sqlite" ? database.location.path : "";
  const sqlite = new BetterSqlite3(path);
  sqlite.pragma("journal_mode = WAL");
  const { log, warnings } = recordingLogger();
  // Stands for a worker stuck in a checkpoint (an fsync on a hung disk): it takes requests and never replies.
  const stuck = () => new Worker("require('node:worker_threads').parentPort.on('message', () => {});", { eval: true });
  const checkpointer = startCheckpointer(sqlite, path, log, { closeDeadlineMs: 50, startWorker: stuck });
  try {
    await checkpointer.close();
    assert.ok(
      warnings.some((w) => w.startsWith("the checkpoint worker did not close its connection in time")),
      `a warning says so: ${JSON.stringify(warnings)}`,
    );
  } finally {
    sqlite.close();
    await database.drop();
  }
});

test("SQLite: writes with returning (run by better-sqlite3 as readers) count towards the next checkpoint", async () => {
  const database = await createTestDatabase("sqlite");
  const path = database.location.kind === "sqlite" ? database.location.path : "";
  const sqlite = new BetterSqlite3(path);
  sqlite.pragma("journal_mode = WAL");
  // Answers every checkpoint request at once, and tells the test it was asked.
  const answering = () =>
    new Worker(
      "const { parentPort } = require('node:worker_threads'); parentPort.on('message', (m) => { if (m === 'close') { parentPort.postMessage({ kind: 'closed' }); parentPort.close(); } else parentPort.postMessage({ kind: 'done', walFrames: 0, copiedFrames: 0 }); });",
      { eval: true },
    );
  let worker: Worker | undefined;
  const checkpointer = startCheckpointer(sqlite, path, pino({ level: "silent" }), {
    startWorker: () => (worker = answering()),
  });
  try {
    let requests = 0;
    worker!.on("message", (m: { kind: string }) => void (m.kind === "done" && requests++));
    const db = checkpointer.counting(sqlite);
    db.prepare("create table blobs (n integer primary key, data blob not null)").run([]);
    const update = db.prepare(
      "insert into blobs (n, data) values (?, ?) on conflict (n) do update set data = excluded.data returning n",
    );
    assert.equal(update.reader, true, "better-sqlite3 runs it as a reader");
    for (let n = 0; n < (2 * checkpointEveryBytes) / (1024 * 1024); n++) update.all([n, Buffer.alloc(1024 * 1024, n)]);
    await eventually("a checkpoint requested", async () => (requests > 0 ? true : undefined));
  } finally {
    await checkpointer.close();
    sqlite.close();
    await database.drop();
  }
});

test("SQLite: a transaction that reads, then writes, while another connection holds the write lock waits for it (not SQLITE_BUSY)", async () => {
  // The checkpoint worker's RESTART checkpoints held SQLite's write lock (decision 0039). A
  // deferred transaction that has read cannot wait for that lock (SQLite answers SQLITE_BUSY at
  // once, busy_timeout or not): during a burst of writes (10,000 uploads in the dispatch bench)
  // that was a 500 "database is locked". Here a second connection holds the write lock; the
  // server's transactions begin immediate, so they wait for it (busy_timeout) like any write.
  const database = await createTestDatabase("sqlite");
  const path = database.location.kind === "sqlite" ? database.location.path : "";
  const db = await openDatabase(database.location);
  let holder: Worker | undefined;
  try {
    await sql`create table counters (n integer primary key, hits integer not null)`.execute(db.kysely);
    await sql`insert into counters (n, hits) values (1, 0)`.execute(db.kysely);
    // Holds the lock for 1 s, far inside the server's 5 s busy_timeout: the test does not
    // depend on how long, only on the lock being held when the transaction starts.
    holder = new Worker(
      `const Database = require(${JSON.stringify(require.resolve("better-sqlite3"))});
       const { parentPort, workerData } = require("node:worker_threads");
       const db = new Database(workerData);
       db.exec("begin immediate");
       parentPort.postMessage("locked");
       Atomics.wait(new Int32Array(new SharedArrayBuffer(4)), 0, 0, 1000);
       db.exec("commit");
       db.close();`,
      { eval: true, workerData: path },
    );
    await new Promise((resolve) => holder!.once("message", resolve));
    await db.kysely.transaction().execute(async (tx) => {
      const [row] = (await sql<{ hits: number }>`select hits from counters where n = 1`.execute(tx)).rows;
      await sql`update counters set hits = ${row!.hits + 1} where n = 1`.execute(tx);
    });
    const [after] = (await sql<{ hits: number }>`select hits from counters where n = 1`.execute(db.kysely)).rows;
    assert.equal(after?.hits, 1);
  } finally {
    if (holder)
      await new Promise((resolve) => (holder!.threadId === -1 ? resolve(undefined) : holder!.once("exit", resolve)));
    await db.close();
    await database.drop();
  }
});
