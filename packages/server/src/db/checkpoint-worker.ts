import { messageOf } from "@drover/protocol/errors";
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
export type CheckpointReply =
  { kind: "done"; walFrames: number; copiedFrames: number } | { kind: "failed"; message: string } | { kind: "closed" };

/** What the worker is started with. */
export interface CheckpointWorkerData {
  path: string;
}

interface CheckpointRow {
  busy: number;
  log: number;
  checkpointed: number;
}

const port = parentPort;
if (!port) throw new Error("checkpoint-worker.js runs as a worker thread");
const { path } = workerData as CheckpointWorkerData;
const db = new BetterSqlite3(path);
db.pragma("busy_timeout = 100");

port.on("message", (request: CheckpointRequest) => {
  if (request === "close") {
    db.close();
    port.postMessage({ kind: "closed" } satisfies CheckpointReply);
    port.close();
    return;
  }
  try {
    // PASSIVE only: it never takes the write lock, so the server's writes never wait for this
    // thread. (A RESTART did, for as long as its copy and sync took: more than the server's 5 s
    // busy_timeout under a burst of writes on a loaded machine, a 500 "database is locked".)
    // The log still starts over: the first write after a pass that copied every frame begins
    // it again, and the main connection's backstop checkpoint (a pass with no write beside it,
    // as it runs on the writing connection) bounds it when writes never pause.
    const row = (db.pragma("wal_checkpoint(PASSIVE)") as CheckpointRow[])[0]!;
    port.postMessage({ kind: "done", walFrames: row.log, copiedFrames: row.checkpointed } satisfies CheckpointReply);
  } catch (err) {
    port.postMessage({
      kind: "failed",
      message: messageOf(err),
    } satisfies CheckpointReply);
  }
});
