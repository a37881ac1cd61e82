import { z } from "zod";
import * as s from "../schemas.js";
import { agentApi, bytes, id, json, maxLongPollMs, noContent, ok, raw, route } from "./define.js";

const waitQuery = z.object({ wait: z.coerce.number().int().min(0).max(maxLongPollMs).default(0) });

/** `{ok: true}` of calls that only acknowledge. */
export const okResponseSchema = z.object({ ok: z.boolean() });
/** GET /readyz when the database answers. */
export const readyResponseSchema = z.object({ status: z.literal("ready") });

/** The agent protocol (register, poll, run jobs), and the operations endpoints. */
export const agentRoutes = {
  register: route({
    method: "POST",
    path: `${agentApi}/register`,
    summary: "Register an agent",
    auth: "pool",
    body: json(s.registerRequestSchema),
    response: ok(s.registerResponseSchema),
  }),
  agentDemand: route({
    method: "GET",
    path: `${agentApi}/demand`,
    summary:
      "The pool token's pool's demand for agents, for autoscalers such as KEDA's metrics-api scaler (?jobsPerAgent=)",
    auth: "pool",
    query: s.poolDemandQuerySchema,
    response: ok(s.poolDemandSchema),
  }),
  pollJob: route({
    method: "POST",
    path: `${agentApi}/jobs/next`,
    summary: "Long-poll for the next job (?wait=ms)",
    auth: "session",
    query: waitQuery,
    response: ok(s.pollResponseSchema),
    errors: ["forbidden"],
  }),
  agentHeartbeat: route({
    method: "POST",
    path: `${agentApi}/heartbeat`,
    summary: "Agent heartbeat",
    auth: "session",
    body: json(s.agentHeartbeatSchema),
    response: ok(s.agentHeartbeatResponseSchema),
  }),
  deregister: route({
    method: "POST",
    path: `${agentApi}/deregister`,
    summary: "Deregister; unstarted jobs go back to the queue",
    auth: "session",
    response: ok(okResponseSchema),
  }),
  startJob: route({
    method: "POST",
    path: `${agentApi}/jobs/:id/start`,
    summary: "Start a claimed job",
    auth: "job",
    params: id,
    body: json(s.startJobSchema),
    response: ok(s.startJobResponseSchema),
    errors: ["job_already_started"],
  }),
  jobHeartbeat: route({
    method: "POST",
    path: `${agentApi}/jobs/:id/heartbeat`,
    summary: "Renew the lease; waits for cancel (?wait=ms)",
    auth: "job",
    params: id,
    query: waitQuery,
    response: ok(s.jobHeartbeatResponseSchema),
    errors: [],
  }),
  jobConfiguration: route({
    method: "GET",
    path: `${agentApi}/jobs/:id/configuration`,
    summary: "Download the configuration",
    auth: "job",
    params: id,
    response: bytes("application/gzip"),
  }),
  jobVariables: route({
    method: "GET",
    path: `${agentApi}/jobs/:id/variables`,
    summary: "Variables with values",
    auth: "job",
    params: id,
    response: ok(s.jobVariablesResponseSchema),
  }),
  downloadPlan: route({
    method: "GET",
    path: `${agentApi}/jobs/:id/plan`,
    summary: "Download the saved plan file",
    auth: "job",
    params: id,
    response: bytes("application/octet-stream"),
    errors: ["not_found"],
  }),
  uploadOutputs: route({
    method: "PUT",
    path: `${agentApi}/jobs/:id/outputs`,
    summary: "Record outputs",
    auth: "job",
    params: id,
    body: json(s.outputsUploadSchema),
    response: noContent,
  }),
  finishJob: route({
    method: "POST",
    path: `${agentApi}/jobs/:id/finish`,
    summary: "Finish a job",
    auth: "job",
    params: id,
    body: json(s.finishJobSchema),
    response: noContent,
  }),
  appendLog: route({
    method: "POST",
    path: `${agentApi}/jobs/:id/logs`,
    summary: "Append log bytes at ?offset=",
    auth: "job",
    params: id,
    query: z.object({ offset: z.coerce.number().int().min(0) }),
    body: raw("application/octet-stream"),
    response: ok(s.logAppendResponseSchema),
    errors: ["log_gap", "log_conflict", "payload_too_large"],
  }),
  uploadPlan: route({
    method: "PUT",
    path: `${agentApi}/jobs/:id/plan`,
    summary: "Upload the plan file",
    auth: "job",
    params: id,
    body: raw("application/octet-stream"),
    response: noContent,
  }),
  uploadPlanJson: route({
    method: "PUT",
    path: `${agentApi}/jobs/:id/plan-json`,
    summary: "Upload `show -json` of the plan; answers the change summary",
    auth: "job",
    params: id,
    body: raw("application/json"),
    response: ok(s.planSummarySchema),
    errors: ["invalid_json", "payload_too_large"],
  }),
  uploadProviderSchemas: route({
    method: "PUT",
    path: `${agentApi}/jobs/:id/provider-schemas`,
    summary:
      "Upload `providers schema -json` of a saved cloud plan's plan job (the human `terraform show` renders with it)",
    auth: "job",
    params: id,
    body: raw("application/json"),
    response: noContent,
    errors: ["invalid_json", "payload_too_large"],
  }),

  healthz: route({
    method: "GET",
    path: "/healthz",
    summary: "Liveness",
    auth: "none",
    response: ok(s.healthSchema),
  }),
  readyz: route({
    method: "GET",
    path: "/readyz",
    summary: "Readiness (database reachable)",
    auth: "none",
    response: ok(readyResponseSchema),
  }),
  metrics: route({
    method: "GET",
    path: "/metrics",
    summary: "Prometheus metrics; pools by id unless a user token is sent (or DROVER_METRICS_PUBLIC_NAMES)",
    auth: "none",
    response: bytes("text/plain"),
    errors: ["unauthorized"],
  }),
  openapi: route({
    method: "GET",
    path: "/openapi.json",
    summary: "This API's OpenAPI 3.1 document",
    auth: "none",
    response: ok(z.record(z.string(), z.unknown())),
  }),
} as const;
