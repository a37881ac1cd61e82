import {
  agentHeartbeatSchema,
  finishJobSchema,
  maxLogChunkBytes,
  maxLongPollMs,
  outputsUploadSchema,
  poolDemandQuerySchema,
  registerRequestSchema,
  DroverError,
} from "@drover/protocol";
import type { Agent } from "@drover/protocol";
import type { FastifyInstance, FastifyRequest } from "fastify";
import { z } from "zod";
import { agentHeartbeat, deregisterAgent, registerAgent } from "../store/agents.js";
import { poolDemand } from "../store/demand.js";
import { readConfigurationArchive } from "../store/configuration-versions.js";
import { appendLog } from "../store/logs.js";
import { plansNoLongerNeeded, readPlanFile, saveOutputs, savePlanFile, savePlanJson } from "../store/plans.js";
import { finishJob, heartbeatJob, pollForJob, releaseUnstartedJobs, startJob, type JobRow } from "../store/queue.js";
import { variablesForJob } from "../store/variables.js";
import { authenticateFirst, callerOf, requestSignal, requireJob, requirePoolToken, requireSession } from "./auth.js";
import type { HttpContext } from "./context.js";
import { parse } from "./errors.js";

const jobParams = z.object({ id: z.string() });
const waitQuery = z.object({ wait: z.coerce.number().int().min(0).max(maxLongPollMs).default(0) });

/** The agent protocol under /api/agent/v1: registration, long-poll, leases, and job-token calls. */
export function registerAgentRoutes(app: FastifyInstance, http: HttpContext): void {
  const ctx = http.store;
  app.addHook("onRequest", async () => http.markActivity());
  const asPool = { onRequest: authenticateFirst((req) => requirePoolToken(ctx, req)) };
  const asSession = { onRequest: authenticateFirst((req) => requireSession(ctx, req)) };
  const asJob = { onRequest: authenticateFirst((req) => requireJob(ctx, req, parse(jobParams, req.params, "path").id)) };
  const jobOf = (req: FastifyRequest) => callerOf<JobRow>(req);
  const agentOf = (req: FastifyRequest) => callerOf<Agent>(req);

  app.post("/register", asPool, async (req) => {
    const { tokenId, pool } = callerOf<Awaited<ReturnType<typeof requirePoolToken>>>(req);
    const body = parse(registerRequestSchema, req.body);
    const { agent, sessionToken } = await registerAgent(ctx, { ...body, poolId: pool.id, poolTokenId: tokenId });
    return {
      agentId: agent.id,
      poolId: pool.id,
      poolName: pool.name,
      sessionToken,
      heartbeatIntervalMs: ctx.settings.heartbeatIntervalMs,
      leaseTtlMs: ctx.settings.leaseTtlMs,
      maxPollWaitMs: maxLongPollMs,
    };
  });

  // The pool token's own pool only: the credential an agent deployment already holds is
  // enough for its autoscaler, and it reveals counts, never runs or workspaces.
  app.get("/demand", asPool, async (req) => {
    const { pool } = callerOf<Awaited<ReturnType<typeof requirePoolToken>>>(req);
    return poolDemand(ctx, pool.id, parse(poolDemandQuerySchema, req.query, "query").jobsPerAgent);
  });

  app.post("/jobs/next", asSession, async (req, reply) => {
    const agent = agentOf(req);
    const { wait } = parse(waitQuery, req.query, "query");
    // Up to 20% jitter: agents that (re)connected together — after a server restart, say —
    // would otherwise all time out and reconnect in the same instant, forever.
    const jittered = Math.round(wait * (0.8 + 0.2 * Math.random()));
    const job = await pollForJob(ctx, agent, jittered, requestSignal(reply, http.shutdown));
    return { job };
  });

  app.post("/heartbeat", asSession, async (req) => {
    const agent = agentOf(req);
    const body = parse(agentHeartbeatSchema, req.body);
    await agentHeartbeat(ctx, agent.id, body.runningJobs);
    return { ok: true, dropPlanRuns: await plansNoLongerNeeded(ctx, agent.poolId, body.keptPlanRuns ?? []) };
  });

  app.post("/deregister", asSession, async (req) => {
    const agent = agentOf(req);
    await releaseUnstartedJobs(ctx, agent.id);
    await deregisterAgent(ctx, agent.id);
    return { ok: true };
  });

  app.post("/jobs/:id/start", asJob, async (req) => {
    const job = jobOf(req);
    return { runStatus: await startJob(ctx, job) };
  });

  app.post("/jobs/:id/heartbeat", asJob, async (req, reply) => {
    const job = jobOf(req);
    const { wait } = parse(waitQuery, req.query, "query");
    return heartbeatJob(ctx, job, wait, requestSignal(reply, http.shutdown));
  });

  app.get("/jobs/:id/configuration", asJob, async (req, reply) => {
    const job = jobOf(req);
    const run = await ctx.db.selectFrom("runs").select("configuration_version_id").where("id", "=", job.run_id).executeTakeFirstOrThrow();
    return reply.header("content-type", "application/gzip").send(await readConfigurationArchive(ctx, run.configuration_version_id));
  });

  app.get("/jobs/:id/variables", asJob, async (req) => {
    const job = jobOf(req);
    return { variables: await variablesForJob(ctx, job.workspace_id) };
  });

  app.get("/jobs/:id/plan", asJob, async (req, reply) => {
    const job = jobOf(req);
    return reply.header("content-type", "application/octet-stream").send(await readPlanFile(ctx, job.run_id));
  });

  app.put("/jobs/:id/outputs", asJob, async (req, reply) => {
    const job = jobOf(req);
    await saveOutputs(ctx, job, parse(outputsUploadSchema, req.body).outputs);
    return reply.code(204).send();
  });

  app.post("/jobs/:id/finish", asJob, async (req, reply) => {
    const job = jobOf(req);
    const body = parse(finishJobSchema, req.body);
    await finishJob(ctx, job, body.outcome, body.message);
    return reply.code(204).send();
  });

  // Binary uploads take the raw body whatever its content type.
  void app.register(async (binary) => {
    binary.removeAllContentTypeParsers();
    binary.addContentTypeParser("*", { parseAs: "buffer", bodyLimit: 512 * 1024 * 1024 }, (_req, body, done) => done(null, body));

    binary.post("/jobs/:id/logs", { ...asJob, bodyLimit: maxLogChunkBytes + 1024 }, async (req) => {
      const job = jobOf(req);
      const { offset } = parse(z.object({ offset: z.coerce.number().int().min(0) }), req.query, "query");
      return { offset: await appendLog(ctx, job, offset, bodyBuffer(req.body)) };
    });
    binary.put("/jobs/:id/plan", asJob, async (req, reply) => {
      const job = jobOf(req);
      await savePlanFile(ctx, job, bodyBuffer(req.body));
      return reply.code(204).send();
    });
    binary.put("/jobs/:id/plan-json", asJob, async (req) => {
      const job = jobOf(req);
      return savePlanJson(ctx, job, bodyBuffer(req.body));
    });
  });
}

function bodyBuffer(body: unknown): Buffer {
  if (Buffer.isBuffer(body)) return body;
  if (body === undefined || body === null) return Buffer.alloc(0);
  throw new DroverError("bad_request", "expected a raw request body");
}
