import type { SqliteDatabase, SqliteStatement } from "kysely";

/*
 * Prepared statements of SQLite, kept by their SQL text. Kysely prepares every query afresh,
 * and a server's CPU profile under 20 agents put better-sqlite3's `prepare` at 6% of the
 * server's time: the same few dozen statements (claim, heartbeat, log append) parsed and
 * planned thousands of times. Reusing a statement is safe because Kysely runs one query at a
 * time on its single SQLite connection; SQLite re-prepares a statement itself when the schema
 * changes under it.
 */

/** `db` whose `prepare` returns a kept statement for SQL it has seen, up to `max` statements (least recently used go first). */
export function cachingStatements(db: SqliteDatabase, max = 256): SqliteDatabase {
  const kept = new Map<string, SqliteStatement>();
  return {
    close: () => {
      kept.clear();
      return db.close();
    },
    prepare: (sql: string) => {
      // A statement with a long `in (?, ?, …)` list is written for one batch size and rarely seen again:
      // kept, such statements would push out the few dozen the cache is for.
      if (placeholders(sql) > maxKeptPlaceholders) return db.prepare(sql);
      const hit = kept.get(sql);
      if (hit) {
        // Re-inserted: the Map's order is then the order of last use.
        kept.delete(sql);
        kept.set(sql, hit);
        return hit;
      }
      const stmt = db.prepare(sql);
      kept.set(sql, stmt);
      if (kept.size > max) kept.delete(kept.keys().next().value!);
      return stmt;
    },
  };
}

/** Statements with more bound values than this are prepared afresh each time. */
const maxKeptPlaceholders = 32;

function placeholders(sql: string): number {
  let n = 0;
  for (let i = sql.indexOf("?"); i !== -1; i = sql.indexOf("?", i + 1)) n++;
  return n;
}
