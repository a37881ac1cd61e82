import * as p from "@drover/protocol";
import { z } from "zod";

type Op = { method: string; path: string; summary: string; body?: z.ZodType; rawBody?: string; response?: z.ZodType; rawResponse?: string; auth: "user" | "pool" | "session" | "job" | "state" | "none" };

const list = p.listOf;

/** Every route with its wire schemas: the source of GET /openapi.json. */
const operations: Op[] = [
  { method: "get", path: "/api/v1/pools", summary: "List agent pools", response: list(p.poolSchema), auth: "user" },
  { method: "post", path: "/api/v1/pools", summary: "Create an agent pool", body: p.createPoolSchema, response: p.poolSchema, auth: "user" },
  { method: "get", path: "/api/v1/pools/{pool}", summary: "Show a pool (id or name)", response: p.poolSchema, auth: "user" },
  { method: "post", path: "/api/v1/pools/{pool}/tokens", summary: "Create a pool token (shown once)", body: p.createPoolTokenSchema, response: p.createdPoolTokenSchema, auth: "user" },
  { method: "get", path: "/api/v1/pools/{pool}/tokens", summary: "List a pool's tokens", response: list(p.poolTokenSchema), auth: "user" },
  { method: "delete", path: "/api/v1/pool-tokens/{id}", summary: "Revoke a pool token", response: p.poolTokenSchema, auth: "user" },
  { method: "get", path: "/api/v1/agents", summary: "List agents (?pool=)", response: list(p.agentSchema), auth: "user" },
  { method: "get", path: "/api/v1/workspaces", summary: "List workspaces", response: list(p.workspaceSchema), auth: "user" },
  { method: "post", path: "/api/v1/workspaces", summary: "Create a workspace", body: p.createWorkspaceSchema, response: p.workspaceSchema, auth: "user" },
  { method: "get", path: "/api/v1/workspaces/{ws}", summary: "Show a workspace (id or name)", response: p.workspaceSchema, auth: "user" },
  { method: "patch", path: "/api/v1/workspaces/{ws}", summary: "Update a workspace", body: p.updateWorkspaceSchema, response: p.workspaceSchema, auth: "user" },
  { method: "delete", path: "/api/v1/workspaces/{ws}", summary: "Delete a workspace and its runs and state", auth: "user" },
  { method: "get", path: "/api/v1/workspaces/{ws}/vars", summary: "List variables (sensitive values null)", response: list(p.variableSchema), auth: "user" },
  { method: "put", path: "/api/v1/workspaces/{ws}/vars/{key}", summary: "Set a variable", body: p.setVariableSchema, response: p.variableSchema, auth: "user" },
  { method: "delete", path: "/api/v1/workspaces/{ws}/vars/{key}", summary: "Delete a variable (?kind=)", auth: "user" },
  { method: "post", path: "/api/v1/workspaces/{ws}/configuration-versions", summary: "Upload a configuration (tar.gz)", rawBody: "application/gzip", response: p.configurationVersionSchema, auth: "user" },
  { method: "get", path: "/api/v1/workspaces/{ws}/configuration-versions", summary: "List configuration versions", response: list(p.configurationVersionSchema), auth: "user" },
  { method: "get", path: "/api/v1/workspaces/{ws}/outputs", summary: "Latest outputs (sensitive values null)", response: list(p.outputSchema), auth: "user" },
  { method: "get", path: "/api/v1/workspaces/{ws}/state-versions", summary: "List state versions", response: list(p.stateVersionSchema), auth: "user" },
  { method: "get", path: "/api/v1/state-versions/{id}/download", summary: "Download a state version", rawResponse: "application/json", auth: "user" },
  { method: "get", path: "/api/v1/workspaces/{ws}/state", summary: "terraform http backend: read state (204 when none)", rawResponse: "application/json", auth: "state" },
  { method: "post", path: "/api/v1/workspaces/{ws}/state", summary: "terraform http backend: write state (?ID=lock id)", rawBody: "application/json", auth: "state" },
  { method: "delete", path: "/api/v1/workspaces/{ws}/state", summary: "terraform http backend: delete state", auth: "state" },
  { method: "post", path: "/api/v1/runs", summary: "Create a run", body: p.createRunSchema, response: p.runSchema, auth: "user" },
  { method: "get", path: "/api/v1/runs", summary: "List runs (?workspace=&limit=)", response: list(p.runSchema), auth: "user" },
  { method: "get", path: "/api/v1/runs/{id}", summary: "Show a run", response: p.runSchema, auth: "user" },
  { method: "post", path: "/api/v1/runs/{id}/confirm", summary: "Apply a planned run", response: p.runSchema, auth: "user" },
  { method: "post", path: "/api/v1/runs/{id}/discard", summary: "Discard a planned run", response: p.runSchema, auth: "user" },
  { method: "post", path: "/api/v1/runs/{id}/cancel", summary: "Cancel a run", response: p.runSchema, auth: "user" },
  { method: "get", path: "/api/v1/runs/{id}/jobs", summary: "Jobs of a run", response: list(p.jobSchema), auth: "user" },
  { method: "get", path: "/api/v1/runs/{id}/plan", summary: "Plan JSON of a run", rawResponse: "application/json", auth: "user" },
  { method: "get", path: "/api/v1/runs/{id}/logs", summary: "Read a phase's log from an offset (?phase=&offset=&wait=)", rawResponse: "application/octet-stream", auth: "user" },
  { method: "get", path: "/api/v1/pools/{pool}/demand", summary: "A pool's demand for agents, for autoscalers (?jobsPerAgent=)", response: p.poolDemandSchema, auth: "user" },
  { method: "get", path: "/api/agent/v1/demand", summary: "The pool token's pool's demand for agents, for autoscalers such as KEDA's metrics-api scaler (?jobsPerAgent=)", response: p.poolDemandSchema, auth: "pool" },
  { method: "post", path: "/api/agent/v1/register", summary: "Register an agent", body: p.registerRequestSchema, response: p.registerResponseSchema, auth: "pool" },
  { method: "post", path: "/api/agent/v1/jobs/next", summary: "Long-poll for the next job (?wait=ms)", response: p.pollResponseSchema, auth: "session" },
  { method: "post", path: "/api/agent/v1/heartbeat", summary: "Agent heartbeat", body: p.agentHeartbeatSchema, auth: "session" },
  { method: "post", path: "/api/agent/v1/deregister", summary: "Deregister", auth: "session" },
  { method: "post", path: "/api/agent/v1/jobs/{id}/start", summary: "Start a claimed job", response: p.startJobResponseSchema, auth: "job" },
  { method: "post", path: "/api/agent/v1/jobs/{id}/heartbeat", summary: "Renew the lease; waits for cancel (?wait=ms)", response: p.jobHeartbeatResponseSchema, auth: "job" },
  { method: "get", path: "/api/agent/v1/jobs/{id}/configuration", summary: "Download the configuration", rawResponse: "application/gzip", auth: "job" },
  { method: "get", path: "/api/agent/v1/jobs/{id}/variables", summary: "Variables with values", response: p.jobVariablesResponseSchema, auth: "job" },
  { method: "post", path: "/api/agent/v1/jobs/{id}/logs", summary: "Append log bytes at ?offset=", rawBody: "application/octet-stream", response: p.logAppendResponseSchema, auth: "job" },
  { method: "put", path: "/api/agent/v1/jobs/{id}/plan", summary: "Upload the plan file", rawBody: "application/octet-stream", auth: "job" },
  { method: "get", path: "/api/agent/v1/jobs/{id}/plan", summary: "Download the run's plan file", rawResponse: "application/octet-stream", auth: "job" },
  { method: "put", path: "/api/agent/v1/jobs/{id}/plan-json", summary: "Upload terraform show -json output", rawBody: "application/json", response: p.planSummarySchema, auth: "job" },
  { method: "put", path: "/api/agent/v1/jobs/{id}/outputs", summary: "Record outputs", body: p.outputsUploadSchema, auth: "job" },
  { method: "post", path: "/api/agent/v1/jobs/{id}/finish", summary: "Finish a job", body: p.finishJobSchema, auth: "job" },
  { method: "get", path: "/healthz", summary: "Liveness", response: p.healthSchema, auth: "none" },
  { method: "get", path: "/readyz", summary: "Readiness (database reachable)", auth: "none" },
  { method: "get", path: "/metrics", summary: "Prometheus metrics", rawResponse: "text/plain", auth: "none" },
];

const json = (schema: z.ZodType) => z.toJSONSchema(schema, { io: "input", unrepresentable: "any" });

/** The OpenAPI 3.1 document of both APIs. */
export function openApiDocument(serverUrl: string): Record<string, unknown> {
  const paths: Record<string, Record<string, unknown>> = {};
  for (const op of operations) {
    const params = [...op.path.matchAll(/\{(\w+)\}/g)].map((m) => ({ name: m[1], in: "path", required: true, schema: { type: "string" } }));
    const responses: Record<string, unknown> = {
      "200": op.response
        ? { description: "OK", content: { "application/json": { schema: json(op.response) } } }
        : op.rawResponse
          ? { description: "OK", content: { [op.rawResponse]: {} } }
          : { description: "OK" },
      default: { description: "Error", content: { "application/json": { schema: json(p.errorBodySchema) } } },
    };
    const operation: Record<string, unknown> = {
      summary: op.summary,
      parameters: params,
      responses,
      security: op.auth === "none" ? [] : [{ bearer: [] }],
      "x-drover-auth": op.auth,
    };
    if (op.body) operation.requestBody = { required: true, content: { "application/json": { schema: json(op.body) } } };
    if (op.rawBody) operation.requestBody = { required: true, content: { [op.rawBody]: {} } };
    (paths[op.path] ??= {})[op.method] = operation;
  }
  return {
    openapi: "3.1.0",
    info: { title: "Drover API", version: "0.1.0", description: "Drover control plane: user API (/api/v1), agent protocol (/api/agent/v1), terraform http state backend." },
    servers: [{ url: serverUrl }],
    components: { securitySchemes: { bearer: { type: "http", scheme: "bearer" } } },
    paths,
  };
}
