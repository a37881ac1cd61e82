import { csrfTokenOf, DroverError, isTerminalRun, logHeaders, routes, userApi } from "@drover/protocol";
import type { FastifyInstance, FastifyRequest } from "fastify";
import { waitForEvent } from "../events.js";
import { listAgents } from "../store/agents.js";
import { poolDemand } from "../store/demand.js";
import { createConfigurationVersion, listConfigurationVersions } from "../store/configuration-versions.js";
import { readLog } from "../store/logs.js";
import { readPlanJson } from "../store/plans.js";
import { workspaceOutputs } from "../store/outputs.js";
import {
  createPool,
  createPoolToken,
  deletePool,
  getPool,
  listPools,
  listPoolTokens,
  revokePoolToken,
} from "../store/pools.js";
import { listRunJobs } from "../store/run-jobs.js";
import { createRun } from "../store/run-create.js";
import { confirmRun, discardRun, getRun, listRuns } from "../store/runs.js";
import { cancelRun, endJobsOfPoolToken } from "../store/cancels.js";
import { listStateVersions, readStateVersion } from "../store/state.js";
import { createUserToken, listUserTokens, revokeUserToken } from "../store/user-tokens.js";
import { deleteVariable, listVariables, setVariable } from "../store/variables.js";
import { createWebSession, endWebSession } from "../store/web-sessions.js";
import {
  createWorkspace,
  deleteWorkspace,
  getWorkspace,
  listWorkspaces,
  updateWorkspace,
} from "../store/workspaces.js";
import { requestSignal } from "./auth.js";
import { isBodyFile, spoolBodies } from "./bodies.js";
import type { HttpContext } from "./context.js";
import { streamLiveEvents } from "./live-events.js";
import { answered, registrar, type ServeOptions } from "./serve.js";
import { clearedSessionCookieHeader, sameOrigin, sessionCookieHeader } from "./web-session.js";

/** The user API under /api/v1 (JSON; configuration uploads are raw tar.gz). */
export function registerUserRoutes(app: FastifyInstance, http: HttpContext, options: ServeOptions): void {
  const ctx = http.store;
  const serve = registrar(app, userApi, options);

  serve(routes.listPools, async () => ({ items: await listPools(ctx) }));
  serve(routes.createPool, async ({ body }) => createPool(ctx, body.name, body.kind));
  serve(routes.getPool, async ({ params }) => getPool(ctx, params.pool));
  serve(routes.deletePool, async ({ params }) => deletePool(ctx, params.pool));
  serve(routes.createPoolToken, async ({ params, body }) =>
    createPoolToken(ctx, params.pool, body.description, http.publicUrl()),
  );
  serve(routes.poolDemand, async ({ params, query }) => poolDemand(ctx, params.pool, query.jobsPerAgent));
  serve(routes.listPoolTokens, async ({ params }) => ({ items: await listPoolTokens(ctx, params.pool) }));
  serve(routes.revokePoolToken, async ({ params }) => {
    const revoked = await revokePoolToken(ctx, params.id);
    // Its agents' sessions already fail; the jobs they hold end too, so no job token outlives it.
    await endJobsOfPoolToken(ctx, revoked.id);
    return revoked;
  });

  serve(routes.listUserTokens, async () => ({ items: await listUserTokens(ctx) }));
  serve(routes.createUserToken, async ({ body: { description, expiresInDays } }) => {
    const expiresAt = expiresInDays === undefined ? null : ctx.now() + expiresInDays * 24 * 60 * 60 * 1000;
    return createUserToken(ctx, description, expiresAt);
  });
  serve(routes.revokeUserToken, async ({ params }) => revokeUserToken(ctx, params.id));

  // Secure cookies when the browser came over TLS, or through a proxy that the public URL says speaks it.
  const secure = (req: FastifyRequest) => req.protocol === "https" || http.publicUrl().startsWith("https:");
  serve(routes.createWebSession, async ({ body }, req, reply) => {
    // A page of another site must not sign this browser in to an account of its choosing.
    if (!sameOrigin(req, http.publicUrl()))
      throw new DroverError("forbidden", "sign-in is accepted from the server's own pages only (Origin differs)");
    const session = await createWebSession(ctx, body.token, http.webSessionMs);
    void reply.header("set-cookie", sessionCookieHeader(session.token, http.webSessionMs, secure(req)));
    void reply.header("cache-control", "no-store");
    return {
      userTokenId: session.userTokenId,
      expiresAt: new Date(session.expiresAt).toISOString(),
      csrfToken: csrfTokenOf(session.token),
    };
  });
  serve(routes.liveEvents, async (_input, req, reply) => {
    streamLiveEvents(http, req, reply, http.liveKeepAliveMs);
    return answered(reply);
  });
  serve(routes.getWebSession, async ({ caller }, _req, reply) => {
    if (!caller.web)
      throw new DroverError("bad_request", "this request came with an API token, not a browser session cookie");
    void reply.header("cache-control", "no-store");
    return {
      userTokenId: caller.tokenId,
      expiresAt: new Date(caller.web.expiresAt).toISOString(),
      csrfToken: caller.web.csrfToken,
    };
  });
  serve(routes.deleteWebSession, async ({ caller }, req, reply) => {
    if (caller.web) await endWebSession(ctx, caller.web.sessionId);
    void reply.header("set-cookie", clearedSessionCookieHeader(secure(req)));
  });

  serve(routes.listAgents, async ({ query }) => ({
    items: await listAgents(ctx, query.pool ? (await getPool(ctx, query.pool)).id : undefined),
  }));

  serve(routes.createWorkspace, async ({ body }) => createWorkspace(ctx, body));
  serve(routes.listWorkspaces, async ({ query }) => listWorkspaces(ctx, query));
  serve(routes.getWorkspace, async ({ params }) => getWorkspace(ctx, params.ws));
  serve(routes.updateWorkspace, async ({ params, body }) => updateWorkspace(ctx, params.ws, body));
  serve(routes.deleteWorkspace, async ({ params }) => deleteWorkspace(ctx, params.ws));

  serve(routes.listVariables, async ({ params }) => ({ items: await listVariables(ctx, params.ws) }));
  serve(routes.setVariable, async ({ params, body }) => setVariable(ctx, params.ws, params.key, body));
  serve(routes.deleteVariable, async ({ params, query }) => deleteVariable(ctx, params.ws, query.kind, params.key));

  void app.register(async (upload) => {
    spoolBodies(upload, ["application/gzip", "application/x-gzip", "application/octet-stream"], http.uploadDir);
    // One byte over the limit is let through so that the archive check names the archive's size.
    registrar(upload, userApi, options)(
      routes.uploadConfiguration,
      { bodyLimit: http.archiveLimits.maxCompressedBytes + 1 },
      async ({ params }, req) => {
        if (!isBodyFile(req.body))
          throw new DroverError(
            "bad_request",
            "upload the configuration as a raw tar.gz body with Content-Type: application/gzip",
          );
        return createConfigurationVersion(ctx, params.ws, req.body, http.archiveLimits);
      },
    );
  });
  serve(routes.listConfigurationVersions, async ({ params }) => ({
    items: await listConfigurationVersions(ctx, params.ws),
  }));
  serve(routes.workspaceOutputs, async ({ params, query }) => ({
    items: await workspaceOutputs(ctx, (await getWorkspace(ctx, params.ws)).id, { reveal: query.reveal === "true" }),
  }));
  serve(routes.listStateVersions, async ({ params }) => ({
    items: await listStateVersions(ctx, (await getWorkspace(ctx, params.ws)).id),
  }));
  serve(routes.downloadStateVersion, async ({ params }) => readStateVersion(ctx, params.id));

  serve(routes.createRun, async ({ body, caller }) => createRun(ctx, { ...body, createdByTokenId: caller.tokenId }));
  serve(routes.listRuns, async ({ query }) => listRuns(ctx, query));
  serve(routes.getRun, async ({ params, query }, _req, reply) => {
    if (query.wait === 0) return getRun(ctx, params.id);
    const signal = requestSignal(reply, http.shutdown);
    const deadline = Date.now() + query.wait;
    const from = query.status ?? (await getRun(ctx, params.id)).status;
    for (;;) {
      // Subscribe before reading, so a change in between wakes us.
      const wake = waitForEvent(ctx.events, "run-changed", params.id, Math.max(0, deadline - Date.now()), signal);
      const run = await getRun(ctx, params.id);
      if (run.status !== from || Date.now() >= deadline || signal.aborted) {
        wake.cancel();
        return run;
      }
      await wake.promise;
    }
  });
  serve(routes.confirmRun, async ({ params }) => confirmRun(ctx, params.id));
  serve(routes.discardRun, async ({ params }) => discardRun(ctx, params.id));
  serve(routes.cancelRun, async ({ params, query }) => cancelRun(ctx, params.id, { force: query.force === "true" }));
  serve(routes.listRunJobs, async ({ params }) => ({ items: await listRunJobs(ctx, params.id) }));
  // The plan job stores it before the run leaves planning: a reader never waits for it.
  serve(routes.runPlan, async ({ params }) => readPlanJson(ctx, params.id));

  serve(routes.runLogs, async ({ params: { id }, query: q }, _req, reply) => {
    const signal = requestSignal(reply, http.shutdown);
    const deadline = Date.now() + q.wait;
    for (;;) {
      const run = await getRun(ctx, id);
      const jobId = q.phase === "plan" ? run.planJobId : run.applyJobId;
      // Subscribe before reading, so bytes appended in between wake us.
      const wake = waitForEvent(
        ctx.events,
        jobId ? "log" : "run-changed",
        jobId ?? run.id,
        Math.max(0, deadline - Date.now()),
        signal,
      );
      const runOver = isTerminalRun(run.status);
      // A phase that has no job yet is complete only once the run is over without it.
      const slice = jobId
        ? await readLog(ctx, jobId, q.offset, q.limit)
        : { data: Buffer.alloc(0), nextOffset: q.offset, complete: runOver };
      if (slice.data.length > 0 || slice.complete || Date.now() >= deadline || signal.aborted) {
        wake.cancel();
        void reply
          .header(logHeaders.nextOffset, String(slice.nextOffset))
          .header(logHeaders.complete, String(slice.complete));
        return slice.data;
      }
      await wake.promise;
    }
  });
}
