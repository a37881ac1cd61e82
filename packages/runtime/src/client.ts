import type { Dispatcher } from "undici";
import { EnvHttpProxyAgent, request } from "./transport.js";
import {
  DroverError,
  isErrorCode,
  routePath,
  type BodyOf,
  type ErrorCode,
  type ParamsOf,
  type QueryOf,
  type ResultOf,
  type Route,
} from "@drover/protocol";

/*
 * The one HTTP client of the API, used by the CLI, the agent, the tests and the bench. It
 * builds requests from the route table, puts a deadline on every call (headers *and* body),
 * checks answers against the route's response schema, and decodes every failure the same
 * way: a coded error body keeps its code; no answer is `server_unreachable`; an answer
 * outside the contract is `unexpected_response`.
 */

/** Default whole-call deadline, in ms. */
export const defaultRequestTimeoutMs = 60_000;

/** How a client reaches the server. */
export interface ClientOptions {
  /** Server URL without a trailing path, e.g. `https://drover.example.com`. */
  baseUrl: string;
  /** Token sent when a call names none. */
  token?: string | undefined;
  /** Whole-call deadline (connect, headers and body) of a call that sets none, in ms. */
  timeoutMs?: number | undefined;
  /** Transport (proxy, CA); by default one honouring HTTP(S)_PROXY / NO_PROXY. */
  dispatcher?: Dispatcher | undefined;
}

/** Options of one call. */
export interface CallOptions {
  /** Token of this call (agent calls switch between pool, session and job tokens). */
  token?: string | undefined;
  /** The caller's stop signal: aborting it ends the call with its reason (not a coded error). */
  signal?: AbortSignal | undefined;
  /** This call's deadline in ms; long-polls pass their wait plus some slack. */
  timeoutMs?: number | undefined;
  /**
   * What `timeoutMs` bounds: the whole call (the default), or each wait for the answer's next
   * bytes, for a download of unknown size that may be slow but must not stall.
   */
  deadlineOn?: "whole call" | "progress" | undefined;
  /** Extra request headers (e.g. Content-MD5 for state writes). */
  headers?: Record<string, string> | undefined;
}

/** The type with no members: whatever has no required member extends it. */
type Nothing = Record<never, never>;
/** The request of one route: its params, query and body, typed from the table. */
export type RequestOf<R extends Route> = CallOptions &
  (Nothing extends ParamsOf<R> ? { params?: ParamsOf<R> } : { params: ParamsOf<R> }) &
  (Nothing extends QueryOf<R> ? { query?: QueryOf<R> } : { query: QueryOf<R> }) &
  (BodyOf<R> extends undefined ? { body?: undefined } : { body: BodyOf<R> });

/** A whole answer: status, headers and bytes. */
export interface RawAnswer {
  status: number;
  headers: Record<string, string | string[] | undefined>;
  body: Buffer;
}

/** A coded error decoded from an HTTP answer: keeps the status and the server's extra fields. */
export class ApiError extends DroverError {
  /** The HTTP status the server (or a proxy before it) answered. */
  readonly httpStatus: number;
  /** The `Retry-After` header, in ms, when the server sent one. */
  readonly retryAfterMs: number | undefined;

  constructor(
    code: ErrorCode,
    message: string,
    options: {
      httpStatus: number;
      retryAfterMs?: number | undefined;
      details?: Record<string, unknown>;
      cause?: unknown;
      hint?: string;
    },
  ) {
    super(code, message, {
      details: options.details,
      cause: options.cause,
      ...(options.hint === undefined ? {} : { hint: options.hint }),
    });
    this.name = "ApiError";
    this.httpStatus = options.httpStatus;
    this.retryAfterMs = options.retryAfterMs;
  }
}

/** Parses `Retry-After` (seconds or an HTTP date) into ms; undefined when absent or invalid. */
export function parseRetryAfterMs(value: string | string[] | undefined, now = Date.now()): number | undefined {
  const text = Array.isArray(value) ? value[0] : value;
  if (text === undefined || text.trim() === "") return undefined;
  if (/^\d+$/.test(text.trim())) return Number(text.trim()) * 1000;
  const date = Date.parse(text);
  return Number.isNaN(date) ? undefined : Math.max(0, date - now);
}

// Statuses whose meaning is unambiguous even without our error body (terraform's 423 carries
// the lock holder's LockInfo; a proxy in front answers 502-504 when the server is away).
const codeByBareStatus: Partial<Record<number, ErrorCode>> = {
  401: "unauthorized",
  403: "forbidden",
  404: "not_found",
  413: "payload_too_large",
  423: "state_locked",
  429: "too_many_requests",
  502: "server_unreachable",
  503: "server_unreachable",
  504: "server_unreachable",
};

/** The coded error for a failed HTTP answer (status ≥ 400). */
export function decodeErrorAnswer(what: string, answer: RawAnswer): ApiError {
  const retryAfterMs = parseRetryAfterMs(answer.headers["retry-after"]);
  let parsed: unknown;
  try {
    parsed = JSON.parse(answer.body.toString("utf8"));
  } catch {
    parsed = undefined;
  }
  if (typeof parsed === "object" && parsed !== null && !Array.isArray(parsed)) {
    const { error, message, ...details } = parsed as Record<string, unknown>;
    if (isErrorCode(error) && typeof message === "string")
      return new ApiError(error, message, { httpStatus: answer.status, retryAfterMs, details });
  }
  const code = codeByBareStatus[answer.status] ?? "unexpected_response";
  const snippet = answer.body.toString("utf8", 0, Math.min(answer.body.length, 200)).replace(/\s+/g, " ").trim();
  const details =
    code === "state_locked" && typeof parsed === "object" && parsed !== null
      ? (parsed as Record<string, unknown>)
      : undefined;
  return new ApiError(code, `${what} answered HTTP ${answer.status}${snippet ? `: ${snippet}` : ""}`, {
    httpStatus: answer.status,
    retryAfterMs,
    ...(details ? { details } : {}),
  });
}

/** The HTTP client of the Drover API. */
export class DroverClient {
  readonly baseUrl: string;
  readonly timeoutMs: number;
  readonly dispatcher: Dispatcher;
  private readonly token: string | undefined;
  private readonly ownsDispatcher: boolean;

  constructor(options: ClientOptions) {
    this.baseUrl = options.baseUrl.replace(/\/+$/, "");
    this.token = options.token;
    this.timeoutMs = options.timeoutMs ?? defaultRequestTimeoutMs;
    if (!Number.isFinite(this.timeoutMs) || this.timeoutMs <= 0)
      throw new Error(`a request deadline must be a positive number of ms, not ${this.timeoutMs}`);
    this.ownsDispatcher = options.dispatcher === undefined;
    // An http:// server is asked for in absolute form, not tunnelled: many proxies tunnel only to 443.
    this.dispatcher = options.dispatcher ?? new EnvHttpProxyAgent({ proxyTunnel: false });
  }

  /** Calls a route of the table and returns its checked result; a failure is a DroverError. */
  async call<R extends Route>(route: R, input: RequestOf<R>): Promise<ResultOf<R>> {
    return (await this.exchange(route, input)).result;
  }

  /** Like `call`, also returning the answer's status and headers (log reads need both). */
  async exchange<R extends Route>(
    route: R,
    input: RequestOf<R>,
  ): Promise<{ result: ResultOf<R>; status: number; headers: RawAnswer["headers"] }> {
    const loose = input as CallOptions & {
      params?: Record<string, string>;
      query?: Record<string, unknown>;
      body?: unknown;
    };
    let path = routePath(route, loose.params ?? {});
    const query = new URLSearchParams();
    for (const [key, value] of Object.entries(loose.query ?? {}))
      if (value !== undefined) query.set(key, String(value));
    if ([...query.keys()].length > 0) path += `?${query.toString()}`;
    const headers: Record<string, string> = { ...loose.headers };
    let body: Buffer | string | undefined;
    if (route.body.kind === "json" && loose.body !== undefined) {
      headers["content-type"] = "application/json";
      body = JSON.stringify(loose.body);
    } else if (route.body.kind === "raw" && Buffer.isBuffer(loose.body)) {
      headers["content-type"] ??= route.body.contentType;
      body = loose.body;
    }
    const what = `${route.method} ${route.path}`;
    const answer = await this.request(route.method, path, { ...loose, headers, body });
    if (answer.status >= 400) throw decodeErrorAnswer(`${what} at ${this.baseUrl}`, answer);
    const spec = route.response;
    const expected: number[] =
      spec.kind === "raw" && spec.emptyStatus !== undefined ? [spec.status, spec.emptyStatus] : [spec.status];
    if (!expected.includes(answer.status)) {
      throw new ApiError(
        "unexpected_response",
        `${what} at ${this.baseUrl} answered HTTP ${answer.status}, not ${expected.join(" or ")}`,
        { httpStatus: answer.status },
      );
    }
    let result: unknown;
    if (spec.kind === "json") {
      let parsed: unknown;
      try {
        parsed = JSON.parse(answer.body.toString("utf8"));
      } catch (err) {
        throw new ApiError("unexpected_response", `${what} at ${this.baseUrl} answered something that is not JSON`, {
          httpStatus: answer.status,
          cause: err,
        });
      }
      const checked = spec.schema.safeParse(parsed);
      if (!checked.success)
        throw new ApiError(
          "unexpected_response",
          `${what} at ${this.baseUrl} answered outside the API contract: ${checked.error.message}`,
          { httpStatus: answer.status },
        );
      result = checked.data;
    } else if (spec.kind === "raw") {
      result = answer.body;
    }
    return { result: result as ResultOf<R>, status: answer.status, headers: answer.headers };
  }

  /**
   * One request by method and path, answered whatever its status. For what the table cannot
   * express: tests that send malformed input on purpose. Unreachable or too slow is a
   * `server_unreachable` DroverError; the caller's abort rethrows its reason.
   */
  async request(
    method: string,
    path: string,
    options: CallOptions & { body?: Buffer | string | undefined } = {},
  ): Promise<RawAnswer> {
    const token = options.token ?? this.token;
    const headers: Record<string, string> = {
      ...(token ? { authorization: `Bearer ${token}` } : {}),
      ...options.headers,
    };
    const timeoutMs = options.timeoutMs ?? this.timeoutMs;
    const onProgress = options.deadlineOn === "progress";
    const limit = callDeadline(options.signal, timeoutMs);
    try {
      const res = await request(this.baseUrl + path, {
        method: method as Dispatcher.HttpMethod,
        headers,
        body: options.body,
        dispatcher: this.dispatcher,
        signal: limit.signal,
        // The call's own deadline governs: the dispatcher's defaults must not cut a longer call short.
        headersTimeout: timeoutMs,
        bodyTimeout: timeoutMs,
      });
      // Read inside the deadline: a server that sends headers and then stalls is no answer either.
      const chunks: Buffer[] = [];
      for await (const chunk of res.body as AsyncIterable<Buffer>) {
        chunks.push(chunk);
        if (onProgress) limit.restart();
      }
      return { status: res.statusCode, headers: res.headers, body: Buffer.concat(chunks) };
    } catch (err) {
      if (options.signal?.aborted) throw options.signal.reason ?? err;
      const at = `${method} ${path.split("?")[0]}`;
      if (limit.timedOut()) {
        const late = onProgress
          ? `the Drover server at ${this.baseUrl} sent nothing for ${timeoutMs} ms (${at})`
          : `no answer from the Drover server at ${this.baseUrl} within ${timeoutMs} ms (${at})`;
        throw new ApiError("server_unreachable", late, { httpStatus: 0, cause: err });
      }
      if (this.baseUrl.startsWith("https:") && isPlainHttpAnswer(err)) {
        const plain = this.baseUrl.replace(/^https:/, "http:");
        throw new ApiError(
          "server_unreachable",
          `the server at ${this.baseUrl} did not answer TLS (${at}): the server may not speak HTTPS; try ${plain}`,
          {
            httpStatus: 0,
            cause: err,
            hint: "Give the http:// URL (--url / DROVER_URL), or serve HTTPS (DROVER_TLS_CERT_FILE and DROVER_TLS_KEY_FILE).",
          },
        );
      }
      throw new ApiError(
        "server_unreachable",
        `cannot reach the Drover server at ${this.baseUrl} (${at}): ${describe(err)}`,
        { httpStatus: 0, cause: err },
      );
    } finally {
      limit.dispose();
    }
  }

  /** Closes the connections of a dispatcher this client created; a caller's dispatcher is the caller's to close. */
  async close(): Promise<void> {
    if (this.ownsDispatcher) await this.dispatcher.close();
  }
}

/**
 * OpenSSL's reading of a plain-HTTP answer to a TLS hello: its first bytes ("HTTP/1.1 400")
 * taken as a TLS record header give a bad version or an absurd length.
 */
function isPlainHttpAnswer(err: unknown): boolean {
  for (let e = err; e instanceof Error; e = e.cause) {
    const code = (e as { code?: unknown }).code;
    if (code === "ERR_SSL_WRONG_VERSION_NUMBER" || code === "ERR_SSL_PACKET_LENGTH_TOO_LONG") return true;
  }
  return false;
}

function describe(err: unknown): string {
  if (!(err instanceof Error)) return String(err);
  const code = (err.cause as { code?: unknown } | undefined)?.code ?? (err as { code?: unknown }).code;
  return typeof code === "string" && !err.message.includes(code) ? `${err.message} (${code})` : err.message;
}

/**
 * A signal that aborts when `parent` does or after `ms` (counted again from each `restart()`).
 * Linked by hand rather than with AbortSignal.any so that the listener on a long-lived parent is
 * removed when the call ends.
 */
function callDeadline(
  parent: AbortSignal | undefined,
  ms: number,
): { signal: AbortSignal; timedOut(): boolean; restart(): void; dispose(): void } {
  const controller = new AbortController();
  let expired = false;
  const onParent = () => controller.abort(parent?.reason);
  if (parent?.aborted) controller.abort(parent.reason);
  else parent?.addEventListener("abort", onParent, { once: true });
  const timer = setTimeout(() => {
    expired = true;
    controller.abort(new Error(`deadline of ${ms} ms passed`));
  }, ms);
  timer.unref();
  return {
    signal: controller.signal,
    timedOut: () => expired,
    restart: () => void timer.refresh(),
    dispose() {
      clearTimeout(timer);
      parent?.removeEventListener("abort", onParent);
    },
  };
}
