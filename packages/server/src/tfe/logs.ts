import { isFinishedJob, type Phase, type Run } from "@drover/protocol";
import type { HttpContext } from "../http/context.js";
import { readLog } from "../store/logs.js";
import { getRun } from "../store/runs.js";
import { capabilityKey, verifyCapability } from "./capability.js";
import { applyStatus, phaseKind, planStatus, runIdOf, terminalPhaseStatuses } from "./plans-applies.js";
import { tfeApi, tfeRoute, type TfeRegistrar } from "./serve.js";

/*
 * A phase's log as terraform reads it: the job's log between STX and ETX, read by byte offset
 * (the markers count) through a signed URL. ETX is written only once the phase is over and its
 * job's last byte is stored, since terraform stops reading at ETX and keeps polling until the
 * phase's status is final. terraform drops the first three lines of an apply log (they repeat
 * the version header of TFE's plan log): those are three lines of Drover's own, so the job's
 * first lines reach the user.
 */

const stx = Buffer.from([0x02]);
const etx = Buffer.from([0x03]);

/** The three lines terraform skips at the top of an apply log. */
export function applyHeader(run: Pick<Run, "id" | "applyJobId">): Buffer {
  return Buffer.from(
    `Drover apply of run ${run.id}\nLog of job ${run.applyJobId ?? "(none yet)"}\nInitializing plugins and modules...\n`,
  );
}

/** Largest read answered at once; terraform asks for 64 KiB. */
const maxLimit = 1024 * 1024;

export const logRoutes = {
  planLog: tfeRoute({
    method: "GET",
    path: `${tfeApi}/plans/:id/logs/:capability`,
    summary: "A plan's log from ?offset= (bytes, STX and ETX included), at most ?limit= (signed URL, no token)",
    auth: "capability",
  }),
  applyLog: tfeRoute({
    method: "GET",
    path: `${tfeApi}/applies/:id/logs/:capability`,
    summary: "An apply's log from ?offset= (bytes, STX and ETX included), at most ?limit= (signed URL, no token)",
    auth: "capability",
  }),
};

const count = (raw: unknown, fallback: number): number => {
  const n = typeof raw === "string" && /^\d{1,15}$/.test(raw) ? Number(raw) : NaN;
  return Number.isSafeInteger(n) ? n : fallback;
};

/** The bytes [offset, offset+limit) of a phase's stream; empty before the phase has a job. */
export async function readPhaseStream(
  http: HttpContext,
  phase: Phase,
  run: Run,
  offset: number,
  limit: number,
): Promise<Buffer> {
  const over = terminalPhaseStatuses.includes(phase === "plan" ? planStatus(run) : applyStatus(run));
  const jobId = phase === "plan" ? run.planJobId : run.applyJobId;
  if (jobId === null) {
    // Ended before it had a job (canceled while pending): an empty stream, closed.
    const whole = over ? Buffer.concat([stx, etx]) : Buffer.alloc(0);
    return whole.subarray(offset, offset + limit);
  }
  const prefix = phase === "apply" ? Buffer.concat([stx, applyHeader(run)]) : stx;
  const job = await http.store.db
    .selectFrom("jobs")
    .select(["log_size", "status"])
    .where("id", "=", jobId)
    .executeTakeFirstOrThrow();
  const closed = over && isFinishedJob(job.status);
  const total = prefix.length + job.log_size + (closed ? 1 : 0);
  const end = Math.min(total, offset + limit);
  if (offset >= end) return Buffer.alloc(0);
  const parts: Buffer[] = [];
  if (offset < prefix.length) parts.push(prefix.subarray(offset, Math.min(end, prefix.length)));
  const logFrom = Math.max(0, offset - prefix.length);
  const logTo = Math.min(job.log_size, end - prefix.length);
  if (logTo > logFrom) parts.push((await readLog(http.store, jobId, logFrom, logTo - logFrom)).data);
  if (closed && end === total) parts.push(etx);
  return Buffer.concat(parts);
}

export function registerLogRoutes(serve: TfeRegistrar, http: HttpContext): void {
  for (const [route, phase] of [
    [logRoutes.planLog, "plan"],
    [logRoutes.applyLog, "apply"],
  ] as const) {
    serve(route, async ({ params, query, req }) => {
      const id = params.id ?? "";
      const key = await capabilityKey(http.store);
      const check = (now: number, stillValid: boolean): void => {
        verifyCapability(key, params.capability ?? "", {
          method: req.method,
          kind: phaseKind(phase),
          id,
          now,
          stillValid,
        });
      };
      // The signature first: who holds no URL learns nothing, not even whether the run exists.
      check(http.store.now(), true);
      const run = await getRun(http.store, runIdOf(phase, id));
      const jobId = phase === "plan" ? run.planJobId : run.applyJobId;
      const finishedAt =
        jobId === null
          ? null
          : ((await http.store.db.selectFrom("jobs").select("finished_at").where("id", "=", jobId).executeTakeFirst())
              ?.finished_at ?? null);
      const now = http.store.now();
      // A log URL outlives its expiry while its phase runs, however long, and that long after it.
      const over = terminalPhaseStatuses.includes(phase === "plan" ? planStatus(run) : applyStatus(run));
      const stillValid = !over || (finishedAt !== null && now <= Number(finishedAt) + http.capabilityUrlMs);
      check(now, stillValid);
      const offset = count(query.offset, 0);
      const limit = Math.min(Math.max(1, count(query.limit, 65536)), maxLimit);
      const bytes = await readPhaseStream(http, phase, run, offset, limit);
      return { status: 200, bytes, contentType: "text/plain; charset=utf-8" };
    });
  }
}
