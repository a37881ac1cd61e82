import { DroverError } from "@drover/protocol";
import type { FastifyError, FastifyInstance, FastifyReply, FastifyRequest, onRequestAsyncHookHandler } from "fastify";
import { authenticateFirst, authenticatedCaller, type UserCaller } from "../http/auth.js";
import type { HttpContext } from "../http/context.js";
import { clearsByItself, storageFailure } from "../http/errors.js";
import { retryAfterSeconds } from "../db/health.js";
import { spoolBodies, dropBodies } from "../http/bodies.js";
import type { StoredBody } from "../store/bodies.js";
import { requireReader, requireTfeUser, type TfeReader } from "./remote-state-access.js";
import { errorBody, errorOf, jsonApiContentType, titleOf, type Document } from "./jsonapi.js";

/*
 * The TFE-compatible API has a route table of its own (decision 0068): its documents are
 * JSON:API, its errors `{errors:[…]}` and its request bodies lenient, none of which the
 * protocol's table describes. Each area keeps its routes in a `TfeRoutes` object; tfe/index.ts
 * joins them, and the route tests check that the server registers exactly those.
 */

export const tfeApi = "/api/v2";

/**
 * Who may call: a Drover user token (Bearer), a user token or a run's job token (`reader`: the
 * reads `terraform_remote_state` makes, decision 0072), anyone (`none`), or a capability URL the
 * handler verifies itself.
 */
export type TfeAuth = "user" | "reader" | "none" | "capability";

export interface TfeRoute<A extends TfeAuth = TfeAuth> {
  method: "GET" | "POST" | "PUT" | "PATCH" | "DELETE";
  /** Full path, `:name` for parameters. */
  path: string;
  summary: string;
  auth: A;
  /** Largest request body (default 1 MiB). */
  bodyLimit?: number;
}

export type TfeRoutes = Record<string, TfeRoute>;

export function tfeRoute<A extends TfeAuth>(def: TfeRoute<A>): TfeRoute<A> {
  return def;
}

export interface TfeInput<A extends TfeAuth> {
  params: Record<string, string>;
  query: Record<string, unknown>;
  /** The request's bytes; undefined when none came, or when the route spools them to a file. */
  body: Buffer | undefined;
  caller: A extends "user" ? UserCaller : A extends "reader" ? TfeReader : undefined;
  req: FastifyRequest;
  reply: FastifyReply;
}

/** What a handler answers: a JSON:API document, raw bytes, or nothing. */
export type TfeAnswer =
  | { status: 200 | 201; document: Document }
  | { status: 200; bytes: Buffer | StoredBody; contentType: string }
  | { status: 200 | 202 | 204 };

export const ok = (document: Document): TfeAnswer => ({ status: 200, document });
export const created = (document: Document): TfeAnswer => ({ status: 201, document });
export const noContent: TfeAnswer = { status: 204 };

export type TfeHandler<A extends TfeAuth> = (input: TfeInput<A>) => Promise<TfeAnswer>;

export interface TfeRouteOptions {
  /**
   * A check run before the request's body is read (a capability URL's signature): a request it
   * refuses sends no body into memory, and its connection is closed.
   */
  beforeBody?: (req: FastifyRequest) => Promise<void>;
  /**
   * An upload: `spooled`, its body goes to a file in the server's upload directory as it arrives,
   * never into memory (decision 0012), and the handler reads it with `spooledBody(req)`; `dropped`,
   * it is read to its end within the route's limit and not kept.
   */
  upload?: "spooled" | "dropped";
}

export type TfeRegistrar = <A extends TfeAuth>(
  route: TfeRoute<A>,
  handler: TfeHandler<A>,
  options?: TfeRouteOptions,
) => void;

const defaultBodyLimit = 1024 * 1024;

/**
 * Prepares the /api/v2 scope (headers, body bytes, JSON:API errors and 404s) and returns its
 * registrar. go-tfe reads `TFP-API-Version` (2.5 at least, or the cloud block refuses the
 * server) and `X-RateLimit-Limit` (below 4 its limiter never lets a request through) from the
 * ping; they go on every answer. `X-TFE-Version` and `TFP-AppName` are left out: the client
 * parses or trusts them in ways Drover does not fit.
 */
export function tfeScope(scope: FastifyInstance, http: HttpContext): TfeRegistrar {
  scope.addHook("onSend", async (_req, reply, payload) => {
    void reply.header("tfp-api-version", "2.5").header("x-ratelimit-limit", "30");
    return payload;
  });
  scope.removeAllContentTypeParsers();
  scope.addContentTypeParser("*", { parseAs: "buffer" }, (_req, body, done) => done(null, body));
  scope.setErrorHandler((err: FastifyError | Error, request, reply) => {
    const coded = storageFailure(err, http.storageDir);
    if (coded) request.log.error({ err: coded.message }, "the database could not be written or reached");
    sendError(coded ?? err, request, reply);
  });
  scope.setNotFoundHandler((request, reply) => {
    void reply
      .code(404)
      .type(jsonApiContentType)
      .send(errorBody(404, "not found", `no route ${request.method} ${request.url.split("?")[0]}`));
  });
  const hooks: Partial<Record<TfeAuth, onRequestAsyncHookHandler>> = {
    user: authenticateFirst((request) => requireTfeUser(http.store, request)),
    reader: authenticateFirst((request) => requireReader(http.store, request)),
  };
  // Uploads get scopes of their own, whose one parser spools any body to a file (or drops it).
  // Their plugins run after this scope's, so they add the upload routes registered in the meantime.
  const uploads: Record<"spooled" | "dropped", Array<(upload: FastifyInstance) => void>> = { spooled: [], dropped: [] };
  for (const kind of ["spooled", "dropped"] as const)
    void scope.register(async (upload) => {
      upload.removeAllContentTypeParsers();
      if (kind === "spooled") spoolBodies(upload, "*", http.uploadDir);
      else dropBodies(upload, "*");
      for (const add of uploads[kind]) add(upload);
    });
  return (route, handler, options = {}) => {
    if (!route.path.startsWith(tfeApi)) throw new Error(`${route.path} is not under ${tfeApi}`);
    const hook = hooks[route.auth];
    const { beforeBody } = options;
    const early: onRequestAsyncHookHandler | undefined =
      beforeBody &&
      (async (req, reply) => {
        try {
          await beforeBody(req);
        } catch (err) {
          void reply.header("connection", "close");
          throw err;
        }
      });
    const onRequest = [hook, early].filter((h) => h !== undefined);
    const add = (target: FastifyInstance) =>
      target.route({
        method: route.method,
        url: route.path.slice(tfeApi.length),
        bodyLimit: route.bodyLimit ?? defaultBodyLimit,
        ...(onRequest.length === 0 ? {} : { onRequest }),
        handler: async (req, reply) => {
          const answer = await handler({
            params: req.params as Record<string, string>,
            query: req.query as Record<string, unknown>,
            body: Buffer.isBuffer(req.body) ? req.body : undefined,
            caller: (hook === undefined ? undefined : authenticatedCaller(req)) as TfeInput<
              typeof route.auth
            >["caller"],
            req,
            reply,
          });
          return send(answer, reply);
        },
      });
    if (options.upload) uploads[options.upload].push(add);
    else add(scope);
  };
}

function send(answer: TfeAnswer, reply: FastifyReply): FastifyReply {
  if ("document" in answer) return reply.code(answer.status).type(jsonApiContentType).send(answer.document);
  if ("bytes" in answer) {
    const { bytes } = answer;
    void reply.code(answer.status).type(answer.contentType);
    if (Buffer.isBuffer(bytes)) return reply.send(bytes);
    return reply.header("content-length", bytes.size).send(bytes.open());
  }
  return reply.code(answer.status).send();
}

function sendError(err: FastifyError | Error, request: FastifyRequest, reply: FastifyReply): void {
  const known = errorOf(err);
  if (known) {
    // go-tfe's client honours Retry-After on a 503 (and retries any 5xx).
    if (err instanceof DroverError && clearsByItself(err)) void reply.header("retry-after", String(retryAfterSeconds));
    void reply.code(known.status).type(jsonApiContentType).send(known.body);
    return;
  }
  const fe = err as FastifyError;
  if (typeof fe.statusCode === "number" && fe.statusCode >= 400 && fe.statusCode < 500) {
    void reply
      .code(fe.statusCode)
      .type(jsonApiContentType)
      .send(errorBody(fe.statusCode, titleOf(fe.statusCode), err.message));
    return;
  }
  request.log.error({ err }, "request failed");
  void reply
    .code(500)
    .type(jsonApiContentType)
    .send(errorBody(500, titleOf(500), "see the server log"));
}
