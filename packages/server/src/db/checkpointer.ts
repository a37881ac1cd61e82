import { Worker } from "node:worker_threads";
import type BetterSqlite3 from "better-sqlite3";
import type { SqliteDatabase, SqliteStatement } from "kysely";
import type { Logger } from "pino";
import type { CheckpointReply, CheckpointRequest, CheckpointWorkerData } from "./checkpoint-worker.js";

/*
 * SQLite in WAL mode appends every commit to the write-ahead log; a checkpoint copies the log
 * into the database file and syncs both. By default the connection that commits does that
 * itself, every 1,000 pages: the server's event loop stood still for the copy and two fsyncs
 * every 4 MiB, and a profile of log streaming put ~2/3 of the server's time in `commit`
 * (bench/notes/logs.md, decision 0032). Here a worker thread with its own connection
 * checkpoints instead, asked by the main thread after about as many bytes as SQLite would
 * have waited for. The main connection keeps an automatic checkpoint far above that, so the
 * log stays bounded if the worker ever stops.
 */

/** Bytes written (estimated: bound values plus a page per statement) between two requests to checkpoint. */
export const checkpointEveryBytes = 4 * 1024 * 1024;
/** The main connection's own automatic checkpoint, in pages: only reached if the worker falls far behind or stops. */
export const backstopPages = 16_384;
/**
 * The size the write-ahead log is cut back to when a write starts it over after a checkpoint:
 * without it the file keeps the size of its largest burst for ever.
 */
export const walSizeLimitBytes = 16 * 1024 * 1024;
const pageEstimate = 4096;

/** How long closing waits for the worker to close its connection, then for it to stop. */
export const defaultCloseDeadlineMs = 5_000;

/** A running background checkpointer of one SQLite database. */
export interface Checkpointer {
  /** `db` with every statement that writes (`returning` ones too) counted towards the next checkpoint. */
  counting(db: BetterSqlite3.Database): SqliteDatabase;
  /** Stops the worker (its connection closes first); resolves when it is gone or the close deadline passed. */
  close(): Promise<void>;
}

/** Settings of a checkpointer; tests inject the worker and shorten the deadline. */
export interface CheckpointerOptions {
  /** How long `close` waits for the worker to answer, and then for it to stop (default 5 s). */
  closeDeadlineMs?: number;
  /** Starts the worker thread (default: checkpoint-worker.js). */
  startWorker?: (data: CheckpointWorkerData) => Worker;
}

/** Starts the real checkpoint worker thread. */
export function startCheckpointWorker(data: CheckpointWorkerData): Worker {
  return new Worker(new URL("./checkpoint-worker.js", import.meta.url), { workerData: data });
}

/** Starts the checkpoint worker for the database at `path`, whose main connection is `sqlite`. */
export function startCheckpointer(
  sqlite: BetterSqlite3.Database,
  path: string,
  log: Logger,
  options: CheckpointerOptions = {},
): Checkpointer {
  const closeDeadlineMs = options.closeDeadlineMs ?? defaultCloseDeadlineMs;
  const worker = (options.startWorker ?? startCheckpointWorker)({ path });
  worker.unref();
  sqlite.pragma(`wal_autocheckpoint = ${backstopPages}`);
  // SQLite truncates the log on the connection that starts it over: the main one (the worker never writes).
  sqlite.pragma(`journal_size_limit = ${walSizeLimitBytes}`);
  let written = 0;
  let inFlight = false;
  let stopped = false;
  let closed: (() => void) | undefined;
  let closing: Promise<void> | undefined;
  const gone = new Promise<void>((resolve) => worker.once("exit", () => resolve()));

  const send = (request: CheckpointRequest) => worker.postMessage(request);
  const stopUsing = (why: string) => {
    if (stopped) return;
    stopped = true;
    // SQLite's own checkpoints again, on the main thread: slower, but the log stays bounded.
    try {
      sqlite.pragma("wal_autocheckpoint = 1000");
    } catch {
      // the main connection is closed already
    }
    log.warn({ reason: why }, "background checkpoints stopped; SQLite checkpoints on the server's thread again");
  };
  worker.on("message", (reply: CheckpointReply) => {
    if (reply.kind === "closed") return closed?.();
    inFlight = false;
    if (reply.kind === "failed")
      log.warn({ err: reply.message }, "background checkpoint failed; the next write retries it");
    if (written >= checkpointEveryBytes) request();
  });
  worker.on("error", (err) => stopUsing(err.message));
  worker.on("exit", () => {
    if (!closing) stopUsing("the checkpoint worker exited");
  });
  const request = () => {
    if (inFlight || stopped) return;
    inFlight = true;
    written = 0;
    send("checkpoint");
  };
  const noteWrite = (bytes: number) => {
    written += bytes + pageEstimate;
    if (written >= checkpointEveryBytes) request();
  };

  return {
    counting: (db) => countingWrites(db, noteWrite),
    close() {
      closing ??= (async () => {
        // A worker stuck in a checkpoint (an fsync on a hung disk) never answers: without a
        // deadline the database would never close and its lock file never be released.
        if (!stopped) {
          const acknowledged = new Promise<void>((resolve) => (closed = resolve));
          send("close");
          if (!(await within(Promise.race([acknowledged, gone]), closeDeadlineMs))) {
            log.warn(
              { deadlineMs: closeDeadlineMs },
              "the checkpoint worker did not close its connection in time; stopping it",
            );
          }
        }
        if (!(await within(worker.terminate(), closeDeadlineMs))) {
          log.warn({ deadlineMs: closeDeadlineMs }, "the checkpoint worker did not stop in time; closing without it");
        }
      })();
      return closing;
    },
  };
}

/** Whether `promise` settled within `ms`. */
async function within(promise: Promise<unknown>, ms: number): Promise<boolean> {
  let timer: NodeJS.Timeout | undefined;
  const expired = new Promise<false>((resolve) => (timer = setTimeout(() => resolve(false), ms)));
  try {
    return await Promise.race([promise.then(() => true), expired]);
  } finally {
    clearTimeout(timer);
  }
}

/** Bytes of the values bound to a statement: what its write adds to the log, roughly. */
function boundBytes(parameters: readonly unknown[]): number {
  let n = 0;
  for (const p of parameters) {
    if (typeof p === "string") n += p.length;
    else if (p instanceof Uint8Array) n += p.byteLength;
  }
  return n;
}

/**
 * `db` whose writing statements report their bound bytes to `noteWrite` after they ran. A write
 * with `returning` is a reader to better-sqlite3 (it is run with `all`), so what decides is
 * whether the statement is read-only, not how it is run.
 */
function countingWrites(db: BetterSqlite3.Database, noteWrite: (bytes: number) => void): SqliteDatabase {
  return {
    close: () => db.close(),
    prepare: (sql: string): SqliteStatement => {
      // The worker is a second connection: should it ever hold the write lock (a RESTART
      // checkpoint did), a deferred transaction that has read cannot wait for that lock (SQLite
      // answers SQLITE_BUSY at once, ignoring busy_timeout). Kysely's `begin` taken as `begin immediate`
      // waits for the lock at the start instead; the server's one connection runs one
      // transaction at a time, so nothing else waits behind it. (Not counted: it writes nothing.)
      if (sql === "begin") return db.prepare("begin immediate");
      const stmt = db.prepare(sql);
      if (stmt.readonly) return stmt;
      return {
        reader: stmt.reader,
        all: (parameters) => {
          const rows = stmt.all(parameters);
          noteWrite(boundBytes(parameters));
          return rows;
        },
        iterate: (parameters) => {
          noteWrite(boundBytes(parameters));
          return stmt.iterate(parameters);
        },
        run: (parameters) => {
          const result = stmt.run(parameters);
          noteWrite(boundBytes(parameters));
          return result;
        },
      };
    },
  };
}
