import { z } from "zod";
import type { ErrorCode } from "./errors.js";
import { lazySchema } from "./lazy-schema.js";
import * as s from "./schemas.js";

/** Path prefixes of the two HTTP APIs. */
export const userApi = "/api/v1";
export const agentApi = "/api/agent/v1";

/** Headers of the log read endpoint. */
export const logHeaders = {
  /** Byte offset just past the returned bytes: where the next read starts. */
  nextOffset: "x-drover-log-offset",
  /** "true" once the job has finished and every byte up to nextOffset is returned. */
  complete: "x-drover-log-complete",
} as const;

/** The longest a long-poll may hold a request; proxies cut idle requests at 60 s. */
export const maxLongPollMs = 50_000;

/** Largest log chunk the server accepts in one append. */
export const maxLogChunkBytes = 1024 * 1024;

/*
 * The route table: every HTTP route the server registers, declared once. The server registers
 * its handlers from it (a handler whose result does not fit the response schema does not
 * compile), GET /openapi.json is generated from it, and the typed client in client.ts builds
 * requests and checks answers with it. Paths use Fastify's `:param` syntax.
 */

/** Who may call a route: the token kind it needs (`state`: a user token or the workspace's job token). */
export type AuthKind = "none" | "user" | "pool" | "session" | "job" | "state";

/** Methods the server serves; LOCK and UNLOCK are terraform's http state backend. */
export type RouteMethod = "GET" | "POST" | "PUT" | "PATCH" | "DELETE" | "LOCK" | "UNLOCK";

/** A request body: JSON checked by a schema, or raw bytes of a content type. */
export type BodySpec = { kind: "json"; schema: z.ZodType } | { kind: "raw"; contentType: string } | { kind: "none" };

/** A success response: JSON checked by a schema, raw bytes, or nothing. */
export type ResponseSpec =
  | { status: 200 | 201; kind: "json"; schema: z.ZodType }
  | { status: 200; kind: "raw"; contentType: string; emptyStatus?: 204 }
  | { status: 200 | 204; kind: "empty" };

type AnyObject = z.ZodObject<z.ZodRawShape>;

/** One route of the table. */
export interface Route<
  P extends AnyObject = AnyObject,
  Q extends AnyObject = AnyObject,
  B extends BodySpec = BodySpec,
  R extends ResponseSpec = ResponseSpec,
> {
  method: RouteMethod;
  path: string;
  summary: string;
  auth: AuthKind;
  params: P;
  query: Q;
  body: B;
  response: R;
  /** Codes this route answers beyond those of its auth kind and the ones every route may give. */
  errors: readonly ErrorCode[];
}

/** Codes any route may answer: bad input, too many large uploads at once, an outage, a bug. */
export const commonErrors: readonly ErrorCode[] = [
  "bad_request",
  "too_many_requests",
  "internal",
  "database_unavailable",
];

/** Codes each auth kind adds: a missing, unknown, revoked or misdirected token. */
export const authErrors: Record<AuthKind, readonly ErrorCode[]> = {
  none: [],
  user: ["unauthorized", "token_revoked", "forbidden"],
  pool: ["unauthorized", "token_revoked"],
  session: ["unauthorized", "token_revoked", "agent_lost"],
  job: ["unauthorized", "forbidden", "stale_attempt", "job_finished"],
  state: ["unauthorized", "token_revoked", "forbidden", "stale_attempt", "job_finished"],
};

const noParams = lazySchema("noParams", () => z.object({}));
const noQuery = lazySchema("noQuery", () => z.object({}));
const none = { kind: "none" } as const;
const json = <S extends z.ZodType>(schema: S) => ({ kind: "json", schema }) as const;
const raw = <C extends string>(contentType: C) => ({ kind: "raw", contentType }) as const;
const ok = <S extends z.ZodType>(schema: S) => ({ status: 200, kind: "json", schema }) as const;
const created = <S extends z.ZodType>(schema: S) => ({ status: 201, kind: "json", schema }) as const;
const noContent = { status: 204, kind: "empty" } as const;
const emptyOk = { status: 200, kind: "empty" } as const;
const bytes = (contentType: string) => ({ status: 200, kind: "raw", contentType }) as const;

/**
 * A route of the table, made on first use with its schemas (lazy-schema.ts): an idle agent
 * uses three routes of the table's ~60 and keeps only their schemas (SPEC §8).
 */
function route<
  P extends AnyObject = typeof noParams,
  Q extends AnyObject = typeof noQuery,
  B extends BodySpec = typeof none,
  R extends ResponseSpec = typeof noContent,
>(
  name: string,
  define: () => {
    method: RouteMethod;
    path: string;
    summary: string;
    auth: AuthKind;
    params?: P;
    query?: Q;
    body?: B;
    response: R;
    errors?: readonly ErrorCode[];
  },
): Route<P, Q, B, R> {
  return lazySchema(`routes.${name}`, () => {
    const def = define();
    return {
      ...def,
      params: def.params ?? (noParams as unknown as P),
      query: def.query ?? (noQuery as unknown as Q),
      body: def.body ?? (none as unknown as B),
      errors: def.errors ?? [],
    };
  });
}

const id = lazySchema("id", () => z.object({ id: z.string() }));
const pool = lazySchema("pool", () => z.object({ pool: z.string() }));
const ws = lazySchema("ws", () => z.object({ ws: z.string() }));
const wsVar = lazySchema("wsVar", () => z.object({ ws: z.string(), key: s.variableKeySchema }));
const waitQuery = lazySchema("waitQuery", () =>
  z.object({ wait: z.coerce.number().int().min(0).max(maxLongPollMs).default(0) }),
);
const planWaitQuery = lazySchema("planWaitQuery", () =>
  z.object({ wait: z.coerce.number().int().min(0).max(maxLongPollMs).default(maxLongPollMs) }),
);
const lockIdQuery = lazySchema("lockIdQuery", () => z.object({ ID: z.string().optional() }));
const list = s.listOf;

/** `{ok: true}` of calls that only acknowledge. */
export const okResponseSchema = lazySchema("okResponseSchema", () => z.object({ ok: z.boolean() }));
/** GET /readyz when the database answers. */
export const readyResponseSchema = lazySchema("readyResponseSchema", () => z.object({ status: z.literal("ready") }));
/**
 * Query of GET /api/v1/runs/:id: with `wait` (ms), the answer waits until the run's status
 * differs from `status` (by default the status it has when the request arrives).
 */
export const runWaitQuerySchema = lazySchema("runWaitQuerySchema", () =>
  z.object({
    wait: z.coerce.number().int().min(0).max(maxLongPollMs).default(0),
    status: s.runStatusSchema.optional(),
  }),
);
/** Query of GET /api/v1/runs/:id/logs. */
export const logQuerySchema = lazySchema("logQuerySchema", () =>
  z.object({
    phase: s.phaseSchema.default("plan"),
    offset: z.coerce.number().int().min(0).default(0),
    wait: z.coerce.number().int().min(0).max(maxLongPollMs).default(0),
    limit: z.coerce
      .number()
      .int()
      .min(1)
      .max(8 * 1024 * 1024)
      .default(1024 * 1024),
  }),
);

/** Every route, by name. Keys are stable: clients call `routes.createPool`, not a path string. */
export const routes = {
  // ---------- user API ----------
  listPools: route("listPools", () => ({
    method: "GET",
    path: `${userApi}/pools`,
    summary: "List agent pools",
    auth: "user",
    response: ok(list(s.poolSchema)),
  })),
  createPool: route("createPool", () => ({
    method: "POST",
    path: `${userApi}/pools`,
    summary: "Create an agent pool",
    auth: "user",
    body: json(s.createPoolSchema),
    response: created(s.poolSchema),
    errors: ["already_exists"],
  })),
  getPool: route("getPool", () => ({
    method: "GET",
    path: `${userApi}/pools/:pool`,
    summary: "Show a pool (id or name)",
    auth: "user",
    params: pool,
    response: ok(s.poolSchema),
    errors: ["not_found"],
  })),
  createPoolToken: route("createPoolToken", () => ({
    method: "POST",
    path: `${userApi}/pools/:pool/tokens`,
    summary: "Create a pool token (shown once)",
    auth: "user",
    params: pool,
    body: json(s.createPoolTokenSchema),
    response: created(s.createdPoolTokenSchema),
    errors: ["not_found"],
  })),
  poolDemand: route("poolDemand", () => ({
    method: "GET",
    path: `${userApi}/pools/:pool/demand`,
    summary: "A pool's demand for agents, for autoscalers (?jobsPerAgent=)",
    auth: "user",
    params: pool,
    query: s.poolDemandQuerySchema,
    response: ok(s.poolDemandSchema),
    errors: ["not_found"],
  })),
  listPoolTokens: route("listPoolTokens", () => ({
    method: "GET",
    path: `${userApi}/pools/:pool/tokens`,
    summary: "List a pool's tokens",
    auth: "user",
    params: pool,
    response: ok(list(s.poolTokenSchema)),
    errors: ["not_found"],
  })),
  revokePoolToken: route("revokePoolToken", () => ({
    method: "DELETE",
    path: `${userApi}/pool-tokens/:id`,
    summary: "Revoke a pool token; the jobs of its agents end",
    auth: "user",
    params: id,
    response: ok(s.poolTokenSchema),
    errors: ["not_found"],
  })),
  listUserTokens: route("listUserTokens", () => ({
    method: "GET",
    path: `${userApi}/user-tokens`,
    summary: "List API tokens",
    auth: "user",
    response: ok(list(s.userTokenSchema)),
  })),
  createUserToken: route("createUserToken", () => ({
    method: "POST",
    path: `${userApi}/user-tokens`,
    summary: "Create an API token (shown once)",
    auth: "user",
    body: json(s.createUserTokenSchema),
    response: created(s.createdUserTokenSchema),
  })),
  revokeUserToken: route("revokeUserToken", () => ({
    method: "DELETE",
    path: `${userApi}/user-tokens/:id`,
    summary: "Revoke an API token",
    auth: "user",
    params: id,
    response: ok(s.userTokenSchema),
    errors: ["not_found", "conflict"],
  })),
  listAgents: route("listAgents", () => ({
    method: "GET",
    path: `${userApi}/agents`,
    summary: "List agents (?pool=)",
    auth: "user",
    query: z.object({ pool: z.string().optional() }),
    response: ok(list(s.agentSchema)),
    errors: ["not_found"],
  })),
  createWorkspace: route("createWorkspace", () => ({
    method: "POST",
    path: `${userApi}/workspaces`,
    summary: "Create a workspace",
    auth: "user",
    body: json(s.createWorkspaceSchema),
    response: created(s.workspaceSchema),
    errors: ["already_exists", "not_found"],
  })),
  listWorkspaces: route("listWorkspaces", () => ({
    method: "GET",
    path: `${userApi}/workspaces`,
    summary: "List workspaces",
    auth: "user",
    response: ok(list(s.workspaceSchema)),
  })),
  getWorkspace: route("getWorkspace", () => ({
    method: "GET",
    path: `${userApi}/workspaces/:ws`,
    summary: "Show a workspace (id or name)",
    auth: "user",
    params: ws,
    response: ok(s.workspaceSchema),
    errors: ["not_found"],
  })),
  updateWorkspace: route("updateWorkspace", () => ({
    method: "PATCH",
    path: `${userApi}/workspaces/:ws`,
    summary: "Update a workspace",
    auth: "user",
    params: ws,
    body: json(s.updateWorkspaceSchema),
    response: ok(s.workspaceSchema),
    errors: ["not_found"],
  })),
  deleteWorkspace: route("deleteWorkspace", () => ({
    method: "DELETE",
    path: `${userApi}/workspaces/:ws`,
    summary: "Delete a workspace and its runs and state",
    auth: "user",
    params: ws,
    response: noContent,
    errors: ["not_found", "conflict"],
  })),
  listVariables: route("listVariables", () => ({
    method: "GET",
    path: `${userApi}/workspaces/:ws/vars`,
    summary: "List variables (sensitive values null)",
    auth: "user",
    params: ws,
    response: ok(list(s.variableSchema)),
    errors: ["not_found"],
  })),
  setVariable: route("setVariable", () => ({
    method: "PUT",
    path: `${userApi}/workspaces/:ws/vars/:key`,
    summary: "Set a variable",
    auth: "user",
    params: wsVar,
    body: json(s.setVariableSchema),
    response: ok(s.variableSchema),
    errors: ["not_found"],
  })),
  deleteVariable: route("deleteVariable", () => ({
    method: "DELETE",
    path: `${userApi}/workspaces/:ws/vars/:key`,
    summary: "Delete a variable (?kind=)",
    auth: "user",
    params: wsVar,
    query: z.object({ kind: s.variableKindSchema.default("terraform") }),
    response: noContent,
    errors: ["not_found"],
  })),
  uploadConfiguration: route("uploadConfiguration", () => ({
    method: "POST",
    path: `${userApi}/workspaces/:ws/configuration-versions`,
    summary: "Upload a configuration (tar.gz)",
    auth: "user",
    params: ws,
    body: raw("application/gzip"),
    response: created(s.configurationVersionSchema),
    errors: ["not_found", "invalid_archive", "payload_too_large"],
  })),
  listConfigurationVersions: route("listConfigurationVersions", () => ({
    method: "GET",
    path: `${userApi}/workspaces/:ws/configuration-versions`,
    summary: "List configuration versions",
    auth: "user",
    params: ws,
    response: ok(list(s.configurationVersionSchema)),
    errors: ["not_found"],
  })),
  workspaceOutputs: route("workspaceOutputs", () => ({
    method: "GET",
    path: `${userApi}/workspaces/:ws/outputs`,
    summary: "Latest outputs (sensitive values null)",
    auth: "user",
    params: ws,
    response: ok(list(s.outputSchema)),
    errors: ["not_found"],
  })),
  listStateVersions: route("listStateVersions", () => ({
    method: "GET",
    path: `${userApi}/workspaces/:ws/state-versions`,
    summary: "List state versions",
    auth: "user",
    params: ws,
    response: ok(list(s.stateVersionSchema)),
    errors: ["not_found"],
  })),
  downloadStateVersion: route("downloadStateVersion", () => ({
    method: "GET",
    path: `${userApi}/state-versions/:id/download`,
    summary: "Download a state version",
    auth: "user",
    params: id,
    response: bytes("application/json"),
    errors: ["not_found"],
  })),

  // ---------- terraform http state backend ----------
  readState: route("readState", () => ({
    method: "GET",
    path: `${userApi}/workspaces/:ws/state`,
    summary: "terraform http backend: read state (204 when none)",
    auth: "state",
    params: ws,
    response: { ...bytes("application/json"), emptyStatus: 204 },
    errors: ["not_found"],
  })),
  writeState: route("writeState", () => ({
    method: "POST",
    path: `${userApi}/workspaces/:ws/state`,
    summary: "terraform http backend: write state (?ID=lock id)",
    auth: "state",
    params: ws,
    query: lockIdQuery,
    body: raw("application/json"),
    response: emptyOk,
    errors: ["not_found", "invalid_json", "conflict", "state_locked"],
  })),
  deleteState: route("deleteState", () => ({
    method: "DELETE",
    path: `${userApi}/workspaces/:ws/state`,
    summary: "terraform http backend: delete state",
    auth: "state",
    params: ws,
    query: lockIdQuery,
    response: emptyOk,
    errors: ["not_found", "state_locked"],
  })),
  lockState: route("lockState", () => ({
    method: "LOCK",
    path: `${userApi}/workspaces/:ws/state`,
    summary: "terraform http backend: lock (LockInfo body; 423 with the holder's)",
    auth: "state",
    params: ws,
    body: raw("application/json"),
    response: emptyOk,
    errors: ["not_found", "invalid_json", "state_locked"],
  })),
  unlockState: route("unlockState", () => ({
    method: "UNLOCK",
    path: `${userApi}/workspaces/:ws/state`,
    summary: "terraform http backend: unlock (LockInfo body)",
    auth: "state",
    params: ws,
    body: raw("application/json"),
    response: emptyOk,
    errors: ["not_found", "invalid_json", "state_locked"],
  })),

  // ---------- runs ----------
  createRun: route("createRun", () => ({
    method: "POST",
    path: `${userApi}/runs`,
    summary: "Create a run",
    auth: "user",
    body: json(s.createRunSchema),
    response: created(s.runSchema),
    errors: ["not_found"],
  })),
  listRuns: route("listRuns", () => ({
    method: "GET",
    path: `${userApi}/runs`,
    summary: "List runs (?workspace=&limit=)",
    auth: "user",
    query: z.object({ workspace: z.string().optional(), limit: z.coerce.number().int().min(1).max(1000).optional() }),
    response: ok(list(s.runSchema)),
    errors: ["not_found"],
  })),
  getRun: route("getRun", () => ({
    method: "GET",
    path: `${userApi}/runs/:id`,
    summary: `Show a run; with ?wait=ms (most ${maxLongPollMs}) and &status=, once its status differs from that one`,
    auth: "user",
    params: id,
    query: runWaitQuerySchema,
    response: ok(s.runSchema),
    errors: ["not_found"],
  })),
  confirmRun: route("confirmRun", () => ({
    method: "POST",
    path: `${userApi}/runs/:id/confirm`,
    summary: "Apply a planned run",
    auth: "user",
    params: id,
    response: ok(s.runSchema),
    errors: ["not_found", "invalid_transition"],
  })),
  discardRun: route("discardRun", () => ({
    method: "POST",
    path: `${userApi}/runs/:id/discard`,
    summary: "Discard a planned run",
    auth: "user",
    params: id,
    response: ok(s.runSchema),
    errors: ["not_found", "invalid_transition"],
  })),
  cancelRun: route("cancelRun", () => ({
    method: "POST",
    path: `${userApi}/runs/:id/cancel`,
    summary: "Cancel a run (?force=true once terraform had its chance)",
    auth: "user",
    params: id,
    query: z.object({ force: z.enum(["true", "false"]).default("false") }),
    response: ok(s.runSchema),
    errors: ["not_found", "invalid_transition"],
  })),
  listRunJobs: route("listRunJobs", () => ({
    method: "GET",
    path: `${userApi}/runs/:id/jobs`,
    summary: "Jobs of a run (none for an unknown run)",
    auth: "user",
    params: id,
    response: ok(list(s.jobSchema)),
  })),
  runPlan: route("runPlan", () => ({
    method: "GET",
    path: `${userApi}/runs/:id/plan`,
    summary:
      "Plan JSON of a run; while its apply job still renders it, waits up to ?wait= ms (default and most 50 000), then 409 plan_pending",
    auth: "user",
    params: id,
    query: planWaitQuery,
    response: bytes("application/json"),
    errors: ["not_found", "plan_pending"],
  })),
  runLogs: route("runLogs", () => ({
    method: "GET",
    path: `${userApi}/runs/:id/logs`,
    summary: `Read a phase's log from an offset (?phase=&offset=&wait=&limit=); headers ${logHeaders.nextOffset} and ${logHeaders.complete}`,
    auth: "user",
    params: id,
    query: logQuerySchema,
    response: bytes("application/octet-stream"),
    errors: ["not_found"],
  })),

  // ---------- agent protocol ----------
  register: route("register", () => ({
    method: "POST",
    path: `${agentApi}/register`,
    summary: "Register an agent",
    auth: "pool",
    body: json(s.registerRequestSchema),
    response: ok(s.registerResponseSchema),
  })),
  agentDemand: route("agentDemand", () => ({
    method: "GET",
    path: `${agentApi}/demand`,
    summary:
      "The pool token's pool's demand for agents, for autoscalers such as KEDA's metrics-api scaler (?jobsPerAgent=)",
    auth: "pool",
    query: s.poolDemandQuerySchema,
    response: ok(s.poolDemandSchema),
  })),
  pollJob: route("pollJob", () => ({
    method: "POST",
    path: `${agentApi}/jobs/next`,
    summary: "Long-poll for the next job (?wait=ms)",
    auth: "session",
    query: waitQuery,
    response: ok(s.pollResponseSchema),
  })),
  agentHeartbeat: route("agentHeartbeat", () => ({
    method: "POST",
    path: `${agentApi}/heartbeat`,
    summary: "Agent heartbeat",
    auth: "session",
    body: json(s.agentHeartbeatSchema),
    response: ok(s.agentHeartbeatResponseSchema),
  })),
  deregister: route("deregister", () => ({
    method: "POST",
    path: `${agentApi}/deregister`,
    summary: "Deregister; unstarted jobs go back to the queue",
    auth: "session",
    response: ok(okResponseSchema),
  })),
  startJob: route("startJob", () => ({
    method: "POST",
    path: `${agentApi}/jobs/:id/start`,
    summary: "Start a claimed job",
    auth: "job",
    params: id,
    body: json(s.startJobSchema),
    response: ok(s.startJobResponseSchema),
    errors: ["job_already_started"],
  })),
  jobHeartbeat: route("jobHeartbeat", () => ({
    method: "POST",
    path: `${agentApi}/jobs/:id/heartbeat`,
    summary: "Renew the lease; waits for cancel (?wait=ms)",
    auth: "job",
    params: id,
    query: waitQuery,
    response: ok(s.jobHeartbeatResponseSchema),
    errors: [],
  })),
  jobConfiguration: route("jobConfiguration", () => ({
    method: "GET",
    path: `${agentApi}/jobs/:id/configuration`,
    summary: "Download the configuration",
    auth: "job",
    params: id,
    response: bytes("application/gzip"),
  })),
  jobVariables: route("jobVariables", () => ({
    method: "GET",
    path: `${agentApi}/jobs/:id/variables`,
    summary: "Variables with values",
    auth: "job",
    params: id,
    response: ok(s.jobVariablesResponseSchema),
  })),
  downloadPlan: route("downloadPlan", () => ({
    method: "GET",
    path: `${agentApi}/jobs/:id/plan`,
    summary: "Download the saved plan file",
    auth: "job",
    params: id,
    response: bytes("application/octet-stream"),
    errors: ["not_found"],
  })),
  uploadOutputs: route("uploadOutputs", () => ({
    method: "PUT",
    path: `${agentApi}/jobs/:id/outputs`,
    summary: "Record outputs",
    auth: "job",
    params: id,
    body: json(s.outputsUploadSchema),
    response: noContent,
  })),
  finishJob: route("finishJob", () => ({
    method: "POST",
    path: `${agentApi}/jobs/:id/finish`,
    summary: "Finish a job",
    auth: "job",
    params: id,
    body: json(s.finishJobSchema),
    response: noContent,
  })),
  appendLog: route("appendLog", () => ({
    method: "POST",
    path: `${agentApi}/jobs/:id/logs`,
    summary: "Append log bytes at ?offset=",
    auth: "job",
    params: id,
    query: z.object({ offset: z.coerce.number().int().min(0) }),
    body: raw("application/octet-stream"),
    response: ok(s.logAppendResponseSchema),
    errors: ["log_gap", "log_conflict", "payload_too_large"],
  })),
  uploadPlan: route("uploadPlan", () => ({
    method: "PUT",
    path: `${agentApi}/jobs/:id/plan`,
    summary: "Upload the plan file",
    auth: "job",
    params: id,
    body: raw("application/octet-stream"),
    response: noContent,
  })),
  uploadPlanJson: route("uploadPlanJson", () => ({
    method: "PUT",
    path: `${agentApi}/jobs/:id/plan-json`,
    summary: "Upload `show -json` of the plan; answers the change summary",
    auth: "job",
    params: id,
    body: raw("application/json"),
    response: ok(s.planSummarySchema),
    errors: ["invalid_json", "payload_too_large"],
  })),

  planJsonUnavailable: route("planJsonUnavailable", () => ({
    method: "POST",
    path: `${agentApi}/jobs/:id/plan-json-unavailable`,
    summary: "The apply job could not render the plan JSON it was told to: readers stop waiting for it",
    auth: "job",
    params: id,
    body: json(s.planJsonUnavailableSchema),
    response: noContent,
  })),

  // ---------- operations ----------
  healthz: route("healthz", () => ({
    method: "GET",
    path: "/healthz",
    summary: "Liveness",
    auth: "none",
    response: ok(s.healthSchema),
  })),
  readyz: route("readyz", () => ({
    method: "GET",
    path: "/readyz",
    summary: "Readiness (database reachable)",
    auth: "none",
    response: ok(readyResponseSchema),
  })),
  metrics: route("metrics", () => ({
    method: "GET",
    path: "/metrics",
    summary: "Prometheus metrics; pools by id unless a user token is sent (or DROVER_METRICS_PUBLIC_NAMES)",
    auth: "none",
    response: bytes("text/plain"),
    errors: ["unauthorized"],
  })),
  openapi: route("openapi", () => ({
    method: "GET",
    path: "/openapi.json",
    summary: "This API's OpenAPI 3.1 document",
    auth: "none",
    response: ok(z.record(z.string(), z.unknown())),
  })),
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
