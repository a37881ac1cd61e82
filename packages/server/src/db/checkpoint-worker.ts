import { parentPort, workerData } from "node:worker_threads";
import BetterSqlite3 from "better-sqlite3";

/*
 * The thread that copies SQLite's write-ahead log into the database file (see checkpointer.ts).
 * It holds a connection of its own; a checkpoint runs beside the server's writes, which keep
 * appending to the log meanwhile (WAL mode allows one writer and one checkpointer at once).
 */

/** What the main thread sends. */
export type CheckpointRequest = "checkpoint" | "close";

/** What the worker answers to each request. */
export type CheckpointReply = { kind: "done"; walFrames: number; copiedFrames: number } | { kind: "failed"; message: string } | { kind: "closed" };

/** What the worker is started with. */
export interface CheckpointWorkerData {
  path: string;
  /** Once the log holds this many frames, all copied, it is restarted from its beginning. */
  restartFrames: number;
}

interface CheckpointRow {
  busy: number;
  log: number;
  checkpointed: number;
}

const port = parentPort;
if (!port) throw new Error("checkpoint-worker.js runs as a worker thread");
const { path, restartFrames } = workerData as CheckpointWorkerData;
const db = new BetterSqlite3(path);
// RESTART holds the write lock while it waits for readers; a server transaction that read and
// then writes waits for it, sleeping on the event loop. A short wait bounds that stall; a
// restart that gives up is tried again at the next request.
db.pragma("busy_timeout = 100");

port.on("message", (request: CheckpointRequest) => {
  if (request === "close") {
    db.close();
    port.postMessage({ kind: "closed" } satisfies CheckpointReply);
    port.close();
    return;
  }
  try {
    // PASSIVE takes no lock from the writer: frames committed meanwhile wait for the next pass.
    let row = (db.pragma("wal_checkpoint(PASSIVE)") as CheckpointRow[])[0]!;
    // A writer that never pauses never finds the log fully copied, so the log would only grow:
    // past `restartFrames`, RESTART copies the rest and makes the next write start the log
    // over (the server's writes wait for it, once in that many frames).
    if (row.log >= restartFrames) row = (db.pragma("wal_checkpoint(RESTART)") as CheckpointRow[])[0]!;
    port.postMessage({ kind: "done", walFrames: row.log, copiedFrames: row.checkpointed } satisfies CheckpointReply);
  } catch (err) {
    port.postMessage({ kind: "failed", message: err instanceof Error ? err.message : String(err) } satisfies CheckpointReply);
  }
});
