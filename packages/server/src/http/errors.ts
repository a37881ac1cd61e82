import { DroverError, statusForCode, type RequestIssue } from "@drover/protocol";
import type { FastifyError, FastifyReply, FastifyRequest } from "fastify";
import type { z } from "zod";
import { describeError, isConnectionError, retryAfterSeconds } from "../db/health.js";
import { storageError } from "../db/storage-errors.js";
import { StateLockedError } from "../store/state.js";

/** Validates a request part with a wire schema; a mismatch is a 400 naming each bad field, in words and as `issues`. */
export function parse<T extends z.ZodType>(schema: T, value: unknown, what = "request body"): z.infer<T> {
  // No body at all reads as an empty one; a JSON `null` is a body, and not an object.
  const result = schema.safeParse(value === undefined ? {} : value);
  if (result.success) return result.data;
  const issues: RequestIssue[] = result.error.issues.map((i) => ({ path: i.path.join("."), message: i.message }));
  const problems = issues.map((i) => `${i.path === "" ? what : i.path}: ${i.message}`).join("; ");
  throw new DroverError("bad_request", `invalid ${what}: ${problems}`, { details: { issues } });
}

/**
 * A failure of the server's own storage as the coded error the operator can act on: SQLite or the
 * file system refusing a write (`storageDir` full or read-only: 507, 503), or the database out of
 * reach (503). Undefined for anything else, a DroverError included.
 */
export function storageFailure(err: unknown, storageDir: string | undefined): DroverError | undefined {
  if (err instanceof DroverError) return undefined;
  const stored = storageDir === undefined ? undefined : storageError(err, storageDir);
  if (stored) return stored;
  if (!isConnectionError(err)) return undefined;
  return new DroverError("database_unavailable", `the database is unavailable (${describeError(err)}); retry shortly`);
}

/** Whether a coded failure clears by itself (the database back, space freed), so its answer carries Retry-After. */
export function clearsByItself(err: DroverError): boolean {
  return err.code === "database_unavailable" || err.code === "database_read_only" || err.code === "storage_full";
}

/** The one error handler: every failure leaves as `{error, message}` JSON with a fitting status. */
export function errorHandler(err: FastifyError | Error, request: FastifyRequest, reply: FastifyReply): void {
  if (err instanceof StateLockedError) {
    // terraform's http backend reads the holder's LockInfo from a 423 body.
    void reply.code(423).header("content-type", "application/json").send(err.holderInfo);
    return;
  }
  if (err instanceof DroverError) {
    if (clearsByItself(err)) void reply.header("retry-after", String(retryAfterSeconds));
    // Too many at once from one caller: one of its own requests ends within moments.
    if (err.code === "too_many_requests") void reply.header("retry-after", "1");
    void reply.code(err.status).send({ error: err.code, message: err.message, ...err.details });
    return;
  }
  const fe = err as FastifyError;
  if (
    fe.code === "FST_ERR_CTP_INVALID_JSON_BODY" ||
    fe.code === "FST_ERR_CTP_EMPTY_JSON_BODY" ||
    (err instanceof SyntaxError && fe.statusCode === 400)
  ) {
    void reply.code(400).send({ error: "invalid_json", message: `the request body is not valid JSON: ${err.message}` });
    return;
  }
  if (fe.code === "FST_ERR_CTP_BODY_TOO_LARGE") {
    void reply.code(413).send({
      error: "payload_too_large",
      message: `the request body is larger than the ${request.routeOptions.bodyLimit} bytes this endpoint accepts`,
    });
    return;
  }
  if (fe.code === "FST_ERR_CTP_INVALID_MEDIA_TYPE") {
    void reply.code(415).send({ error: "bad_request", message: err.message });
    return;
  }
  if (typeof fe.statusCode === "number" && fe.statusCode >= 400 && fe.statusCode < 500) {
    void reply.code(fe.statusCode).send({ error: "bad_request", message: err.message });
    return;
  }
  request.log.error({ err }, "request failed");
  void reply
    .code(statusForCode("internal"))
    .send({ error: "internal", message: "internal server error; see the server log" });
}
