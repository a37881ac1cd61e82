import { createReadStream } from "node:fs";
import { readFile } from "node:fs/promises";
import { Readable } from "node:stream";
import type { Kysely } from "kysely";
import type { Database } from "../db/schema.js";

/*
 * Large bodies (state, plans, configuration archives) are stored as numbered chunks of at most
 * `chunkBytes` in a table of their own, one per owner (decision 0012): written from a file or a
 * buffer a chunk at a time, and read back as a stream, so neither an upload nor a download ever
 * holds a whole body in memory, on SQLite and PostgreSQL alike.
 */

/** An uploaded body the HTTP layer spooled to a file (which it removes after the request). */
export interface BodyFile {
  path: string;
  size: number;
}

/** What the store accepts as a body: bytes already in memory (small bodies, tests) or a spooled file. */
export type BodySource = Buffer | BodyFile;

/** A stored body: its size, and a stream of its bytes read a chunk at a time. */
export interface StoredBody {
  size: number;
  open(): Readable;
}

/** Largest chunk written; a body read back holds about one chunk in memory at a time. */
export const chunkBytes = 1024 * 1024;

/** Tables holding body chunks; each row is (owner_id, seq, data) and goes with its owner. */
export type ChunkTable =
  | "state_version_chunks"
  | "configuration_version_chunks"
  | "plan_file_chunks"
  | "plan_json_chunks"
  | "provider_schema_chunks";

export function sourceSize(source: BodySource): number {
  return Buffer.isBuffer(source) ? source.length : source.size;
}

/** The bytes of a source, `chunkBytes` at a time. */
export async function* sourceChunks(source: BodySource): AsyncGenerator<Buffer> {
  if (Buffer.isBuffer(source)) {
    for (let at = 0; at < source.length; at += chunkBytes) yield source.subarray(at, at + chunkBytes);
    return;
  }
  const stream = createReadStream(source.path, { highWaterMark: chunkBytes });
  let pending: Buffer[] = [];
  let pendingBytes = 0;
  let total = 0;
  for await (const piece of stream as AsyncIterable<Buffer>) {
    total += piece.length;
    pending.push(piece);
    pendingBytes += piece.length;
    while (pendingBytes >= chunkBytes) {
      const joined = pending.length === 1 ? (pending[0] as Buffer) : Buffer.concat(pending);
      yield joined.subarray(0, chunkBytes);
      const rest = joined.subarray(chunkBytes);
      pending = rest.length > 0 ? [rest] : [];
      pendingBytes = rest.length;
    }
  }
  if (pendingBytes > 0) yield pending.length === 1 ? (pending[0] as Buffer) : Buffer.concat(pending);
  // The spooled file is the request body: one that changed size under us is a bug, not input.
  if (total !== source.size) throw new Error(`spooled body ${source.path} is ${total} bytes, expected ${source.size}`);
}

/** A whole source in memory: for bodies that are small by their route's limit. */
export async function sourceBytes(source: BodySource): Promise<Buffer> {
  return Buffer.isBuffer(source) ? source : readFile(source.path);
}

/**
 * Writes `source` as the chunks of `ownerId` in `table`, replacing any it had. Run it inside
 * the transaction that writes the owner row, so a failure leaves no partial body.
 */
export async function writeChunks(
  trx: Kysely<Database>,
  table: ChunkTable,
  ownerId: string,
  source: BodySource,
): Promise<number> {
  await trx.deleteFrom(table).where("owner_id", "=", ownerId).execute();
  let seq = 0;
  let size = 0;
  for await (const data of sourceChunks(source)) {
    await trx.insertInto(table).values({ owner_id: ownerId, seq, data }).execute();
    seq += 1;
    size += data.length;
  }
  return size;
}

/** The stored body of `ownerId` (`size` bytes), read one chunk per query as the stream is consumed. */
export function storedBody(db: Kysely<Database>, table: ChunkTable, ownerId: string, size: number): StoredBody {
  return {
    size,
    open() {
      let seq = 0;
      let sent = 0;
      return new Readable({
        highWaterMark: chunkBytes,
        read() {
          db.selectFrom(table)
            .select("data")
            .where("owner_id", "=", ownerId)
            .where("seq", "=", seq)
            .executeTakeFirst()
            .then(
              (row) => {
                seq += 1;
                if (row) {
                  sent += row.data.length;
                  this.push(Buffer.isBuffer(row.data) ? row.data : Buffer.from(row.data));
                } else if (sent < size) {
                  // Its owner was replaced or deleted while it was read: end the response broken, not short.
                  this.destroy(new Error(`stored body ${ownerId} ended after ${sent} of ${size} bytes`));
                } else this.push(null);
              },
              (err: unknown) => this.destroy(err instanceof Error ? err : new Error(String(err))),
            );
        },
      });
    },
  };
}

/** Reads a stored body whole: for small bodies and tests. */
export async function storedBytes(body: StoredBody): Promise<Buffer> {
  const parts: Buffer[] = [];
  for await (const piece of body.open() as AsyncIterable<Buffer>) parts.push(piece);
  return Buffer.concat(parts);
}
