import { agentApi, DroverError, routes, userApi } from "@drover/protocol";
import Fastify, { LogController, type FastifyError, type FastifyInstance } from "fastify";
import { readFileSync } from "node:fs";
import type { Logger } from "pino";
import type { ServerMetrics } from "../metrics.js";
import { registerAgentRoutes } from "./agent-routes.js";
import { authenticators, requireUser } from "./auth.js";
import type { HttpContext } from "./context.js";
import { errorHandler, storageFailure } from "./errors.js";
import { openApiDocument } from "./openapi.js";
import { answered, registrar } from "./serve.js";
import { registerStateRoutes } from "./state-routes.js";
import { registerUserRoutes } from "./user-routes.js";
import { registerVcsRoutes } from "./vcs-routes.js";
import { registerVcsAgentRoutes } from "./vcs-agent-routes.js";
import { registerWebUi } from "./web-ui.js";
import { registerTfe } from "../tfe/index.js";
import { sql } from "kysely";
import { describeError, isConnectionError, retryAfterSeconds } from "../db/health.js";

/** Options of the HTTP application that tests set. */
export interface AppOptions {
  /** Check every JSON response against its route's schema (a mismatch is a 500). */
  validateResponses?: boolean;
  /** Told of every route as it is registered (method, full path). */
  onRoute?: (method: string, path: string) => void;
  /** Keep-alive interval of the live event stream (default 25 s). */
  liveKeepAliveMs?: number;
  /** How long a connection may be silent both ways before it is closed (default: idleConnectionMs()). */
  idleConnectionMs?: number;
}

/**
 * How long a connection may send and receive nothing before the server closes it: a client that
 * stalls mid-upload would otherwise hold its socket and spool file for ever. Longer than any wait
 * of a handler: long-polls answer within a minute, a call relayed to a VCS agent within
 * DROVER_VCS_AGENT_TASK_SECONDS.
 */
export function idleConnectionMs(vcsAgentTaskMs = 300_000): number {
  return Math.max(15 * 60_000, vcsAgentTaskMs + 60_000);
}

/** Builds the Fastify application: user API, agent protocol, state backend, health and metrics. */
export function buildApp(
  http: HttpContext,
  metrics: ServerMetrics,
  log: Logger,
  tls?: { certFile: string; keyFile: string },
  options: AppOptions = {},
): FastifyInstance {
  const app = Fastify({
    loggerInstance: log,
    logController: new LogController({ disableRequestLogging: true }),
    bodyLimit: 1024 * 1024,
    return503OnClosing: true,
    forceCloseConnections: true,
    connectionTimeout: options.idleConnectionMs ?? idleConnectionMs(http.vcsAgentTaskMs),
    ...(tls ? { https: { cert: readFileSync(tls.certFile), key: readFileSync(tls.keyFile) } } : {}),
  }) as unknown as FastifyInstance;
  const onRoute = options.onRoute;
  if (onRoute) {
    app.addHook("onRoute", (r) => {
      for (const method of Array.isArray(r.method) ? r.method : [r.method]) onRoute(method, r.url);
    });
  }
  app.addHttpMethod("LOCK", { hasBody: true });
  app.addHttpMethod("UNLOCK", { hasBody: true });
  app.setErrorHandler((err: FastifyError | Error, request, reply) => {
    // SQLite rolled the write back, or the database is away: the answer says what the operator must fix.
    const coded = storageFailure(err, http.storageDir);
    if (coded) request.log.error({ err: coded.message }, "the database could not be written or reached");
    errorHandler(coded ?? err, request, reply);
  });
  app.setNotFoundHandler((request, reply) => {
    void reply
      .code(404)
      .send({ error: "not_found", message: `no route ${request.method} ${request.url.split("?")[0]}` });
  });
  app.addHook("onResponse", async (request, reply) => {
    metrics.httpDuration.observe(
      { method: request.method, route: request.routeOptions.url ?? "unmatched", status: String(reply.statusCode) },
      reply.elapsedTime / 1000,
    );
  });

  let lastActivity: number | null = null;
  const ctx: HttpContext = {
    ...http,
    markActivity: () => (lastActivity = Date.now()),
    metrics,
    ...(options.liveKeepAliveMs === undefined ? {} : { liveKeepAliveMs: options.liveKeepAliveMs }),
  };

  const serveOptions = {
    validateResponses: options.validateResponses ?? false,
    authenticators: authenticators(http.store),
  };
  void app.register(async (scope) => registerUserRoutes(scope, ctx, serveOptions), { prefix: userApi });
  void app.register(async (scope) => registerStateRoutes(scope, ctx, serveOptions), { prefix: userApi });
  void app.register(async (scope) => registerVcsRoutes(scope, ctx, serveOptions), { prefix: userApi });
  void app.register(async (scope) => registerAgentRoutes(scope, ctx, serveOptions), { prefix: agentApi });
  registerTfe(app, ctx);
  void app.register(async (scope) => registerVcsAgentRoutes(scope, ctx, serveOptions), { prefix: agentApi });

  const serve = registrar(app, "", serveOptions);
  serve(routes.healthz, async () => ({
    status: http.shutdown.aborted ? ("stopping" as const) : ("ok" as const),
    currentTime: new Date().toISOString(),
    lastActivity: lastActivity === null ? null : new Date(lastActivity).toISOString(),
  }));
  serve(routes.readyz, async (_input, _req, reply) => {
    if (http.shutdown.aborted)
      return answered(reply.code(503).send({ error: "internal", message: "the server is stopping" }));
    const unavailable = (reason: string, since: number | undefined) =>
      answered(
        reply
          .code(503)
          .header("retry-after", String(retryAfterSeconds))
          .send({
            error: "database_unavailable",
            message: `database unavailable${since === undefined ? "" : ` since ${new Date(since).toISOString()}`}: ${reason}`,
            since: since === undefined ? null : new Date(since).toISOString(),
          }),
      );
    if (http.health.state === "unavailable") return unavailable(http.health.lastError, http.health.since);
    try {
      await sql`select 1`.execute(http.store.db);
      return { status: "ready" as const };
    } catch (err) {
      // The tracker may still be confirming the outage; this check failing is answer enough.
      const cause = err instanceof DroverError && err.code === "database_unavailable" ? err.cause : err;
      if (isConnectionError(cause) || isConnectionError(err)) return unavailable(describeError(cause), undefined);
      return answered(
        reply.code(503).send({ error: "internal", message: `database check failed: ${describeError(err)}` }),
      );
    }
  });
  // Anonymous by default (Prometheus scrapes without credentials), but pool names only to a
  // user token or when DROVER_METRICS_PUBLIC_NAMES says they are not secret.
  serve(routes.metrics, async (_input, req, reply) => {
    let named = http.metricsPublicNames;
    if (req.headers.authorization !== undefined) {
      await requireUser(http.store, req);
      named = true;
    }
    const registry = named ? metrics.registry : metrics.anonymousRegistry;
    void reply.header("content-type", registry.contentType);
    return registry.metrics();
  });
  serve(routes.openapi, async () => openApiDocument(http.publicUrl()));
  registerWebUi(app);
  return app;
}
