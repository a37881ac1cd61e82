import { DroverError } from "./errors.js";
import type { JobStatus, RunStatus } from "./schemas.js";

/*
 * The one lifecycle of runs and jobs (decision 0002): which status may follow which. A status
 * with no successor is terminal. The store refuses any other change, the API and the CLI derive
 * "over" from it, so a new status or transition is added here and nowhere else.
 */

/** For each run status, the statuses it may change to. */
export const runTransitions: { readonly [S in RunStatus]: readonly RunStatus[] } = {
  pending: ["queued", "canceled"],
  // A queued plan may end before it starts: canceled, or errored when its pool token is revoked.
  queued: ["planning", "planned", "planned_and_finished", "confirmed", "errored", "canceled"],
  planning: ["planned", "planned_and_finished", "confirmed", "errored", "canceled"],
  planned: ["confirmed", "discarded", "canceled", "errored"],
  confirmed: ["applying", "applied", "errored", "canceled"],
  applying: ["applied", "errored", "canceled"],
  applied: [],
  planned_and_finished: [],
  errored: [],
  canceled: [],
  discarded: [],
};

/** For each job status, the statuses it may change to. */
export const jobTransitions: { readonly [S in JobStatus]: readonly JobStatus[] } = {
  queued: ["assigned", "canceled"],
  // An assignment whose lease expires before the job starts goes back to the queue.
  assigned: ["queued", "running", "canceled", "errored"],
  running: ["succeeded", "failed", "canceled", "errored"],
  succeeded: [],
  failed: [],
  canceled: [],
  errored: [],
};

/** Run statuses after which nothing more happens to the run. */
export const terminalRunStatuses: readonly RunStatus[] = (Object.keys(runTransitions) as RunStatus[]).filter(
  (s) => runTransitions[s].length === 0,
);
/** Job statuses after which the job holds nothing (its token and lease are gone). */
export const finishedJobStatuses: readonly JobStatus[] = (Object.keys(jobTransitions) as JobStatus[]).filter(
  (s) => jobTransitions[s].length === 0,
);

/** Job statuses in which an agent holds the job: its lease and its job token are live. */
export const leasedJobStatuses: readonly JobStatus[] = ["assigned", "running"];
/** Job statuses of a job not yet finished: queued, or held by an agent. */
export const unfinishedJobStatuses: readonly JobStatus[] = (Object.keys(jobTransitions) as JobStatus[]).filter(
  (s) => jobTransitions[s].length > 0,
);

/** Whether nothing more happens to a run in this status. */
export function isTerminalRun(status: RunStatus): boolean {
  return runTransitions[status].length === 0;
}

/** Whether a job in this status is over: no agent may act on it any more. */
export function isFinishedJob(status: JobStatus): boolean {
  return jobTransitions[status].length === 0;
}

/** Whether an agent holds a job in this status (its lease and token are live). */
export function isLeasedJob(status: JobStatus): boolean {
  return leasedJobStatuses.includes(status);
}

/** Why a job is no longer the agent's to run: see jobTakenAway. */
export type JobTakenAway =
  { why: "superseded" } | { why: "finished"; status: JobStatus | undefined } | { why: "forgotten" };

/**
 * What a refused job call tells the agent holding the job: `superseded` (its lease lapsed and
 * another attempt holds the job), `finished` (the server ended it, in `status` when the server
 * said, e.g. canceled by a force-cancel or errored when its pool token was revoked) or
 * `forgotten` (the server no longer knows the job's token: the job stopped being leased longer
 * ago than DROVER_JOB_TOKEN_RETENTION_SECONDS, or was deleted). Undefined for any other
 * failure: the job may still be the agent's. Only for errors of calls made with a job token.
 */
export function jobTakenAway(err: unknown): JobTakenAway | undefined {
  if (!(err instanceof DroverError)) return undefined;
  if (err.code === "stale_attempt") return { why: "superseded" };
  // Never transient: a job token is fixed for the job's life and refused only once the server forgot it (a new lease mints a new one).
  if (err.code === "unauthorized") return { why: "forgotten" };
  if (err.code !== "job_finished") return undefined;
  const status = err.details?.status;
  const known = typeof status === "string" && status in jobTransitions ? (status as JobStatus) : undefined;
  return { why: "finished", status: known !== undefined && isFinishedJob(known) ? known : undefined };
}

/** A run waiting for a user's decision (confirm or discard): followers stop there too. */
export function awaitsConfirmation(status: RunStatus): boolean {
  return status === "planned";
}

/** Throws invalid_transition unless a run may go from `from` to `to`. */
export function assertRunTransition(runId: string, from: RunStatus, to: RunStatus): void {
  if (runTransitions[from].includes(to)) return;
  const why = isTerminalRun(from) ? "it is over" : `from ${from} it may only become ${runTransitions[from].join(", ")}`;
  throw new DroverError("invalid_transition", `run ${runId} is ${from} and cannot become ${to}: ${why}`);
}

/** Throws invalid_transition unless a job may go from `from` to `to`. */
export function assertJobTransition(jobId: string, from: JobStatus, to: JobStatus): void {
  if (jobTransitions[from].includes(to)) return;
  const why = isFinishedJob(from) ? "it is over" : `from ${from} it may only become ${jobTransitions[from].join(", ")}`;
  throw new DroverError("invalid_transition", `job ${jobId} is ${from} and cannot become ${to}: ${why}`);
}
