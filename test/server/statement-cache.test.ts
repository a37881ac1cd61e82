import assert from "node:assert/strict";
import { test } from "node:test";
import BetterSqlite3 from "better-sqlite3";
import { Kysely, SqliteDialect, sql } from "kysely";
import { cachingStatements } from "@drover/server";

/** An in-memory SQLite whose `prepare` calls are counted, behind the statement cache. */
function counted(max?: number) {
  const raw = new BetterSqlite3(":memory:");
  let prepares = 0;
  const spy = { close: () => raw.close(), prepare: (q: string) => (prepares++, raw.prepare(q)) };
  const db = new Kysely<{ t: { id: number; v: string } }>({
    dialect: new SqliteDialect({ database: cachingStatements(spy, max) }),
  });
  return { db, prepares: () => prepares };
}

test("statement cache: a repeated query is prepared once and answers with the current rows", async () => {
  const { db, prepares } = counted();
  await sql`create table t (id integer primary key, v text)`.execute(db);
  const insert = (id: number) =>
    db
      .insertInto("t")
      .values({ id, v: `v${id}` })
      .execute();
  const read = () => db.selectFrom("t").select(["id", "v"]).orderBy("id").execute();
  await insert(1);
  const before = prepares();
  await insert(2);
  assert.deepEqual(await read(), [
    { id: 1, v: "v1" },
    { id: 2, v: "v2" },
  ]);
  await insert(3);
  assert.deepEqual(
    (await read()).map((r) => r.id),
    [1, 2, 3],
    "a kept statement sees rows written after it was prepared",
  );
  assert.equal(
    prepares() - before,
    1,
    "only the first read was prepared; the insert and the second read reused theirs",
  );
  // A stream holds the connection until it ends; the same statement then runs again.
  const streamed: number[] = [];
  for await (const r of db.selectFrom("t").select(["id", "v"]).orderBy("id").stream()) streamed.push(r.id);
  assert.deepEqual(streamed, [1, 2, 3]);
  assert.equal((await read()).length, 3);
  await db.destroy();
});

test("statement cache: at most `max` statements are kept, the least recently used leave first", async () => {
  const { db, prepares } = counted(2);
  await sql`create table t (id integer primary key, v text)`.execute(db);
  // Three queries with three SQL texts.
  const a = () => db.selectFrom("t").select(["id"]).execute();
  const b = () => db.selectFrom("t").select(["v"]).execute();
  const c = () => db.selectFrom("t").select(["id", "v"]).execute();
  const start = prepares();
  await a();
  await b();
  await a(); // kept (a is now the most recently used)
  assert.equal(prepares() - start, 2);
  await c(); // evicts b, the least recently used
  await a(); // still kept
  assert.equal(prepares() - start, 3);
  await b(); // prepared again
  assert.equal(prepares() - start, 4);
  await db.destroy();
});

test("statement cache: a statement with a long in-list is not kept, so batches of every size leave the kept ones alone", async () => {
  const { db, prepares } = counted(2);
  await sql`create table t (id integer primary key, v text)`.execute(db);
  const a = () => db.selectFrom("t").select(["id"]).execute();
  const batch = (n: number) =>
    db
      .selectFrom("t")
      .select(["v"])
      .where(
        "id",
        "in",
        Array.from({ length: n }, (_, i) => i),
      )
      .execute();
  const start = prepares();
  await a();
  for (const n of [40, 41, 42, 40]) await batch(n);
  assert.equal(prepares() - start, 5, "each long batch is prepared afresh, even a size seen before");
  await a();
  assert.equal(prepares() - start, 5, "the short statement is still kept after four batches in a cache of two");
  await batch(3);
  await batch(3);
  assert.equal(prepares() - start, 6, "a short in-list is kept like any statement");
  await db.destroy();
});
