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
export const terminalRunStatuses: readonly RunStatus[] = (Object.keys(runTransitions) as RunStatus[]).filter((s) => runTransitions[s].length === 0);
/** Job statuses after which the job holds nothing (its token and lease are gone). */
export const finishedJobStatuses: readonly JobStatus[] = (Object.keys(jobTransitions) as JobStatus[]).filter((s) => jobTransitions[s].length === 0);

export function isTerminalRun(status: RunStatus): boolean {
  return runTransitions[status].length === 0;
}

export function isFinishedJob(status: JobStatus): boolean {
  return jobTransitions[status].length === 0;
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
  throw new DroverError("invalid_transition", `job ${jobId} is ${from} and cannot become ${to}`);
}
