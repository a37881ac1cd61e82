import type { PostgresCursor, PostgresPool, PostgresPoolClient, PostgresQueryResult } from "kysely";
import pg from "pg";
import type { Logger } from "pino";
import { DatabaseUnavailableError, describeError, type DatabaseHealth } from "./health.js";

/*
 * A pg.Pool whose every connection has error handling. pg emits 'error' on the pool for an
 * idle client and on the client itself while it is checked out; with no listener either one
 * ends the process (a PostgreSQL restart, a failover, pg_terminate_backend, a pooler closing
 * idle connections). Here both are listened to, reported to the health tracker, and a client
 * that failed is destroyed on release rather than handed out again.
 */

/** Connection settings shared by every PostgreSQL connection of the server. */
export interface PgConnectionSettings {
  url: string;
  /** Longest wait for a new connection or a free pooled one. */
  connectTimeoutMs: number;
  /** Longest a single statement may run (PostgreSQL's statement_timeout). */
  statementTimeoutMs: number;
}

/**
 * Client-side deadline beyond statement_timeout: catches a server that stopped answering
 * altogether (a halted host), which statement_timeout, enforced by that server, cannot.
 */
const clientDeadlineMarginMs = 5_000;

/** pg client options carrying the deadlines of `settings`; a statement deadline of 0 means none, on either side. */
export function pgClientConfig(settings: PgConnectionSettings): pg.ClientConfig {
  const bounded = settings.statementTimeoutMs > 0;
  return {
    connectionString: settings.url,
    connectionTimeoutMillis: settings.connectTimeoutMs,
    statement_timeout: bounded ? settings.statementTimeoutMs : 0,
    ...(bounded ? { query_timeout: settings.statementTimeoutMs + clientDeadlineMarginMs } : {}),
    keepAlive: true,
  };
}

/**
 * The settings of the one connection migrations run on: no statement deadline. An index build on
 * a large table can outlast any deadline sized for requests, and a migration cut off by one would
 * fail every start of the server.
 */
export function migrationConnectionSettings(settings: PgConnectionSettings): PgConnectionSettings {
  return { ...settings, statementTimeoutMs: 0 };
}

/** A pool for Kysely whose failures feed `health` and never go unhandled. */
export class GuardedPgPool implements PostgresPool {
  readonly raw: pg.Pool;

  constructor(
    private readonly settings: PgConnectionSettings,
    max: number,
    /** The tracker this pool reports connection failures to. */
    readonly health: DatabaseHealth,
    private readonly log: Logger,
  ) {
    this.raw = new pg.Pool({ ...pgClientConfig(settings), max });
    this.raw.on("error", (err) => {
      // An idle client lost its connection; the pool has already discarded it.
      this.log.warn({ err: describeError(err) }, "an idle database connection failed");
      this.health.suspect(describeError(err));
    });
  }

  async connect(): Promise<PostgresPoolClient> {
    this.health.assertAvailable();
    let client: pg.PoolClient;
    try {
      client = await this.raw.connect();
    } catch (err) {
      throw this.health.failure(err);
    }
    return new GuardedClient(client, this.health, this.log);
  }

  /** Runs one statement outside Kysely (the health probe, pg_notify). */
  async query(text: string, values: unknown[] = []): Promise<void> {
    const client = await this.connect();
    try {
      await client.query(text, values);
    } finally {
      client.release();
    }
  }

  /**
   * Checks the database on a connection of its own: it bypasses the fail-fast check (it is how
   * the tracker sees the database return) and the pool's queue (a saturated pool is load, not
   * an outage).
   */
  async probe(): Promise<void> {
    const client = new pg.Client(pgClientConfig(this.settings));
    client.on("error", () => undefined);
    try {
      await client.connect();
      await client.query("select 1");
    } finally {
      // Not awaited: ending waits for the server to close its side, which a halted one never does.
      void client.end().catch(() => undefined);
    }
  }

  end(): Promise<void> {
    return this.raw.end();
  }
}

class GuardedClient implements PostgresPoolClient {
  private broken: Error | undefined;
  private readonly onError = (err: Error) => {
    // Checked out but between queries when the connection died: the next query fails anyway.
    this.broken = err;
    this.log.warn({ err: describeError(err) }, "a database connection in use failed");
    this.health.failure(err);
  };

  constructor(
    private readonly client: pg.PoolClient,
    private readonly health: DatabaseHealth,
    private readonly log: Logger,
  ) {
    client.on("error", this.onError);
  }

  query<R>(sql: string, parameters: ReadonlyArray<unknown>): Promise<PostgresQueryResult<R>>;
  query<R>(cursor: PostgresCursor<R>): PostgresCursor<R>;
  query<R>(
    sqlOrCursor: string | PostgresCursor<R>,
    parameters?: ReadonlyArray<unknown>,
  ): Promise<PostgresQueryResult<R>> | PostgresCursor<R> {
    if (typeof sqlOrCursor !== "string") throw new Error("cursors are not used by the Drover server");
    if (this.broken) return Promise.reject(new DatabaseUnavailableError(describeError(this.broken), this.broken));
    return (this.client.query(sqlOrCursor, parameters as unknown[]) as unknown as Promise<PostgresQueryResult<R>>).then(
      (result) => {
        this.health.noteSuccess();
        return result;
      },
      (err: unknown) => {
        const mapped = this.health.failure(err);
        if (mapped instanceof DatabaseUnavailableError)
          this.broken = err instanceof Error ? err : new Error(String(err));
        else if ((err as { code?: unknown }).code === "57014") {
          throw new DatabaseUnavailableError("a statement ran past DROVER_DATABASE_STATEMENT_TIMEOUT_SECONDS", err);
        }
        throw mapped;
      },
    );
  }

  release(): void {
    if (this.broken) {
      // Destroyed, not returned to the pool; the listener stays for its last dying events.
      this.client.release(this.broken);
      return;
    }
    // Back in the pool, whose own idle listener takes over.
    this.client.off("error", this.onError);
    this.client.release();
  }
}
