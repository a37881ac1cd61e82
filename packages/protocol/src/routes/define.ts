import { z } from "zod";
import type { ErrorCode } from "../errors.js";
import * as s from "../schemas.js";

/** Path prefixes of the two HTTP APIs. */
export const userApi = "/api/v1";
export const agentApi = "/api/agent/v1";

/** Headers of the log read endpoint. */
export const logHeaders = {
  /** Byte offset just past the returned bytes: where the next read starts. */
  nextOffset: "x-drover-log-offset",
  /** "true" once the job has finished and every byte up to nextOffset is returned. */
  complete: "x-drover-log-complete",
} as const;

/** The longest a long-poll may hold a request; proxies cut idle requests at 60 s. */
export const maxLongPollMs = 50_000;

/** Largest log chunk the server accepts in one append. */
export const maxLogChunkBytes = 1024 * 1024;

/** Who may call a route: the token kind it needs (`state`: a user token or the workspace's job token). */
export type AuthKind = "none" | "user" | "pool" | "session" | "job" | "state";

/** Methods the server serves; LOCK and UNLOCK are terraform's http state backend. */
export type RouteMethod = "GET" | "POST" | "PUT" | "PATCH" | "DELETE" | "LOCK" | "UNLOCK";

/** A request body: JSON checked by a schema, or raw bytes of a content type. */
export type BodySpec = { kind: "json"; schema: z.ZodType } | { kind: "raw"; contentType: string } | { kind: "none" };

/** A success response: JSON checked by a schema, raw bytes, or nothing. */
export type ResponseSpec =
  | { status: 200 | 201 | 202; kind: "json"; schema: z.ZodType }
  | { status: 200; kind: "raw"; contentType: string; emptyStatus?: 204 }
  | { status: 200 | 204; kind: "empty" };

type AnyObject = z.ZodObject<z.ZodRawShape>;

/** One route of the table. */
export interface Route<
  P extends AnyObject = AnyObject,
  Q extends AnyObject = AnyObject,
  B extends BodySpec = BodySpec,
  R extends ResponseSpec = ResponseSpec,
  A extends AuthKind = AuthKind,
> {
  method: RouteMethod;
  path: string;
  summary: string;
  /** The server authenticates the caller by this kind and hands the handler a caller of its type. */
  auth: A;
  params: P;
  query: Q;
  body: B;
  response: R;
  /** Codes this route answers beyond those of its auth kind and the ones every route may give. */
  errors: readonly ErrorCode[];
}

/** Codes any route may answer: bad input, too many large uploads at once, an outage, a bug. */
export const commonErrors: readonly ErrorCode[] = [
  "bad_request",
  "too_many_requests",
  "internal",
  "database_unavailable",
];

/** Codes each auth kind adds: a missing, unknown, revoked or misdirected token. */
export const authErrors: Record<AuthKind, readonly ErrorCode[]> = {
  none: [],
  user: ["unauthorized", "token_revoked", "forbidden"],
  pool: ["unauthorized", "token_revoked"],
  session: ["unauthorized", "token_revoked", "agent_lost"],
  job: ["unauthorized", "forbidden", "stale_attempt", "job_finished"],
  state: ["unauthorized", "token_revoked", "forbidden", "stale_attempt", "job_finished"],
};

const noParams = z.object({});
const noQuery = z.object({});
export const none = { kind: "none" } as const;
export const json = <S extends z.ZodType>(schema: S) => ({ kind: "json", schema }) as const;
export const raw = <C extends string>(contentType: C) => ({ kind: "raw", contentType }) as const;
export const ok = <S extends z.ZodType>(schema: S) => ({ status: 200, kind: "json", schema }) as const;
export const created = <S extends z.ZodType>(schema: S) => ({ status: 201, kind: "json", schema }) as const;
export const accepted = <S extends z.ZodType>(schema: S) => ({ status: 202, kind: "json", schema }) as const;
export const noContent = { status: 204, kind: "empty" } as const;
export const emptyOk = { status: 200, kind: "empty" } as const;
export const bytes = (contentType: string) => ({ status: 200, kind: "raw", contentType }) as const;

/** A route of the table: the parts it leaves out are none (no params, query, body or own error codes). */
export function route<
  P extends AnyObject = typeof noParams,
  Q extends AnyObject = typeof noQuery,
  B extends BodySpec = typeof none,
  R extends ResponseSpec = typeof noContent,
  A extends AuthKind = AuthKind,
>(def: {
  method: RouteMethod;
  path: string;
  summary: string;
  auth: A;
  params?: P;
  query?: Q;
  body?: B;
  response: R;
  errors?: readonly ErrorCode[];
}): Route<P, Q, B, R, A> {
  return {
    ...def,
    params: def.params ?? (noParams as unknown as P),
    query: def.query ?? (noQuery as unknown as Q),
    body: def.body ?? (none as unknown as B),
    errors: def.errors ?? [],
  };
}

/** Path parameters shared by several areas. */
export const id = z.object({ id: z.string() });
export const ws = z.object({ ws: z.string() });
export const list = s.listOf;
export const page = s.pageOf;
