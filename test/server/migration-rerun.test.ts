import assert from "node:assert/strict";
import { test } from "node:test";
import BetterSqlite3 from "better-sqlite3";
import { Kysely, Migrator, PostgresDialect, SqliteDialect, sql } from "kysely";
import pg from "pg";
import { migrationProvider, openDatabase } from "@drover/server";
import { backends, createTestDatabase, type TestDatabase } from "../support/databases.js";
import { until } from "../support/marked-processes.js";

// Migration 0033 changes indexes in several statements; on SQLite they are not one transaction,
// so a crash part-way leaves some done. The next start must finish it, not fail for ever.

/** A connection of the test's own to `database`, migrated up to (and including) `last`. */
async function migratedTo(database: TestDatabase, last: string): Promise<Kysely<unknown>> {
  const location = database.location;
  const db =
    location.kind === "sqlite"
      ? new Kysely<unknown>({ dialect: new SqliteDialect({ database: new BetterSqlite3(location.path) }) })
      : new Kysely<unknown>({
          dialect: new PostgresDialect({ pool: new pg.Pool({ connectionString: location.url, max: 1 }) }),
        });
  const { error } = await new Migrator({ db, provider: migrationProvider(location.kind) }).migrateTo(last);
  if (error) throw error;
  return db;
}

/** The steps of 0033 that a crash could have left done, in its order. */
const partialStates: Array<{ name: string; steps: string[] }> = [
  { name: "after the old queue index was dropped", steps: ["drop index jobs_queue"] },
  {
    name: "after the run index was made",
    steps: [
      "drop index jobs_queue",
      "create index jobs_queue on jobs (pool_id, status, queued_at, id)",
      "create index jobs_run on jobs (run_id, created_at, id)",
    ],
  },
];

for (const backend of backends) {
  for (const state of partialStates) {
    test(`${backend}: a server whose queue-index migration stopped ${state.name} finishes it at the next start`, async () => {
      const database = await createTestDatabase(backend);
      try {
        const raw = await migratedTo(database, "0028_job_starter");
        for (const step of state.steps) await sql.raw(step).execute(raw);
        await raw.destroy();
        const db = await openDatabase(database.location);
        try {
          const indexes =
            backend === "sqlite"
              ? (
                  await sql<{
                    name: string;
                  }>`select name from sqlite_master where type = 'index' and name in ('jobs_queue', 'jobs_run', 'jobs_agent', 'runs_workspace_status')`.execute(
                    db.kysely,
                  )
                ).rows
              : (
                  await sql<{
                    name: string;
                  }>`select indexname as name from pg_indexes where indexname in ('jobs_queue', 'jobs_run', 'jobs_agent', 'runs_workspace_status')`.execute(
                    db.kysely,
                  )
                ).rows;
          assert.deepEqual(indexes.map((r) => r.name).sort(), [
            "jobs_agent",
            "jobs_queue",
            "jobs_run",
            "runs_workspace_status",
          ]);
        } finally {
          await db.close();
        }
      } finally {
        await database.drop();
      }
    });
  }
}

test("postgres: a migration that waits longer than the statement deadline still completes (migrations run without it)", async () => {
  const database = await createTestDatabase("postgres");
  try {
    const raw = await migratedTo(database, "0028_job_starter");
    await raw.destroy();
    if (database.location.kind !== "postgres") throw new Error("unreachable");
    // Another session holds the jobs table, as a long index build would keep the migration busy.
    const holder = new pg.Client({ connectionString: database.location.url });
    await holder.connect();
    await holder.query("begin");
    await holder.query("lock table jobs in access exclusive mode");
    const deadlineMs = 200;
    const opening = openDatabase({ ...database.location, statementTimeoutMs: deadlineMs });
    opening.catch(() => undefined);
    // Watched from outside the holder's transaction, whose view of pg_stat_activity is a snapshot.
    const watcher = new pg.Client({ connectionString: database.location.url });
    await watcher.connect();
    try {
      // Released only once the migration has waited past the deadlines (server-side clock).
      await until(
        "the migration to wait past the statement deadline",
        async () => {
          const r = await watcher.query<{ waited: number }>(
            "select extract(epoch from clock_timestamp() - query_start) * 1000 as waited from pg_stat_activity where wait_event_type = 'Lock' and pid <> pg_backend_pid() and query ilike '%index%'",
          );
          // Past the client's own deadline too (the statement deadline + 5 s), which no SET can lift.
          return r.rows.some((row) => Number(row.waited) > deadlineMs + 5_500);
        },
        30_000,
      );
    } finally {
      await holder.query("commit");
      await holder.end();
      await watcher.end();
    }
    const db = await opening;
    await db.close();
  } finally {
    await database.drop();
  }
});
