/**
 * Stable error codes a user or operator may see. Every HTTP error body is
 * `{ error: ErrorCode, message }`; clients branch on the code, people read the message.
 */
export const errorCodes = [
  "bad_request",
  "invalid_json",
  "unauthorized",
  "token_revoked",
  "forbidden",
  "not_found",
  "conflict",
  "already_exists",
  "invalid_transition",
  "stale_attempt",
  "job_finished",
  "job_already_started",
  "agent_lost",
  "log_gap",
  "log_conflict",
  "payload_too_large",
  "invalid_archive",
  "state_locked",
  "internal",
  "database_unavailable",
  "database_read_only",
  "storage_full",
  "log_incomplete",
  "too_many_requests",
  "server_unreachable",
  "unexpected_response",
  "invalid_setting",
  "verification_failed",
  "fetch_refused",
  "vcs_error",
] as const;
export type ErrorCode = (typeof errorCodes)[number];

const statusByCode: Record<ErrorCode, number> = {
  bad_request: 400,
  invalid_json: 400,
  unauthorized: 401,
  token_revoked: 401,
  forbidden: 403,
  not_found: 404,
  conflict: 409,
  already_exists: 409,
  invalid_transition: 409,
  stale_attempt: 409,
  job_finished: 409,
  job_already_started: 409,
  agent_lost: 409,
  log_gap: 409,
  log_conflict: 409,
  payload_too_large: 413,
  invalid_archive: 422,
  state_locked: 423,
  internal: 500,
  database_unavailable: 503,
  too_many_requests: 429,
  database_read_only: 503,
  storage_full: 507,
  // Raised where a process starts (a bad variable or flag), never sent by the server.
  invalid_setting: 400,
  // Raised by clients (a log read that stopped short), never sent by the server.
  log_incomplete: 502,
  // Raised by clients about the server: no answer in time, or an answer outside the contract.
  server_unreachable: 502,
  unexpected_response: 502,
  // Raised by agents (a download or cache entry that is not what its source vouches for).
  verification_failed: 422,
  // Raised by agents: a fetch a configuration asked for, from an address runs must not reach through the agent.
  fetch_refused: 403,
  // Raised by the server about a VCS API (GitHub, GitLab) that refused or failed a call.
  vcs_error: 502,
};

/** What to do about an error of this code, when the message alone may not say it. */
const defaultHints: Partial<Record<ErrorCode, string>> = {
  server_unreachable:
    "Check the server URL (--url / DROVER_URL), that the server runs, and any proxy between (HTTPS_PROXY / NO_PROXY).",
  unexpected_response:
    "The server answered outside the API contract: check that the URL points at a Drover server of the same version, not a proxy or another service.",
  already_exists: "Pick another name, or use the existing one.",
  job_already_started:
    "Another worker already started this job: this one must not run it. Nothing to do; the first worker reports the outcome (or the job ends as agent lost).",
};

/** An error meant for a user or operator: a stable code, a message saying what to do. */
export class DroverError extends Error {
  readonly code: ErrorCode;
  readonly status: number;
  /** Extra machine-readable fields merged into the HTTP error body. */
  readonly details: Record<string, unknown> | undefined;
  /** A next step for the person reading the error (printed after the message). */
  readonly hint: string | undefined;

  constructor(
    code: ErrorCode,
    message: string,
    options?: { cause?: unknown; details?: Record<string, unknown>; hint?: string },
  ) {
    super(message, options?.cause === undefined ? undefined : { cause: options.cause });
    this.name = "DroverError";
    this.code = code;
    this.status = statusByCode[code];
    this.details = options?.details;
    this.hint = options?.hint ?? defaultHints[code];
  }
}

/** HTTP status for an error code. */
export function statusForCode(code: ErrorCode): number {
  return statusByCode[code];
}

/** Whether a value is one of our error codes (used when decoding a server reply). */
export function isErrorCode(value: unknown): value is ErrorCode {
  return typeof value === "string" && (errorCodes as readonly string[]).includes(value);
}

/** The message of anything thrown: an Error's message, otherwise its string form. */
export function messageOf(err: unknown): string {
  return err instanceof Error ? err.message : String(err);
}

/** One line for anything thrown, as the CLI and agents print a fatal error: a DroverError's message, its code, what to do. */
export function oneLineError(err: unknown): string {
  if (!(err instanceof DroverError)) return messageOf(err);
  return `${err.message} (${err.code})${err.hint ? ` ${err.hint}` : ""}`;
}
