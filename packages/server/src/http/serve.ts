import type { ReplyOf, Route } from "@drover/protocol";
import type { FastifyInstance, FastifyReply, FastifyRequest, RouteShorthandOptions } from "fastify";
import type { z } from "zod";
import type { StoredBody } from "../store/bodies.js";
import { authenticatedCaller, authenticateFirst, type Authenticators, type Callers } from "./auth.js";
import { parse } from "./errors.js";

/*
 * Registers handlers from the protocol's route table: the method, path, status and content
 * type come from the table, params and query are parsed with its schemas, and a handler's
 * result must have the type of the route's response schema — a wrong shape does not compile.
 * With `validateResponses` (tests) every JSON result is also checked against the schema at
 * run time, so a cast or an `unknown` that slipped past the compiler still fails loudly.
 * The registrar also runs the authentication of the route's auth kind, before the route's own
 * onRequest hooks, and hands the handler the caller it found, typed by that kind.
 */

/** The parsed request a handler receives. */
export interface Input<R extends Route> {
  params: z.output<R["params"]>;
  query: z.output<R["query"]>;
  /** JSON routes: the parsed body. Raw routes: the bytes, or undefined when none came. */
  body: R["body"] extends { kind: "json"; schema: infer S extends z.ZodType }
    ? z.output<S>
    : R["body"] extends { kind: "raw" }
      ? Buffer | undefined
      : undefined;
  /** Who called: the user token, pool token, agent session or job the route's auth kind admits. */
  caller: Callers[R["auth"]];
}

/**
 * What a handler returns: JSON routes the response body; raw routes the bytes or a stored body
 * (streamed; null for the route's empty status, e.g. 204 for no state yet); empty routes nothing.
 */
export type Result<R extends Route> = R["response"] extends { kind: "json" }
  ? ReplyOf<R>
  : R["response"] extends { kind: "raw" }
    ? Buffer | string | StoredBody | null
    : void;

/** A handler that answered by itself (an error body the coded errors cannot express). */
export interface Answered {
  readonly answered: true;
}
const answeredMarker: Answered = { answered: true };

/** Marks a reply the handler has already sent; the registrar then leaves it alone. */
export function answered(reply: FastifyReply): Answered {
  if (!reply.sent) throw new Error("answered() before the reply was sent");
  return answeredMarker;
}

/** A route handler; `reply` is for headers only (the status and body come from the table and the result). */
export type Handler<R extends Route> = (
  input: Input<R>,
  req: FastifyRequest,
  reply: FastifyReply,
) => Promise<Result<R> | Answered>;

/** Registers routes of the table on one prefixed Fastify scope. */
export interface Registrar {
  <R extends Route>(route: R, handler: Handler<R>): void;
  <R extends Route>(route: R, options: RouteShorthandOptions, handler: Handler<R>): void;
}

/** Whether JSON results are checked against their schemas at run time (tests turn it on), and how callers authenticate. */
export interface ServeOptions {
  validateResponses: boolean;
  authenticators: Authenticators;
}

/** The caller of a request to `route`, for hooks that run before its handler (after onRequest). */
export function callerOf<R extends Route>(_route: R, request: FastifyRequest): Callers[R["auth"]] {
  return authenticatedCaller(request) as Callers[R["auth"]];
}

/** The onRequest hooks of a route: its auth kind's authentication first, then its own. */
function onRequestHooks(route: Route, shorthand: RouteShorthandOptions, authenticators: Authenticators) {
  const own = shorthand.onRequest === undefined ? [] : [shorthand.onRequest].flat();
  if (route.auth === "none") return own;
  const check: (request: FastifyRequest) => Promise<unknown> = authenticators[route.auth];
  return [authenticateFirst(check), ...own];
}

/** A registrar for `scope`, which Fastify mounted at `prefix`. */
export function registrar(scope: FastifyInstance, prefix: string, options: ServeOptions): Registrar {
  return <R extends Route>(route: R, a: RouteShorthandOptions | Handler<R>, b?: Handler<R>) => {
    const shorthand = typeof a === "function" ? {} : a;
    const handler = typeof a === "function" ? a : b;
    if (!handler) throw new Error(`no handler for ${route.method} ${route.path}`);
    if (!route.path.startsWith(prefix)) throw new Error(`${route.path} is not under ${prefix}`);
    const onRequest = onRequestHooks(route, shorthand, options.authenticators);
    scope.route({
      ...shorthand,
      ...(onRequest.length > 0 ? { onRequest } : {}),
      method: route.method,
      url: route.path.slice(prefix.length) || "/",
      handler: async (req, reply) => {
        const input = {
          params: parse(route.params, req.params, "path"),
          query: parse(route.query, req.query, "query"),
          body:
            route.body.kind === "json"
              ? parse(route.body.schema, req.body)
              : route.body.kind === "raw" && Buffer.isBuffer(req.body)
                ? req.body
                : undefined,
          caller: route.auth === "none" ? undefined : authenticatedCaller(req),
        } as Input<R>;
        const result = await handler(input, req, reply);
        return send(route, result, reply, options);
      },
    });
  };
}

function send(route: Route, result: unknown, reply: FastifyReply, options: ServeOptions): FastifyReply {
  if (result === answeredMarker) return reply;
  const spec = route.response;
  switch (spec.kind) {
    case "json": {
      if (options.validateResponses) {
        const checked = spec.schema.safeParse(result);
        if (!checked.success)
          throw new Error(
            `${route.method} ${route.path} answered outside its response schema: ${checked.error.message}`,
          );
      }
      return reply.code(spec.status).send(result);
    }
    case "raw": {
      if (result === null) return reply.code(spec.emptyStatus ?? 204).send();
      if (reply.getHeader("content-type") === undefined) void reply.header("content-type", spec.contentType);
      if (isStoredBody(result))
        return reply.code(spec.status).header("content-length", result.size).send(result.open());
      return reply.code(spec.status).send(result);
    }
    case "empty":
      return reply.code(spec.status).send();
  }
}

function isStoredBody(value: unknown): value is StoredBody {
  return (
    typeof value === "object" &&
    value !== null &&
    typeof (value as StoredBody).open === "function" &&
    typeof (value as StoredBody).size === "number"
  );
}
