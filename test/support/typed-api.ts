import {
  isTerminalRun,
  maxLongPollMs,
  routePath,
  routes,
  type BodyOf,
  type ParamsOf,
  type Phase,
  type QueryOf,
  type Route,
  type RunStatus,
} from "@drover/protocol";
import { DroverClient } from "@drover/runtime";

/*
 * The tests' HTTP calls, all through the protocol's typed client and the route table, so a
 * route's path is written once: `client()` for typed calls that throw on failure,
 * `routeCall()` for a route answered whatever its status (tests of refusals), and `rawCall()`
 * only for requests outside the table on purpose (unknown paths, attacks); an eslint rule keeps
 * `/api/...` path literals out of tests and the bench.
 */

/** A JSON (or text, or empty) answer, headers as a fetch-style `Headers`. */
export interface ApiResponse {
  status: number;
  body: any;
  headers: Headers;
}

const clients = new Map<string, DroverClient>();

/** One typed client per base URL and token, reused across calls (its connections too). */
export function client(baseUrl: string, token?: string): DroverClient {
  const key = `${baseUrl} ${token ?? ""}`;
  let c = clients.get(key);
  if (!c) {
    c = new DroverClient({ baseUrl, token });
    clients.set(key, c);
  }
  return c;
}

type Nothing = Record<never, never>;

/** What a test sends to a route: its params, query and body from the table, plus a token. */
export type RouteInput<R extends Route> = {
  /** Bearer token of this call. */
  token?: string | undefined;
  headers?: Record<string, string>;
  query?: QueryOf<R>;
  /** A JSON route's body; a raw route also takes text. */
  body?: BodyOf<R> | (R["body"] extends { kind: "raw" } ? string : never);
  /** A body outside the route's contract, sent as it is on purpose (bad-input tests); replaces `body`. */
  invalidBody?: unknown;
} & (Nothing extends ParamsOf<R> ? { params?: ParamsOf<R> } : { params: ParamsOf<R> });

/** The optional or required input argument of a route call. */
export type RouteArgs<R extends Route> =
  Nothing extends RouteInput<R> ? [input?: RouteInput<R>] : [input: RouteInput<R>];

/** Calls a route of the table, answered whatever its status; the body is parsed as in `rawCall`. */
export async function routeCall<R extends Route>(
  baseUrl: string,
  route: R,
  ...[input]: RouteArgs<R>
): Promise<ApiResponse> {
  const given = (input ?? {}) as {
    token?: string;
    headers?: Record<string, string>;
    params?: Record<string, string>;
    query?: Record<string, unknown>;
    body?: unknown;
    invalidBody?: unknown;
  };
  let path = routePath(route, given.params ?? {});
  const query = new URLSearchParams();
  for (const [key, value] of Object.entries(given.query ?? {})) if (value !== undefined) query.set(key, String(value));
  if ([...query.keys()].length > 0) path += `?${query.toString()}`;
  const headers: Record<string, string> = { ...given.headers };
  const body = "invalidBody" in given ? given.invalidBody : given.body;
  if (route.body.kind === "raw" && (Buffer.isBuffer(body) || typeof body === "string"))
    headers["content-type"] ??= route.body.contentType;
  return rawCall(baseUrl, route.method, path, given.token, body, headers);
}

/**
 * Sends `body` (a Buffer as is, a string as JSON text, anything else as JSON) to `path` with a
 * bearer token; the answer's JSON is parsed when it is JSON, else kept as text.
 */
export async function rawCall(
  baseUrl: string,
  method: string,
  path: string,
  token: string | undefined,
  body?: unknown,
  headers: Record<string, string> = {},
): Promise<ApiResponse> {
  const sent: Record<string, string> = { ...headers };
  let payload: Buffer | string | undefined;
  if (Buffer.isBuffer(body)) {
    payload = body;
    sent["content-type"] ??= "application/octet-stream";
  } else if (typeof body === "string") {
    payload = body;
    sent["content-type"] ??= "application/json";
  } else if (body !== undefined) {
    payload = JSON.stringify(body);
    sent["content-type"] ??= "application/json";
  }
  const answer = await client(baseUrl).request(method, path, {
    token,
    headers: sent,
    body: payload,
    timeoutMs: 120_000,
  });
  const text = answer.body.toString("utf8");
  let parsed: unknown = text;
  try {
    parsed = text ? JSON.parse(text) : undefined;
  } catch {
    // not JSON: keep the text
  }
  const out = new Headers();
  for (const [k, v] of Object.entries(answer.headers)) {
    if (v === undefined) continue;
    for (const one of Array.isArray(v) ? v : [v]) out.append(k, one);
  }
  return { status: answer.status, body: parsed, headers: out };
}

/** A phase's whole log, following offsets until the server says it is complete or has no more. */
export async function readPhaseLog(baseUrl: string, token: string, runId: string, phase: Phase): Promise<string> {
  let out = "";
  let offset = 0;
  for (;;) {
    const res = await client(baseUrl, token).exchange(routes.runLogs, {
      params: { id: runId },
      query: { phase, offset },
    });
    out += res.result.toString("utf8");
    offset = Number(res.headers["x-drover-log-offset"]);
    if (res.headers["x-drover-log-complete"] === "true" || res.result.length === 0) return out;
  }
}

/**
 * Waits until run `runId` is in one of `statuses`, on the server's long-poll (the answer comes
 * when the status moves on); fails at once when the run ends in another status, and after
 * `timeoutMs`. A failed call (a server restarting, a database outage) is tried again.
 */
export async function waitForRunStatus(
  baseUrl: string,
  token: string,
  runId: string,
  statuses: readonly string[],
  timeoutMs = 120_000,
): Promise<any> {
  const deadline = Date.now() + timeoutMs;
  let seen: { status: RunStatus; errorMessage?: string | null } | undefined;
  let trouble = "";
  for (;;) {
    const left = deadline - Date.now();
    if (left <= 0)
      throw new Error(`run ${runId} is ${seen?.status ?? "unread"}, expected ${statuses.join("|")}${trouble}`);
    const query = seen ? { wait: Math.min(left, maxLongPollMs), status: seen.status } : {};
    let res: ApiResponse | undefined;
    try {
      res = await routeCall(baseUrl, routes.getRun, { token, params: { id: runId }, query });
    } catch (err) {
      trouble = ` (last call: ${String(err)})`;
    }
    if (res?.status === 200) {
      seen = res.body;
      if (statuses.includes(res.body.status)) return res.body;
      if (isTerminalRun(res.body.status))
        throw new Error(
          `run ${runId} ended ${res.body.status}, expected ${statuses.join("|")}: ${res.body.errorMessage}`,
        );
      continue;
    }
    if (res) trouble = ` (last answer: ${res.status} ${JSON.stringify(res.body)})`;
    // Only after a failed call: a server in trouble is asked again shortly.
    await new Promise((r) => setTimeout(r, 100));
  }
}
