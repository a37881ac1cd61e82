/**
 * API errors, rendered as `Status` objects with the HTTP code, reason and details the
 * real API server uses, so clients branch on them exactly as in production.
 */

export type StatusReason =
  | "NotFound"
  | "AlreadyExists"
  | "Conflict"
  | "Invalid"
  | "BadRequest"
  | "Expired"
  | "Gone"
  | "Forbidden"
  | "Unauthorized"
  | "MethodNotAllowed"
  | "UnsupportedMediaType"
  | "NotAcceptable"
  | "TooManyRequests"
  | "InternalError";

export interface StatusCause {
  reason?: string;
  message?: string;
  field?: string;
}

export interface StatusDetails {
  name?: string;
  group?: string;
  kind?: string;
  uid?: string;
  causes?: StatusCause[];
  retryAfterSeconds?: number;
}

export class StatusError extends Error {
  constructor(
    readonly code: number,
    readonly reason: StatusReason,
    message: string,
    readonly details?: StatusDetails,
  ) {
    super(message);
    this.name = "StatusError";
  }

  toStatus(): Record<string, unknown> {
    return {
      kind: "Status",
      apiVersion: "v1",
      metadata: {},
      status: "Failure",
      message: this.message,
      reason: this.reason,
      ...(this.details ? { details: this.details } : {}),
      code: this.code,
    };
  }
}

/** `pods "x" not found`, `jobs.batch "x" not found`: the qualified resource the server prints. */
export function qualified(resource: string, group: string): string {
  return group === "" ? resource : `${resource}.${group}`;
}

export function notFound(resource: string, group: string, name: string): StatusError {
  return new StatusError(404, "NotFound", `${qualified(resource, group)} "${name}" not found`, {
    name,
    group,
    kind: resource,
  });
}

export function alreadyExists(resource: string, group: string, name: string): StatusError {
  return new StatusError(409, "AlreadyExists", `${qualified(resource, group)} "${name}" already exists`, {
    name,
    group,
    kind: resource,
  });
}

export function conflict(resource: string, group: string, name: string, why: string): StatusError {
  return new StatusError(
    409,
    "Conflict",
    `Operation cannot be fulfilled on ${qualified(resource, group)} "${name}": ${why}`,
    { name, group, kind: resource },
  );
}

export const staleMessage =
  "the object has been modified; please apply your changes to the latest version and try again";

export function invalid(kind: string, group: string, name: string, causes: StatusCause[]): StatusError {
  const text = causes.map((c) => `${c.field ?? ""}: ${c.message ?? ""}`).join(", ");
  return new StatusError(422, "Invalid", `${qualified(kind, group)} "${name}" is invalid: ${text}`, {
    name,
    group,
    kind,
    causes,
  });
}

export function badRequest(message: string): StatusError {
  return new StatusError(400, "BadRequest", message);
}

export function gone(message: string): StatusError {
  return new StatusError(410, "Expired", message);
}

export function forbidden(message: string): StatusError {
  return new StatusError(403, "Forbidden", message);
}

export function unsupportedMediaType(contentType: string): StatusError {
  return new StatusError(
    415,
    "UnsupportedMediaType",
    `the body of the request was in an unknown format - accepted media types include: application/json-patch+json, application/merge-patch+json, application/apply-patch+yaml, application/strategic-merge-patch+json (got ${contentType})`,
  );
}

export function methodNotAllowed(message: string): StatusError {
  return new StatusError(405, "MethodNotAllowed", message);
}
