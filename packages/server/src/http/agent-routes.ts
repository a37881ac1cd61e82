import { agentApi, maxLogChunkBytes, maxLongPollMs, routes } from "@drover/protocol";
import { redactText, secretForms } from "@drover/runtime";
import { jobTraceIds, jobTraceparent, noopTracer } from "@drover/runtime";
import type { FastifyInstance, preParsingAsyncHookHandler } from "fastify";
import { agentHeartbeat, deregisterAgent, registerAgent } from "../store/agents.js";
import { poolDemand } from "../store/demand.js";
import { poolKindOf, requirePoolKind } from "../store/pools.js";
import { readConfigurationArchive } from "../store/configuration-versions.js";
import { appendLogInOrder } from "../store/logs.js";
import {
  mayUploadPlanJson,
  plansNoLongerNeeded,
  readPlanFile,
  saveOutputs,
  savePlanFile,
  savePlanJson,
  saveProviderSchemas,
} from "../store/plans.js";
import {
  finishJob,
  heartbeatJob,
  pollForJob,
  queuedAtOf,
  releaseUnstartedJobs,
  startJob,
  type JobRow,
} from "../store/queue.js";
import { variablesForRunJob } from "../store/run-variables.js";
import { limitConcurrentAppends, requestSignal } from "./auth.js";
import { spooledBody, spoolBodies } from "./bodies.js";
import type { HttpContext } from "./context.js";
import { callerOf, registrar, type ServeOptions } from "./serve.js";

/** Largest plan file an agent may upload (the plan JSON's limit is DROVER_MAX_PLAN_JSON_MB). */
const maxPlanBytes = 512 * 1024 * 1024;

/** How long an append that arrived ahead of its turn waits for the bytes before it. */
const logReorderWaitMs = 5_000;

/** The agent protocol under /api/agent/v1: registration, long-poll, leases, and job-token calls. */
export function registerAgentRoutes(app: FastifyInstance, http: HttpContext, options: ServeOptions): void {
  const ctx = http.store;
  const serve = registrar(app, agentApi, options);
  app.addHook("onRequest", async () => http.markActivity());
  const redactedForWorkspace = async (job: JobRow, text: string): Promise<string> => {
    const sensitive = (await variablesForRunJob(ctx, job.workspace_id, job.run_id)).filter((v) => v.sensitive);
    return redactText(text, secretForms(sensitive.map((v) => v.value)));
  };

  serve(routes.register, async ({ body, caller: { tokenId, pool } }) => {
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
  serve(routes.agentDemand, async ({ query, caller: { pool } }) => poolDemand(ctx, pool.id, query.jobsPerAgent));

  serve(routes.pollJob, async ({ query: { wait }, caller: agent }, _req, reply) => {
    requirePoolKind(await poolKindOf(ctx, agent.poolId), "runs", "taking run jobs");
    // Up to 20% jitter: agents that (re)connected together — after a server restart, say —
    // would otherwise all time out and reconnect in the same instant, forever.
    const jittered = Math.round(wait * (0.8 + 0.2 * Math.random()));
    const job = await pollForJob(ctx, agent, jittered, requestSignal(reply, http.shutdown));
    if (!job) return { job };
    // The job's trace: its root span is named by the job attempt (emitted when it finishes), so
    // the agent and the pod worker parent their spans on it through this field alone.
    const traceparent = jobTraceparent(job.jobId, job.attempt);
    const queuedAt = queuedAtOf(job);
    if (queuedAt !== undefined)
      http.metrics?.queueWait.observe({ phase: job.phase }, Math.max(0, Date.now() - queuedAt) / 1000);
    if (http.tracer !== noopTracer) {
      http.tracer
        .start("queued", traceparent, {
          startTime: queuedAt ?? Date.now(),
          attributes: { "drover.phase": job.phase, "drover.pool.id": agent.poolId, "drover.agent": agent.name },
        })
        .end();
    }
    // The public URL's host is what users write as `hostname` in their configurations.
    const tfeHostname = new URL(http.publicUrl()).host;
    return { job: { ...job, traceparent, tfeHostname, maxConfigurationBytes: http.archiveLimits.maxCompressedBytes } };
  });

  serve(routes.agentHeartbeat, async ({ body, caller: agent }) => {
    await agentHeartbeat(ctx, agent.id, body.runningJobs);
    return { ok: true, dropPlanRuns: await plansNoLongerNeeded(ctx, agent.poolId, body.keptPlanRuns ?? []) };
  });

  serve(routes.deregister, async ({ caller: agent }) => {
    await releaseUnstartedJobs(ctx, agent.id);
    await deregisterAgent(ctx, agent.id);
    return { ok: true };
  });

  serve(routes.startJob, async ({ body, caller: job }) => ({ runStatus: await startJob(ctx, job, body.starter) }));

  serve(routes.jobHeartbeat, async ({ query: { wait }, caller: job }, _req, reply) =>
    heartbeatJob(ctx, job, wait, requestSignal(reply, http.shutdown)),
  );

  serve(routes.jobConfiguration, async ({ caller: job }) => {
    const run = await ctx.db
      .selectFrom("runs")
      .select("configuration_version_id")
      .where("id", "=", job.run_id)
      .executeTakeFirstOrThrow();
    return readConfigurationArchive(ctx, run.configuration_version_id);
  });

  serve(routes.jobVariables, async ({ caller: job }) => ({
    variables: await variablesForRunJob(ctx, job.workspace_id, job.run_id),
  }));

  serve(routes.downloadPlan, async ({ caller: job }) => readPlanFile(ctx, job.run_id));

  serve(routes.uploadOutputs, async ({ body, caller: job }) => saveOutputs(ctx, job, body.outputs));

  serve(routes.finishJob, async ({ body, caller: job }) => {
    // The agent redacts its message; redacted again against the workspace's values, so an agent
    // that missed a form (an older one) cannot get a secret stored, shown or exported (N1).
    const message = body.message === null ? null : await redactedForWorkspace(job, body.message);
    const result = await finishJob(ctx, job, body.outcome, message, body.planSummary);
    if (job.started_at !== null)
      http.metrics?.jobDuration.observe(
        { phase: job.phase, outcome: body.outcome },
        Math.max(0, Date.now() - Number(job.started_at)) / 1000,
      );
    http.tracer
      .start("job", undefined, {
        ids: jobTraceIds(job.id, job.attempt),
        startTime: Number(job.queued_at),
        attributes: {
          "drover.phase": job.phase,
          "drover.run.id": job.run_id,
          "drover.job.id": job.id,
          "drover.pool.id": job.pool_id,
          "drover.outcome": body.outcome,
        },
      })
      .end(undefined, body.outcome === "succeeded" ? undefined : (message ?? body.outcome));
    return result;
  });

  // Binary uploads take the raw body whatever its content type: log chunks (small) in memory,
  // plans spooled to disk.
  void app.register(async (binary) => {
    binary.removeAllContentTypeParsers();
    binary.addContentTypeParser("*", { parseAs: "buffer", bodyLimit: maxLogChunkBytes + 1024 }, (_req, body, done) =>
      done(null, body),
    );
    const serveBinary = registrar(binary, agentApi, options);

    // Agents keep two appends in flight: the later one may arrive first and waits for its turn.
    const appendHooks = { onRequest: limitConcurrentAppends, bodyLimit: maxLogChunkBytes + 1024 };
    serveBinary(routes.appendLog, appendHooks, async ({ query, body, caller: job }, _req, reply) => {
      const onStored = (n: number) => http.metrics?.logBytes.inc({ phase: job.phase }, n);
      const options = { onStored, maxLogBytes: http.maxJobLogBytes };
      return {
        offset: await appendLogInOrder(
          ctx,
          job,
          query.offset,
          bodyBuffer(body),
          logReorderWaitMs,
          requestSignal(reply, http.shutdown),
          options,
        ),
      };
    });
  });
  void app.register(async (upload) => {
    upload.removeAllContentTypeParsers();
    spoolBodies(upload, "*", http.uploadDir);
    const serveUpload = registrar(upload, agentApi, options);
    serveUpload(routes.uploadPlan, { bodyLimit: maxPlanBytes }, async ({ caller: job }, req) =>
      savePlanFile(ctx, job, spooledBody(req)),
    );
    // Refused before the body is read when this job may not upload it (an apply job).
    const mayUpload =
      (
        route: typeof routes.uploadPlanJson | typeof routes.uploadProviderSchemas,
        what: string,
      ): preParsingAsyncHookHandler =>
      async (req, reply, payload) => {
        try {
          mayUploadPlanJson(callerOf(route, req), what);
        } catch (err) {
          void reply.header("connection", "close");
          throw err;
        }
        return payload;
      };
    serveUpload(
      routes.uploadPlanJson,
      { preParsing: mayUpload(routes.uploadPlanJson, "plan JSON"), bodyLimit: http.maxPlanJsonBytes },
      async ({ caller: job }, req) => savePlanJson(ctx, job, spooledBody(req)),
    );
    serveUpload(
      routes.uploadProviderSchemas,
      { preParsing: mayUpload(routes.uploadProviderSchemas, "providers' schemas"), bodyLimit: http.maxPlanJsonBytes },
      async ({ caller: job }, req) => saveProviderSchemas(ctx, job, spooledBody(req)),
    );
  });
}

function bodyBuffer(body: Buffer | undefined): Buffer {
  return body ?? Buffer.alloc(0);
}
