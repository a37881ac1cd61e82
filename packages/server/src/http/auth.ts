import { DroverError, hashToken, routes, tokenKind, type Agent, type AuthKind, type Pool } from "@drover/protocol";
import type { FastifyReply, FastifyRequest, onRequestAsyncHookHandler } from "fastify";
import { authenticateSession } from "../store/agents.js";
import type { StoreContext } from "../store/context.js";
import { authenticatePoolToken } from "../store/pools.js";
import { authenticateJobToken, type JobRow } from "../store/queue.js";
import { authenticateUserToken } from "../store/user-tokens.js";
import { parse } from "./errors.js";
import { requireWebSession, sessionCookieOf, type WebCaller } from "./web-session.js";

/**
 * The token a request presents: `Authorization: Bearer <token>`, or basic auth whose password
 * is the token (terraform's http backend sends TF_HTTP_PASSWORD that way).
 */
export function presentedToken(request: FastifyRequest): string {
  const header = request.headers.authorization;
  if (!header)
    throw new DroverError("unauthorized", "missing Authorization header: send `Authorization: Bearer <token>`");
  const [scheme, value] = header.split(/\s+/, 2);
  if (scheme?.toLowerCase() === "bearer" && value) return value.trim();
  if (scheme?.toLowerCase() === "basic" && value) {
    const decoded = Buffer.from(value, "base64").toString("utf8");
    const colon = decoded.indexOf(":");
    const password = colon >= 0 ? decoded.slice(colon + 1) : "";
    if (password) return password;
  }
  throw new DroverError(
    "unauthorized",
    "malformed Authorization header: use `Bearer <token>` or basic auth with the token as password",
  );
}

/** A user API caller: the API token it presented, or the browser session that stands for one. */
export interface UserCaller {
  tokenId: string;
  /** Set when the caller came with the session cookie instead of a bearer token. */
  web?: WebCaller;
}

/** Authenticates a user API caller: an `Authorization` header, else the browser's session cookie. */
export async function requireUser(ctx: StoreContext, request: FastifyRequest): Promise<UserCaller> {
  if (request.headers.authorization === undefined) {
    const cookie = sessionCookieOf(request);
    if (cookie !== undefined) return requireWebSession(ctx, request, cookie);
  }
  const token = presentedToken(request);
  const kind = tokenKind(token);
  if (kind === "pool" || kind === "session" || kind === "job") {
    throw new DroverError("forbidden", `a ${kind} token cannot use the user API; use an API token`);
  }
  if (kind === "web")
    throw new DroverError("forbidden", "a browser session works only as its cookie; send an API token instead");
  return authenticateUserToken(ctx, token);
}

export async function requirePoolToken(ctx: StoreContext, request: FastifyRequest) {
  const token = presentedToken(request);
  if (tokenKind(token) !== "pool") throw new DroverError("unauthorized", "this call needs a pool token (drv_p_…)");
  return authenticatePoolToken(ctx, token);
}

export async function requireSession(ctx: StoreContext, request: FastifyRequest): Promise<Agent> {
  const token = presentedToken(request);
  if (tokenKind(token) !== "session")
    throw new DroverError("unauthorized", "this call needs the agent session token returned by register");
  return authenticateSession(ctx, token);
}

/** The job behind a job token, which must be the job named in the path. */
export async function requireJob(ctx: StoreContext, request: FastifyRequest, jobId: string): Promise<JobRow> {
  const token = presentedToken(request);
  if (tokenKind(token) !== "job") throw new DroverError("unauthorized", "this call needs the job token of the job");
  const job = await authenticateJobToken(ctx, token);
  if (job.id !== jobId) throw new DroverError("forbidden", `this job token belongs to job ${job.id}, not ${jobId}`);
  return job;
}

/** Who may touch a workspace's state: any user token, or a job token (scoped to its workspace by the route). */
export async function requireStateCaller(ctx: StoreContext, request: FastifyRequest): Promise<{ job: JobRow | null }> {
  const token = presentedToken(request);
  if (tokenKind(token) === "job") return { job: await authenticateJobToken(ctx, token) };
  await requireUser(ctx, request);
  return { job: null };
}

/** Who called a route, by the auth kind the route table gives it. */
export interface Callers {
  none: undefined;
  user: UserCaller;
  pool: { tokenId: string; pool: Pool };
  session: Agent;
  job: JobRow;
  state: { job: JobRow | null };
}

/** How each auth kind finds its caller. */
export type Authenticators = {
  [K in Exclude<AuthKind, "none">]: (request: FastifyRequest) => Promise<Callers[K]>;
};

/** The authenticators of a store: what the registrar runs for the auth a route declares. */
export function authenticators(ctx: StoreContext): Authenticators {
  return {
    user: (request) => requireUser(ctx, request),
    pool: (request) => requirePoolToken(ctx, request),
    session: (request) => requireSession(ctx, request),
    // Every job route names its job in the path: a job token is good for that job only.
    job: (request) => requireJob(ctx, request, parse(routes.startJob.params, request.params, "path").id),
    state: (request) => requireStateCaller(ctx, request),
  };
}

/*
 * Authentication runs in onRequest hooks, before Fastify reads the body: an anonymous or
 * forged caller is answered 401 without the server buffering what it sends, and the
 * connection is closed so the rest of its upload is not read either.
 */
const callers = new WeakMap<FastifyRequest, unknown>();

/** Bodies above this size count as uploads, of which one caller may send `maxUploadsPerCaller` at once. */
export const largeBodyBytes = 1024 * 1024;
/** Concurrent large uploads per token: each is buffered (up to its route's limit) before it is stored. */
export const maxUploadsPerCaller = 2;
const uploadsInFlight = new Map<string, number>();

/** An onRequest hook that authenticates with `check` and keeps what it returns for the handler. */
export function authenticateFirst<T>(check: (request: FastifyRequest) => Promise<T>): onRequestAsyncHookHandler {
  return async function (request, reply) {
    try {
      callers.set(request, await check(request));
      claimUploadSlot(request, reply);
    } catch (err) {
      if (hasBody(request)) void reply.header("connection", "close");
      throw err;
    }
  };
}

/** Refuses a caller's third concurrent large upload (429) before its body is read. */
function claimUploadSlot(request: FastifyRequest, reply: FastifyReply): void {
  const length = Number(request.headers["content-length"] ?? "0");
  if (!(length > largeBodyBytes || request.headers["transfer-encoding"] !== undefined)) return;
  claimSlot(
    uploadsInFlight,
    maxUploadsPerCaller,
    request,
    reply,
    (now) => `this token already has ${now} large uploads in progress; wait for one to finish and retry`,
  );
}

/**
 * Log appends one token may have in flight, whatever their size: each is held in memory whole
 * (up to 1 MiB) until stored, and one ahead of its turn waits. Agents keep two in flight.
 */
export const maxAppendsPerCaller = 4;
const appendsInFlight = new Map<string, number>();

/** An onRequest hook after authentication: appends beyond `maxAppendsPerCaller` get 429 before their bodies are read. */
export const limitConcurrentAppends: onRequestAsyncHookHandler = async function (request, reply) {
  try {
    const refusal = (now: number) =>
      `this token already has ${now} log appends in progress; wait for their answers and retry`;
    claimSlot(appendsInFlight, maxAppendsPerCaller, request, reply, refusal);
  } catch (err) {
    if (hasBody(request)) void reply.header("connection", "close");
    throw err;
  }
};

/** Counts one request of the caller's token in `inFlight` until its response closes; refuses it (429) at `max`. */
function claimSlot(
  inFlight: Map<string, number>,
  max: number,
  request: FastifyRequest,
  reply: FastifyReply,
  refusal: (now: number) => string,
): void {
  // A browser's requests count against its session, as a client's count against its token.
  const cookie = request.headers.authorization === undefined ? sessionCookieOf(request) : undefined;
  const key = hashToken(cookie ?? presentedToken(request));
  const now = inFlight.get(key) ?? 0;
  if (now >= max) throw new DroverError("too_many_requests", refusal(now));
  inFlight.set(key, now + 1);
  reply.raw.once("close", () => {
    const left = (inFlight.get(key) ?? 1) - 1;
    if (left <= 0) inFlight.delete(key);
    else inFlight.set(key, left);
  });
}

/** What the request's onRequest authentication returned; serve.ts types it by the route's auth kind. */
export function authenticatedCaller(request: FastifyRequest): unknown {
  if (!callers.has(request)) throw new Error(`no authentication ran for ${request.method} ${request.url}`);
  return callers.get(request);
}

function hasBody(request: FastifyRequest): boolean {
  const length = request.headers["content-length"];
  return request.headers["transfer-encoding"] !== undefined || (length !== undefined && length !== "0");
}

/** An AbortSignal that fires when the client goes away or the server shuts down. */
export function requestSignal(reply: FastifyReply, shutdown: AbortSignal): AbortSignal {
  const controller = new AbortController();
  if (shutdown.aborted) {
    controller.abort();
    return controller.signal;
  }
  // The open requests are kept in a Set that one listener on the shutdown signal aborts: adding
  // and removing an EventTarget listener per request walks the target's list (thousands of
  // long-polls at once), and AbortSignal.any kept a dependent signal per request on it.
  const open = openRequests(shutdown);
  open.add(controller);
  reply.raw.once("close", () => {
    open.delete(controller);
    // A response's "close" before it finished means the client went away; an answered request
    // needs no abort (each one made an AbortError, seen in the profile of thousands of polls).
    if (!reply.raw.writableFinished) controller.abort();
  });
  return controller.signal;
}

const openBySignal = new WeakMap<AbortSignal, Set<AbortController>>();

/** The controllers of requests open under `shutdown`, all aborted when it fires. */
function openRequests(shutdown: AbortSignal): Set<AbortController> {
  let open = openBySignal.get(shutdown);
  if (!open) {
    const set = new Set<AbortController>();
    openBySignal.set(shutdown, (open = set));
    shutdown.addEventListener(
      "abort",
      () => {
        for (const c of set) c.abort();
        set.clear();
      },
      { once: true },
    );
  }
  return open;
}
