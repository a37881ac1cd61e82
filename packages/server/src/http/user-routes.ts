import {
  createPoolSchema,
  createPoolTokenSchema,
  createRunSchema,
  createUserTokenSchema,
  createWorkspaceSchema,
  DroverError,
  logHeaders,
  maxLongPollMs,
  phaseSchema,
  poolDemandQuerySchema,
  setVariableSchema,
  updateWorkspaceSchema,
  variableKeySchema,
  variableKindSchema,
} from "@drover/protocol";
import type { FastifyInstance } from "fastify";
import { z } from "zod";
import { waitForEvent } from "../events.js";
import { listAgents } from "../store/agents.js";
import { poolDemand } from "../store/demand.js";
import { createConfigurationVersion, listConfigurationVersions } from "../store/configuration-versions.js";
import { readLog } from "../store/logs.js";
import { readPlanJson, workspaceOutputs } from "../store/plans.js";
import { createPool, createPoolToken, getPool, listPools, listPoolTokens, revokePoolToken } from "../store/pools.js";
import { listRunJobs } from "../store/queue.js";
import { cancelRun, confirmRun, createRun, discardRun, endJobsOfPoolToken, getRun, listRuns } from "../store/runs.js";
import { listStateVersions, readStateVersion } from "../store/state.js";
import { createUserToken, listUserTokens, revokeUserToken } from "../store/user-tokens.js";
import { deleteVariable, listVariables, setVariable } from "../store/variables.js";
import { createWorkspace, deleteWorkspace, getWorkspace, listWorkspaces, updateWorkspace } from "../store/workspaces.js";
import { authenticateFirst, requestSignal, requireUser } from "./auth.js";
import type { HttpContext } from "./context.js";
import { parse } from "./errors.js";

const idParams = z.object({ id: z.string() });
const poolParams = z.object({ pool: z.string() });
const wsParams = z.object({ ws: z.string() });
const varParams = z.object({ ws: z.string(), key: variableKeySchema });
const logQuery = z.object({
  phase: phaseSchema.default("plan"),
  offset: z.coerce.number().int().min(0).default(0),
  wait: z.coerce.number().int().min(0).max(maxLongPollMs).default(0),
  limit: z.coerce.number().int().min(1).max(8 * 1024 * 1024).default(1024 * 1024),
});

/** The user API under /api/v1 (JSON; configuration uploads are raw tar.gz). */
export function registerUserRoutes(app: FastifyInstance, http: HttpContext): void {
  const ctx = http.store;
  app.addHook("onRequest", authenticateFirst((request) => requireUser(ctx, request)));

  app.get("/pools", async () => ({ items: await listPools(ctx) }));
  app.post("/pools", async (req, reply) => reply.code(201).send(await createPool(ctx, parse(createPoolSchema, req.body).name)));
  app.get("/pools/:pool", async (req) => getPool(ctx, parse(poolParams, req.params, "path").pool));
  app.post("/pools/:pool/tokens", async (req, reply) => {
    const { pool } = parse(poolParams, req.params, "path");
    const { description } = parse(createPoolTokenSchema, req.body);
    return reply.code(201).send(await createPoolToken(ctx, pool, description, http.publicUrl()));
  });
  app.get("/pools/:pool/demand", async (req) =>
    poolDemand(ctx, parse(poolParams, req.params, "path").pool, parse(poolDemandQuerySchema, req.query, "query").jobsPerAgent),
  );
  app.get("/pools/:pool/tokens", async (req) => ({ items: await listPoolTokens(ctx, parse(poolParams, req.params, "path").pool) }));
  app.delete("/pool-tokens/:id", async (req) => {
    const revoked = await revokePoolToken(ctx, parse(idParams, req.params, "path").id);
    // Its agents' sessions already fail; the jobs they hold end too, so no job token outlives it.
    await endJobsOfPoolToken(ctx, revoked.id);
    return revoked;
  });

  app.get("/user-tokens", async () => ({ items: await listUserTokens(ctx) }));
  app.post("/user-tokens", async (req, reply) => {
    const { description, expiresInDays } = parse(createUserTokenSchema, req.body);
    const expiresAt = expiresInDays === undefined ? null : ctx.now() + expiresInDays * 24 * 60 * 60 * 1000;
    return reply.code(201).send(await createUserToken(ctx, description, expiresAt));
  });
  app.delete("/user-tokens/:id", async (req) => revokeUserToken(ctx, parse(idParams, req.params, "path").id));

  app.get("/agents", async (req) => {
    const { pool } = parse(z.object({ pool: z.string().optional() }), req.query, "query");
    return { items: await listAgents(ctx, pool ? (await getPool(ctx, pool)).id : undefined) };
  });

  app.post("/workspaces", async (req, reply) => reply.code(201).send(await createWorkspace(ctx, parse(createWorkspaceSchema, req.body))));
  app.get("/workspaces", async () => ({ items: await listWorkspaces(ctx) }));
  app.get("/workspaces/:ws", async (req) => getWorkspace(ctx, parse(wsParams, req.params, "path").ws));
  app.patch("/workspaces/:ws", async (req) => updateWorkspace(ctx, parse(wsParams, req.params, "path").ws, parse(updateWorkspaceSchema, req.body)));
  app.delete("/workspaces/:ws", async (req, reply) => {
    await deleteWorkspace(ctx, parse(wsParams, req.params, "path").ws);
    return reply.code(204).send();
  });

  app.get("/workspaces/:ws/vars", async (req) => ({ items: await listVariables(ctx, parse(wsParams, req.params, "path").ws) }));
  app.put("/workspaces/:ws/vars/:key", async (req) => {
    const { ws, key } = parse(varParams, req.params, "path");
    return setVariable(ctx, ws, key, parse(setVariableSchema, req.body));
  });
  app.delete("/workspaces/:ws/vars/:key", async (req, reply) => {
    const { ws, key } = parse(varParams, req.params, "path");
    const { kind } = parse(z.object({ kind: variableKindSchema.default("terraform") }), req.query, "query");
    await deleteVariable(ctx, ws, kind, key);
    return reply.code(204).send();
  });

  app.post("/workspaces/:ws/configuration-versions", async (req, reply) => {
    const { ws } = parse(wsParams, req.params, "path");
    if (!Buffer.isBuffer(req.body)) throw new DroverError("bad_request", "upload the configuration as a raw tar.gz body with Content-Type: application/gzip");
    return reply.code(201).send(await createConfigurationVersion(ctx, ws, req.body, http.archiveLimits));
  });
  app.get("/workspaces/:ws/configuration-versions", async (req) => ({ items: await listConfigurationVersions(ctx, parse(wsParams, req.params, "path").ws) }));
  app.get("/workspaces/:ws/outputs", async (req) => {
    const ws = await getWorkspace(ctx, parse(wsParams, req.params, "path").ws);
    return { items: await workspaceOutputs(ctx, ws.id) };
  });
  app.get("/workspaces/:ws/state-versions", async (req) => {
    const ws = await getWorkspace(ctx, parse(wsParams, req.params, "path").ws);
    return { items: await listStateVersions(ctx, ws.id) };
  });
  app.get("/state-versions/:id/download", async (req, reply) => {
    const body = await readStateVersion(ctx, parse(idParams, req.params, "path").id);
    return reply.header("content-type", "application/json").send(body);
  });

  app.post("/runs", async (req, reply) => reply.code(201).send(await createRun(ctx, parse(createRunSchema, req.body))));
  app.get("/runs", async (req) => {
    const q = parse(z.object({ workspace: z.string().optional(), limit: z.coerce.number().int().min(1).max(1000).optional() }), req.query, "query");
    return { items: await listRuns(ctx, q) };
  });
  app.get("/runs/:id", async (req) => getRun(ctx, parse(idParams, req.params, "path").id));
  app.post("/runs/:id/confirm", async (req) => confirmRun(ctx, parse(idParams, req.params, "path").id));
  app.post("/runs/:id/discard", async (req) => discardRun(ctx, parse(idParams, req.params, "path").id));
  app.post("/runs/:id/cancel", async (req) => {
    const { force } = parse(z.object({ force: z.enum(["true", "false"]).default("false") }), req.query, "query");
    return cancelRun(ctx, parse(idParams, req.params, "path").id, { force: force === "true" });
  });
  app.get("/runs/:id/jobs", async (req) => ({ items: await listRunJobs(ctx, parse(idParams, req.params, "path").id) }));
  app.get("/runs/:id/plan", async (req, reply) => {
    const body = await readPlanJson(ctx, parse(idParams, req.params, "path").id);
    return reply.header("content-type", "application/json").send(body);
  });

  app.get("/runs/:id/logs", async (req, reply) => {
    const { id } = parse(idParams, req.params, "path");
    const q = parse(logQuery, req.query, "query");
    const signal = requestSignal(reply, http.shutdown);
    const deadline = Date.now() + q.wait;
    for (;;) {
      const run = await getRun(ctx, id);
      const jobId = q.phase === "plan" ? run.planJobId : run.applyJobId;
      // Subscribe before reading, so bytes appended in between wake us.
      const wake = waitForEvent(ctx.events, jobId ? "log" : "run-changed", jobId ?? run.id, Math.max(0, deadline - Date.now()), signal);
      const runOver = ["applied", "planned_and_finished", "errored", "canceled", "discarded"].includes(run.status);
      // A phase that has no job yet is complete only once the run is over without it.
      const slice = jobId ? await readLog(ctx, jobId, q.offset, q.limit) : { data: Buffer.alloc(0), nextOffset: q.offset, complete: runOver };
      if (slice.data.length > 0 || slice.complete || Date.now() >= deadline || signal.aborted) {
        wake.cancel();
        return reply
          .header("content-type", "application/octet-stream")
          .header(logHeaders.nextOffset, String(slice.nextOffset))
          .header(logHeaders.complete, String(slice.complete))
          .send(slice.data);
      }
      await wake.promise;
    }
  });
}
