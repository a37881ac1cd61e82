import type { z } from "zod";
import type { ErrorCode } from "./errors.js";
import { authErrors, commonErrors, type Route } from "./routes/define.js";
import { agentRoutes } from "./routes/agent.js";
import { runRoutes } from "./routes/runs.js";
import { userRoutes } from "./routes/user.js";
import { vcsRoutes } from "./routes/vcs.js";
import { vcsAgentRoutes } from "./routes/vcs-agent.js";
import { webRoutes } from "./routes/web.js";

export {
  agentApi,
  authErrors,
  commonErrors,
  logHeaders,
  maxLogChunkBytes,
  maxLongPollMs,
  userApi,
  type AuthKind,
  type BodySpec,
  type ResponseSpec,
  type Route,
  type RouteMethod,
} from "./routes/define.js";
export { okResponseSchema, readyResponseSchema } from "./routes/agent.js";
export { logQuerySchema, runWaitQuerySchema } from "./routes/runs.js";
export { csrfHeader, liveEvents, webSessionCookie } from "./routes/web.js";

/*
 * The route table: every HTTP route the server registers, declared once. The server registers
 * its handlers from it (a handler whose result does not fit the response schema does not
 * compile), GET /openapi.json is generated from it, and the typed client in client.ts builds
 * requests and checks answers with it. Paths use Fastify's `:param` syntax.
 */

/** Every route, by name. Keys are stable: clients call `routes.createPool`, not a path string. */
export const routes = {
  ...userRoutes,
  ...vcsRoutes,
  ...webRoutes,
  ...runRoutes,
  ...agentRoutes,
  ...vcsAgentRoutes,
} as const;

/** The name of a route in the table. */
export type RouteName = keyof typeof routes;
/** Any route of the table. */
export type AnyRoute = (typeof routes)[RouteName];

/** What a caller passes as a route's path parameters. */
export type ParamsOf<R extends Route> = z.input<R["params"]>;
/** What a caller passes as a route's query. */
export type QueryOf<R extends Route> = z.input<R["query"]>;
/** What a caller sends as a route's body. */
export type BodyOf<R extends Route> = R["body"] extends { kind: "json"; schema: infer S extends z.ZodType }
  ? z.input<S>
  : R["body"] extends { kind: "raw" }
    ? Buffer
    : undefined;
/** What a server handler must produce for a JSON route (before the schema's defaults apply). */
export type ReplyOf<R extends Route> = R["response"] extends { kind: "json"; schema: infer S extends z.ZodType }
  ? z.input<S>
  : never;
/** What a client receives from a JSON route (after the schema parsed it). */
export type ResultOf<R extends Route> = R["response"] extends { kind: "json"; schema: infer S extends z.ZodType }
  ? z.output<S>
  : R["response"] extends { kind: "raw" }
    ? Buffer
    : void;

/** Fills a route's `:params` (each URL-encoded). */
export function routePath(route: Route, params: Record<string, string>): string {
  return route.path.replace(/:(\w+)/g, (_m, name: string) => {
    const value = params[name];
    if (value === undefined) throw new Error(`route ${route.method} ${route.path} needs the parameter ${name}`);
    return encodeURIComponent(value);
  });
}

/** Every error code a route may answer: common, its auth kind's, and its own. */
export function errorsOf(route: Route): ErrorCode[] {
  return [...new Set([...commonErrors, ...authErrors[route.auth], ...route.errors])];
}
