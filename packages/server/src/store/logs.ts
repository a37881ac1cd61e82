import { DroverError, isFinishedJob, maxLogChunkBytes } from "@drover/protocol";
import type { Queryable, StoreContext } from "./context.js";
import { inTransaction } from "./transaction.js";
import { waitForEvent } from "../events.js";
import type { JobRow } from "../db/schema.js";

/*
 * Job logs are append-only byte streams. An append names the offset it starts at: a chunk
 * already stored (a retry) is acknowledged and ignored, an overlapping one keeps only its new
 * tail, and one that would leave a gap is refused with the offset the server expects. The
 * overlap of a retry must equal what is stored: bytes that differ mean the sender's offset is
 * wrong, and accepting only the tail would silently drop its new bytes, so it is refused.
 */

/** Appends at the log's current end, whatever it is (server-written lines). */
export async function appendAtEnd(db: Queryable, jobId: string, data: Buffer): Promise<number> {
  const row = await db.selectFrom("jobs").select("log_size").where("id", "=", jobId).executeTakeFirstOrThrow();
  const end = row.log_size + data.length;
  await db.insertInto("log_chunks").values({ job_id: jobId, offset: row.log_size, end_offset: end, data }).execute();
  await db.updateTable("jobs").set({ log_size: end }).where("id", "=", jobId).execute();
  return end;
}

/** Options of an agent's append. */
export interface AppendOptions {
  /** Told how many new bytes were stored. */
  onStored?: (bytes: number) => void;
  /** Most log bytes stored for the job (DROVER_MAX_JOB_LOG_MB); unset: no limit. */
  maxLogBytes?: number;
}

/** The line that ends a log cut at its limit. */
export function truncationNotice(maxLogBytes: number): Buffer {
  const limit = maxLogBytes % (1024 * 1024) === 0 ? `${maxLogBytes / (1024 * 1024)} MiB` : `${maxLogBytes} bytes`;
  const line = `[drover] this job's log reached its limit of ${limit} (DROVER_MAX_JOB_LOG_MB): the rest of it is not stored; the job goes on`;
  return Buffer.from(`\n${line}\n`);
}

/**
 * Appends a chunk at `offset`; returns the log's size afterwards, as the sender counts it. Once
 * the log would pass `maxLogBytes`, a notice ends it and every later append is acknowledged and
 * dropped: the agent goes on as if stored, so a chatty run is not failed for its log.
 */
export async function appendLog(
  ctx: StoreContext,
  job: JobRow,
  offset: number,
  data: Buffer,
  options: AppendOptions = {},
): Promise<number> {
  if (data.length > maxLogChunkBytes) {
    throw new DroverError(
      "payload_too_large",
      `a log chunk may be at most ${maxLogChunkBytes} bytes; this one is ${data.length}`,
    );
  }
  if (!Number.isSafeInteger(offset) || offset < 0)
    throw new DroverError("bad_request", "offset must be a non-negative integer");
  let stored = 0;
  const end = await inTransaction(ctx, async (trx, effects) => {
    stored = 0;
    let q = trx.selectFrom("jobs").select(["log_size", "log_truncated", "attempt", "status"]).where("id", "=", job.id);
    if (ctx.dialect === "postgres") q = q.forUpdate();
    const row = await q.executeTakeFirstOrThrow();
    if (row.attempt !== job.attempt)
      throw new DroverError("stale_attempt", `job ${job.id} was reassigned (attempt ${row.attempt})`, {
        details: { attempt: row.attempt },
      });
    if (row.log_truncated === 1) return offset + data.length;
    const size = row.log_size;
    if (offset > size) {
      throw new DroverError(
        "log_gap",
        `log offset ${offset} is past the end of the log (${size}); resend from ${size}`,
        { details: { expectedOffset: size } },
      );
    }
    const overlap = Math.min(data.length, size - offset);
    if (overlap > 0) {
      const stored = await storedBytes(trx, job.id, offset, offset + overlap);
      if (!stored.equals(data.subarray(0, overlap))) {
        throw new DroverError(
          "log_conflict",
          `log bytes ${offset}..${offset + overlap} differ from the ones already stored; the log continues at ${size}`,
          { details: { expectedOffset: size } },
        );
      }
    }
    const fresh = data.subarray(overlap);
    if (fresh.length === 0) return size;
    if (options.maxLogBytes !== undefined && size + fresh.length > options.maxLogBytes) {
      const notice = truncationNotice(options.maxLogBytes);
      const end = size + notice.length;
      await trx
        .insertInto("log_chunks")
        .values({ job_id: job.id, offset: size, end_offset: end, data: notice })
        .execute();
      await trx.updateTable("jobs").set({ log_size: end, log_truncated: 1 }).where("id", "=", job.id).execute();
      effects.push(["log", job.id]);
      return offset + data.length;
    }
    const end = size + fresh.length;
    await trx.insertInto("log_chunks").values({ job_id: job.id, offset: size, end_offset: end, data: fresh }).execute();
    await trx.updateTable("jobs").set({ log_size: end }).where("id", "=", job.id).execute();
    effects.push(["log", job.id]);
    stored = fresh.length;
    return end;
  });
  if (stored > 0) options.onStored?.(stored);
  return end;
}

/** How far past the log's end an append may start and still wait for the bytes before it. */
const reorderWindowBytes = 4 * maxLogChunkBytes;

/**
 * Appends of one job held waiting for the bytes before them, in this process. Agents keep two
 * appends in flight, so one waits at most; the cap bounds what a job token can park in memory.
 */
export const maxWaitingAppendsPerJob = 2;
const waitingAppends = new Map<string, number>();

/**
 * appendLog for a sender with more than one append in flight: one that arrives before the one
 * ahead of it (starting at most a few chunks past the end) waits up to `waitMs` for the log to
 * reach its offset, instead of being refused at once. Still a gap after that: log_gap. Beyond
 * `maxWaitingAppendsPerJob` waiting at once: too_many_requests.
 */
export async function appendLogInOrder(
  ctx: StoreContext,
  job: JobRow,
  offset: number,
  data: Buffer,
  waitMs: number,
  signal?: AbortSignal,
  options: AppendOptions = {},
): Promise<number> {
  const deadline = Date.now() + waitMs;
  // Appends nearly always arrive in order: only one refused for a gap subscribes to the job's
  // log event, before it tries again, so an append landing in between still wakes it.
  let wake: ReturnType<typeof waitForEvent> | undefined;
  let waiting = false;
  try {
    for (;;) {
      try {
        return await appendLog(ctx, job, offset, data, options);
      } catch (err) {
        const expected =
          err instanceof DroverError && err.code === "log_gap" ? Number(err.details?.expectedOffset) : NaN;
        if (!(offset - expected <= reorderWindowBytes) || Date.now() >= deadline || signal?.aborted) throw err;
        if (!waiting) {
          const now = waitingAppends.get(job.id) ?? 0;
          if (now >= maxWaitingAppendsPerJob) {
            const message = `${now} appends of job ${job.id} already wait for the bytes before them; send the log in order`;
            throw new DroverError("too_many_requests", message);
          }
          waitingAppends.set(job.id, now + 1);
          waiting = true;
        }
        // The first refusal retries at once (subscribed now); later ones wait for a wake-up
        // subscribed before the attempt that was just refused.
        if (wake) await wake.promise;
        wake?.cancel();
        wake = waitForEvent(ctx.events, "log", job.id, Math.max(0, deadline - Date.now()), signal);
      }
    }
  } finally {
    wake?.cancel();
    if (waiting) {
      const left = (waitingAppends.get(job.id) ?? 1) - 1;
      if (left <= 0) waitingAppends.delete(job.id);
      else waitingAppends.set(job.id, left);
    }
  }
}

/** A slice of a job's log and whether the job has written its last byte. */
export interface LogSlice {
  data: Buffer;
  nextOffset: number;
  complete: boolean;
}

/** The stored bytes from `from` up to `to` (both within the log). */
async function storedBytes(db: Queryable, jobId: string, from: number, to: number): Promise<Buffer> {
  const chunks = await db
    .selectFrom("log_chunks")
    .select(["offset", "data"])
    .where("job_id", "=", jobId)
    .where("end_offset", ">", from)
    .where("offset", "<", to)
    .orderBy("offset")
    .execute();
  const parts: Buffer[] = [];
  let position = from;
  for (const c of chunks) {
    const take = c.data.subarray(position - c.offset, to - c.offset);
    parts.push(take);
    position += take.length;
  }
  return parts.length === 1 ? parts[0]! : Buffer.concat(parts);
}

/** Reads up to `limit` bytes from `offset`. */
export async function readLog(ctx: StoreContext, jobId: string, offset: number, limit: number): Promise<LogSlice> {
  const job = await ctx.db.selectFrom("jobs").select(["log_size", "status"]).where("id", "=", jobId).executeTakeFirst();
  if (!job) throw new DroverError("not_found", `no job ${JSON.stringify(jobId)}`);
  if (offset > job.log_size)
    throw new DroverError("bad_request", `offset ${offset} is past the end of the log (${job.log_size})`);
  const data = await storedBytes(ctx.db, jobId, offset, Math.min(job.log_size, offset + limit));
  const nextOffset = offset + data.length;
  return { data, nextOffset, complete: isFinishedJob(job.status) && nextOffset >= job.log_size };
}
