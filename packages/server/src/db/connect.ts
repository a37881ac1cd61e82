import BetterSqlite3 from "better-sqlite3";
import { Kysely, Migrator, PostgresDialect, SqliteDialect } from "kysely";
import pg from "pg";
import { chmodSync, closeSync, mkdirSync, openSync } from "node:fs";
import { dirname } from "node:path";
import { pino, type Logger } from "pino";
import { DatabaseHealth, DatabaseUnavailableError, describeError } from "./health.js";
import { migrationProvider } from "./migrations.js";
import { GuardedPgPool, migrationConnectionSettings, type PgConnectionSettings } from "./pg-pool.js";
import type { Database, Dialect } from "./schema.js";
import { lockDatabaseFile, type SqliteLock } from "./sqlite-lock.js";
import { cachingStatements } from "./statement-cache.js";
import { startCheckpointer, type Checkpointer } from "./checkpointer.js";
import { storageError } from "./storage-errors.js";

export type { Dialect } from "./schema.js";

// PostgreSQL bigint (int8) arrives as a string by default; our values (epoch ms, sizes) fit a double.
pg.types.setTypeParser(20, (v) => Number(v));

/** An open database: the query builder plus what callers need to know about it. */
export interface Db {
  kysely: Kysely<Database>;
  dialect: Dialect;
  /** Whether the database is reachable; always available on SQLite. */
  health: DatabaseHealth;
  /** PostgreSQL: the connection settings (for the event bus's LISTEN connection) and the pool. */
  postgres?: { settings: PgConnectionSettings; pool: GuardedPgPool };
  close(): Promise<void>;
}

/** Default deadlines of PostgreSQL connections and statements. */
export const defaultPgTimeouts = { connectTimeoutMs: 10_000, statementTimeoutMs: 60_000 };

/** Where the database lives: a SQLite file path or a postgres:// URL with its deadlines. */
export type DatabaseLocation =
  | { kind: "sqlite"; path: string }
  | { kind: "postgres"; url: string; poolSize?: number; connectTimeoutMs?: number; statementTimeoutMs?: number };

/** Opens the database and applies every pending migration. */
export async function openDatabase(
  location: DatabaseLocation,
  options: { logger?: Logger; stallMs?: number } = {},
): Promise<Db> {
  const log = options.logger ?? pino({ level: "silent" });
  let kysely: Kysely<Database>;
  let dialect: Dialect;
  let health: DatabaseHealth;
  let postgres: Db["postgres"];
  let lock: SqliteLock | undefined;
  let checkpointer: Checkpointer | undefined;
  if (location.kind === "sqlite") {
    const dir = dirname(location.path);
    let sqlite: BetterSqlite3.Database | undefined;
    try {
      if (location.path !== ":memory:") {
        // The database holds hashed tokens, variables (sensitive ones too) and state: owner only.
        // A directory we create is 0700; the file is 0600 before SQLite opens it, and its -wal and
        // -shm files take the database file's mode.
        mkdirSync(dir, { recursive: true, mode: 0o700 });
        lock = lockDatabaseFile(location.path);
        closeSync(openSync(location.path, "a", 0o600));
        chmodSync(location.path, 0o600);
      }
      sqlite = new BetterSqlite3(location.path);
      sqlite.pragma("journal_mode = WAL");
      sqlite.pragma("synchronous = NORMAL");
      sqlite.pragma("foreign_keys = ON");
      sqlite.pragma("busy_timeout = 5000");
      if (location.path !== ":memory:") checkpointer = startCheckpointer(sqlite, location.path, log);
    } catch (err) {
      await checkpointer?.close();
      sqlite?.close();
      lock?.release();
      throw storageError(err, dir) ?? err;
    }
    kysely = new Kysely<Database>({
      dialect: new SqliteDialect({
        database: cachingStatements(checkpointer ? checkpointer.counting(sqlite) : sqlite),
      }),
    });
    dialect = "sqlite";
    health = new DatabaseHealth(async () => undefined);
  } else {
    const settings: PgConnectionSettings = {
      url: location.url,
      connectTimeoutMs: location.connectTimeoutMs ?? defaultPgTimeouts.connectTimeoutMs,
      statementTimeoutMs: location.statementTimeoutMs ?? defaultPgTimeouts.statementTimeoutMs,
    };
    // The probe is only ever called after the pool exists (on a failure of one of its calls).
    health = new DatabaseHealth(() => pool.probe(), options.stallMs === undefined ? {} : { stallMs: options.stallMs });
    const pool = new GuardedPgPool(settings, location.poolSize ?? 10, health, log);
    postgres = { settings, pool };
    kysely = new Kysely<Database>({ dialect: new PostgresDialect({ pool }) });
    dialect = "postgres";
  }
  // PostgreSQL migrates on a connection of its own without the requests' statement deadline.
  const migrationDb = postgres
    ? new Kysely<Database>({
        dialect: new PostgresDialect({
          pool: new GuardedPgPool(migrationConnectionSettings(postgres.settings), 1, health, log),
        }),
      })
    : kysely;
  const { error, results } = await new Migrator({ db: migrationDb, provider: migrationProvider(dialect) })
    .migrateToLatest()
    .finally(async () => {
      if (migrationDb !== kysely) await migrationDb.destroy();
    });
  if (error) {
    health.close();
    await checkpointer?.close();
    await kysely.destroy();
    lock?.release();
    if (location.kind === "sqlite") {
      const coded = storageError(error, dirname(location.path));
      if (coded) throw coded;
    }
    const failed = results?.find((r) => r.status === "Error")?.migrationName;
    const what = failed ? `database migration ${failed} failed` : "cannot open the database";
    const why = error instanceof DatabaseUnavailableError ? describeError(error.cause) : describeError(error);
    throw new Error(`${what}: ${why}`, { cause: error });
  }
  const db: Db = {
    kysely,
    dialect,
    health,
    close: async () => {
      health.close();
      try {
        // The worker's connection goes first: the last one to close checkpoints and removes the log.
        await checkpointer?.close();
        await kysely.destroy();
      } finally {
        lock?.release();
      }
    },
  };
  if (postgres) db.postgres = postgres;
  return db;
}
