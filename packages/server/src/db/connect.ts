import BetterSqlite3 from "better-sqlite3";
import { Kysely, Migrator, PostgresDialect, SqliteDialect } from "kysely";
import pg from "pg";
import { mkdirSync } from "node:fs";
import { dirname } from "node:path";
import { migrationProvider } from "./migrations.js";
import type { Database } from "./schema.js";

export type Dialect = "sqlite" | "postgres";

// PostgreSQL bigint (int8) arrives as a string by default; our values (epoch ms, sizes) fit a double.
pg.types.setTypeParser(20, (v) => Number(v));

/** An open database: the query builder plus what callers need to know about it. */
export interface Db {
  kysely: Kysely<Database>;
  dialect: Dialect;
  /** PostgreSQL connection settings, for the LISTEN connection of the event bus. */
  pgConnectionString?: string;
  close(): Promise<void>;
}

/** Where the database lives: a SQLite file path or a postgres:// URL. */
export type DatabaseLocation = { kind: "sqlite"; path: string } | { kind: "postgres"; url: string; poolSize?: number };

/** Opens the database and applies every pending migration. */
export async function openDatabase(location: DatabaseLocation): Promise<Db> {
  let kysely: Kysely<Database>;
  let dialect: Dialect;
  if (location.kind === "sqlite") {
    if (location.path !== ":memory:") mkdirSync(dirname(location.path), { recursive: true });
    const sqlite = new BetterSqlite3(location.path);
    sqlite.pragma("journal_mode = WAL");
    sqlite.pragma("synchronous = NORMAL");
    sqlite.pragma("foreign_keys = ON");
    sqlite.pragma("busy_timeout = 5000");
    kysely = new Kysely<Database>({ dialect: new SqliteDialect({ database: sqlite }) });
    dialect = "sqlite";
  } else {
    const pool = new pg.Pool({ connectionString: location.url, max: location.poolSize ?? 10 });
    kysely = new Kysely<Database>({ dialect: new PostgresDialect({ pool }) });
    dialect = "postgres";
  }
  const migrator = new Migrator({ db: kysely, provider: migrationProvider(dialect) });
  const { error, results } = await migrator.migrateToLatest();
  if (error) {
    await kysely.destroy();
    const failed = results?.find((r) => r.status === "Error")?.migrationName ?? "unknown";
    throw new Error(`database migration ${failed} failed: ${error instanceof Error ? error.message : String(error)}`, { cause: error });
  }
  const db: Db = { kysely, dialect, close: () => kysely.destroy() };
  if (location.kind === "postgres") db.pgConnectionString = location.url;
  return db;
}
