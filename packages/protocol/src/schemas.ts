import { z } from "zod";
import { looksLikeId } from "./ids.js";
import { lazySchema } from "./lazy-schema.js";
import { imageReferenceSchema } from "./images.js";
import { escapeControlChars, hasControlChars, singleLineText } from "./text.js";
import { engineVersionSchema } from "./versions.js";

/*
 * The wire contract: every request and response body of the user API (/api/v1) and the
 * agent protocol (/api/agent/v1), defined once. The server validates requests with these
 * and the agent and CLI validate responses with them, so a change breaks the build, not
 * production. Timestamps are ISO-8601 strings.
 */

export const nameSchema = lazySchema("nameSchema", () =>
  z
    .string()
    .min(1)
    .max(90)
    .regex(/^[A-Za-z0-9][A-Za-z0-9_.-]*$/, "use letters, digits, '-', '_' and '.', starting with a letter or digit")
    .refine(
      (n) => !looksLikeId(n),
      "must not look like an id (<kind>-<16 characters>): lookups by id or name would be ambiguous",
    ),
);

// ---------- lifecycle unions ----------

/** Run states; see docs/decisions/0002-run-lifecycle.md for the transitions. */
export const runStatuses = [
  "pending",
  "queued",
  "planning",
  "planned",
  "confirmed",
  "applying",
  "applied",
  "planned_and_finished",
  "errored",
  "canceled",
  "discarded",
] as const;
export const runStatusSchema = lazySchema("runStatusSchema", () => z.enum(runStatuses));
export type RunStatus = z.infer<typeof runStatusSchema>;
// Which status may follow which, and which are terminal: lifecycle.ts.

/** Job states: queued → assigned (leased) → running → one of the finished states. */
export const jobStatuses = ["queued", "assigned", "running", "succeeded", "failed", "canceled", "errored"] as const;
export const jobStatusSchema = lazySchema("jobStatusSchema", () => z.enum(jobStatuses));
export type JobStatus = z.infer<typeof jobStatusSchema>;

export const phaseSchema = lazySchema("phaseSchema", () => z.enum(["plan", "apply"]));
export type Phase = z.infer<typeof phaseSchema>;

export const engineSchema = lazySchema("engineSchema", () => z.enum(["terraform", "tofu"]));
export type Engine = z.infer<typeof engineSchema>;

export const agentStatusSchema = lazySchema("agentStatusSchema", () => z.enum(["idle", "busy", "offline"]));
export type AgentStatus = z.infer<typeof agentStatusSchema>;

export const driverSchema = lazySchema("driverSchema", () => z.enum(["local", "kubernetes", "docker"]));
export type Driver = z.infer<typeof driverSchema>;

// ---------- resources ----------

export const poolSchema = lazySchema("poolSchema", () =>
  z.object({ id: z.string(), name: z.string(), createdAt: z.string() }),
);
export type Pool = z.infer<typeof poolSchema>;
export const createPoolSchema = lazySchema("createPoolSchema", () => z.object({ name: nameSchema }));

export const poolTokenSchema = lazySchema("poolTokenSchema", () =>
  z.object({
    id: z.string(),
    poolId: z.string(),
    description: z.string(),
    createdAt: z.string(),
    lastUsedAt: z.string().nullable(),
    revokedAt: z.string().nullable(),
  }),
);
export type PoolToken = z.infer<typeof poolTokenSchema>;
export const createPoolTokenSchema = lazySchema("createPoolTokenSchema", () =>
  z.object({ description: singleLineText(200).default("") }),
);
/** Returned once, at creation: the only time the secret is shown. */
export const createdPoolTokenSchema = lazySchema("createdPoolTokenSchema", () =>
  poolTokenSchema.extend({ token: z.string() }),
);

export const userTokenSchema = lazySchema("userTokenSchema", () =>
  z.object({
    id: z.string(),
    description: z.string(),
    createdAt: z.string(),
    expiresAt: z.string().nullable(),
    revokedAt: z.string().nullable(),
    /** Installed from DROVER_ADMIN_TOKEN; a new value of that setting revokes it. */
    bootstrap: z.boolean(),
  }),
);
export type UserToken = z.infer<typeof userTokenSchema>;
export const createUserTokenSchema = lazySchema("createUserTokenSchema", () =>
  z.object({
    description: singleLineText(200).pipe(z.string().min(1, "name the token: who or what uses it")),
    /** Days until the token stops working; none means it never expires. */
    expiresInDays: z.number().int().min(1).max(3650).optional(),
  }),
);
/** Returned once, at creation: the only time the secret is shown. */
export const createdUserTokenSchema = lazySchema("createdUserTokenSchema", () =>
  userTokenSchema.extend({ token: z.string() }),
);

export const agentSchema = lazySchema("agentSchema", () =>
  z.object({
    id: z.string(),
    poolId: z.string(),
    name: z.string(),
    version: z.string(),
    driver: driverSchema,
    capacity: z.number().int(),
    runningJobs: z.number().int(),
    status: agentStatusSchema,
    registeredAt: z.string(),
    lastSeenAt: z.string(),
  }),
);
export type Agent = z.infer<typeof agentSchema>;

/**
 * What a pool needs from its agents right now, for autoscalers (KEDA's metrics-api scaler reads
 * `desiredAgents`). Runs awaiting confirmation need no agent and are reported apart.
 */
export const poolDemandSchema = lazySchema("poolDemandSchema", () =>
  z.object({
    pool: z.object({ id: z.string(), name: z.string() }),
    /** Jobs that need an agent and have not started: queued plus claimed-not-started. */
    pending: z.number().int(),
    /** Of `pending`: waiting for an agent to claim them. */
    queued: z.number().int(),
    /** Of `pending`: claimed by an agent that has not started them yet. */
    claimed: z.number().int(),
    /** Jobs executing on an agent. */
    running: z.number().int(),
    /** Runs with a finished plan waiting for a user to confirm or discard: no agent is needed until then. */
    awaitingConfirmation: z.number().int(),
    /** Online agents of the pool: idle ones run no job, busy ones at least one. */
    agents: z.object({ online: z.number().int(), idle: z.number().int(), busy: z.number().int() }),
    /** Jobs one agent runs at once, used for `desiredAgents`. */
    jobsPerAgent: z.number().int(),
    /** Agents needed for every pending and running job: ceil((pending + running) / jobsPerAgent). */
    desiredAgents: z.number().int(),
  }),
);
export type PoolDemand = z.infer<typeof poolDemandSchema>;
/** Query of the demand endpoints: the agents' concurrency (default: the largest of the pool's online agents, else 1). */
export const poolDemandQuerySchema = lazySchema("poolDemandQuerySchema", () =>
  z.object({ jobsPerAgent: z.coerce.number().int().min(1).max(100).optional() }),
);

export const workspaceSchema = lazySchema("workspaceSchema", () =>
  z.object({
    id: z.string(),
    name: z.string(),
    poolId: z.string(),
    engine: engineSchema,
    engineVersion: z.string().nullable(),
    workingDirectory: z.string(),
    /** Docker driver: the image each run's container starts from; null: the agent's own (DROVER_AGENT_DOCKER_IMAGE). */
    runnerImage: z.string().nullable(),
    autoApply: z.boolean(),
    currentRunId: z.string().nullable(),
    stateLocked: z.boolean(),
    createdAt: z.string(),
  }),
);
export type Workspace = z.infer<typeof workspaceSchema>;

const workingDirectorySchema = lazySchema("workingDirectorySchema", () =>
  z
    .string()
    .max(500)
    .refine(
      (d) => !d.startsWith("/") && !d.split("/").includes(".."),
      "the working directory must be a relative path inside the configuration",
    ),
);

export const createWorkspaceSchema = lazySchema("createWorkspaceSchema", () =>
  z.object({
    name: nameSchema,
    pool: z.string().min(1).describe("pool id or name"),
    engine: engineSchema.default("terraform"),
    engineVersion: engineVersionSchema.nullable().default(null),
    workingDirectory: workingDirectorySchema.default(""),
    runnerImage: imageReferenceSchema
      .nullable()
      .default(null)
      .describe(
        "docker driver: runner image of this workspace's runs; agents run it only if their DROVER_AGENT_DOCKER_ALLOWED_IMAGES allows it",
      ),
    autoApply: z.boolean().default(false),
  }),
);
export const updateWorkspaceSchema = lazySchema("updateWorkspaceSchema", () =>
  z.object({
    pool: z.string().min(1).optional(),
    engine: engineSchema.optional(),
    engineVersion: engineVersionSchema.nullable().optional(),
    workingDirectory: workingDirectorySchema.optional(),
    runnerImage: imageReferenceSchema.nullable().optional().describe("null: back to the agents' own runner image"),
    autoApply: z.boolean().optional(),
  }),
);

export const variableKindSchema = lazySchema("variableKindSchema", () => z.enum(["terraform", "env"]));
export type VariableKind = z.infer<typeof variableKindSchema>;
/** A variable as the user API shows it: a sensitive value is never returned (null). */
export const variableSchema = lazySchema("variableSchema", () =>
  z.object({
    key: z.string(),
    kind: variableKindSchema,
    sensitive: z.boolean(),
    value: z.string().nullable(),
    updatedAt: z.string(),
  }),
);
export type Variable = z.infer<typeof variableSchema>;
export const setVariableSchema = lazySchema("setVariableSchema", () =>
  z.object({
    value: z.string().max(256 * 1024),
    kind: variableKindSchema.default("terraform"),
    sensitive: z.boolean().default(false),
  }),
);
export const variableKeySchema = lazySchema("variableKeySchema", () =>
  z
    .string()
    .min(1)
    .max(128)
    .regex(/^[A-Za-z_][A-Za-z0-9_]*$/, "a variable key is letters, digits and '_', not starting with a digit"),
);

export const configurationVersionSchema = lazySchema("configurationVersionSchema", () =>
  z.object({
    id: z.string(),
    workspaceId: z.string(),
    size: z.number().int(),
    sha256: z.string(),
    createdAt: z.string(),
  }),
);
export type ConfigurationVersion = z.infer<typeof configurationVersionSchema>;

/** The largest resource count a plan summary may report (the database columns are 32-bit). */
export const maxPlanCount = 10_000_000;

export const planSummarySchema = lazySchema("planSummarySchema", () =>
  z.object({
    add: z.number().int().min(0).max(maxPlanCount),
    change: z.number().int().min(0).max(maxPlanCount),
    destroy: z.number().int().min(0).max(maxPlanCount),
    hasChanges: z.boolean(),
  }),
);
export type PlanSummary = z.infer<typeof planSummarySchema>;

export const runSchema = lazySchema("runSchema", () =>
  z.object({
    id: z.string(),
    workspaceId: z.string(),
    configurationVersionId: z.string(),
    status: runStatusSchema,
    planOnly: z.boolean(),
    isDestroy: z.boolean(),
    autoApply: z.boolean(),
    message: z.string(),
    errorMessage: z.string().nullable(),
    cancelRequested: z.boolean(),
    planSummary: planSummarySchema.nullable(),
    planJobId: z.string().nullable(),
    applyJobId: z.string().nullable(),
    createdAt: z.string(),
    updatedAt: z.string(),
  }),
);
export type Run = z.infer<typeof runSchema>;
export const createRunSchema = lazySchema("createRunSchema", () =>
  z.object({
    workspace: z.string().min(1).describe("workspace id or name"),
    configurationVersionId: z.string().min(1),
    planOnly: z.boolean().default(false),
    isDestroy: z.boolean().default(false),
    autoApply: z.boolean().optional().describe("defaults to the workspace's setting"),
    message: z
      .string()
      .max(500)
      .refine(
        (m) => !hasControlChars(m.replace(/[\n\t]/g, "")),
        "must not contain control characters other than newlines and tabs",
      )
      .default(""),
  }),
);

export const jobSchema = lazySchema("jobSchema", () =>
  z.object({
    id: z.string(),
    runId: z.string(),
    workspaceId: z.string(),
    poolId: z.string(),
    phase: phaseSchema,
    status: jobStatusSchema,
    attempt: z.number().int(),
    agentId: z.string().nullable(),
    message: z.string().nullable(),
    createdAt: z.string(),
    startedAt: z.string().nullable(),
    finishedAt: z.string().nullable(),
  }),
);
export type Job = z.infer<typeof jobSchema>;

export const outputSchema = lazySchema("outputSchema", () =>
  z.object({
    name: z.string(),
    sensitive: z.boolean(),
    type: z.unknown(),
    value: z.unknown(),
  }),
);
export type Output = z.infer<typeof outputSchema>;

export const stateVersionSchema = lazySchema("stateVersionSchema", () =>
  z.object({
    id: z.string(),
    workspaceId: z.string(),
    serial: z.number().int().nullable(),
    lineage: z.string().nullable(),
    md5: z.string(),
    size: z.number().int(),
    runId: z.string().nullable(),
    createdAt: z.string(),
    /** When a DELETE of the workspace state hid this version; it stays downloadable. */
    deletedAt: z.string().nullable(),
  }),
);
export type StateVersion = z.infer<typeof stateVersionSchema>;

export const listOf = <T extends z.ZodType>(item: T) => z.object({ items: z.array(item) });

export const errorBodySchema = lazySchema("errorBodySchema", () =>
  z.object({ error: z.string(), message: z.string() }).loose(),
);
export type ErrorBody = z.infer<typeof errorBodySchema>;

export const healthSchema = lazySchema("healthSchema", () =>
  z.object({
    status: z.enum(["ok", "starting", "stopping"]),
    currentTime: z.string(),
    lastActivity: z.string().nullable(),
  }),
);

// ---------- agent protocol ----------

export const registerRequestSchema = lazySchema("registerRequestSchema", () =>
  z.object({
    name: nameSchema,
    version: singleLineText(60),
    driver: driverSchema,
    capacity: z.number().int().min(1).max(1000),
  }),
);

export const registerResponseSchema = lazySchema("registerResponseSchema", () =>
  z.object({
    agentId: z.string(),
    poolId: z.string(),
    poolName: z.string(),
    sessionToken: z.string(),
    heartbeatIntervalMs: z.number().int(),
    leaseTtlMs: z.number().int(),
    maxPollWaitMs: z.number().int(),
  }),
);
export type RegisterResponse = z.infer<typeof registerResponseSchema>;

export const agentHeartbeatSchema = lazySchema("agentHeartbeatSchema", () =>
  z.object({
    runningJobs: z.number().int().min(0),
    /** Runs whose plan directory the agent keeps for their apply (they hold variables and the plan). */
    keptPlanRuns: z.array(z.string().max(100)).max(100).optional(),
  }),
);
export const agentHeartbeatResponseSchema = lazySchema("agentHeartbeatResponseSchema", () =>
  z.object({
    ok: z.boolean(),
    /** Of the kept plan runs, those that will never be applied here (discarded, canceled, gone): delete their directories. */
    dropPlanRuns: z.array(z.string()).default([]),
  }),
);

/** Everything an agent needs to execute one job, except variable values (fetched with the job token). */
export const jobAssignmentSchema = lazySchema("jobAssignmentSchema", () =>
  z.object({
    jobId: z.string(),
    attempt: z.number().int(),
    jobToken: z.string(),
    phase: phaseSchema,
    runId: z.string(),
    planOnly: z.boolean(),
    isDestroy: z.boolean(),
    workspace: z.object({
      id: z.string(),
      name: z.string(),
      engine: engineSchema,
      engineVersion: z.string().nullable(),
      workingDirectory: z.string(),
      /** The workspace's runner image (docker driver); absent from older servers, null: the agent's own. */
      runnerImage: z.string().nullable().default(null),
    }),
    configurationVersionId: z.string(),
    /** Path, relative to the server URL the agent uses, of the workspace state (http backend address and lock address). */
    statePath: z.string(),
    leaseTtlMs: z.number().int(),
    /** W3C traceparent of the job's root span: every process's spans for this job are its descendants. */
    traceparent: z.string().max(100).optional(),
  }),
);
export type JobAssignment = z.infer<typeof jobAssignmentSchema>;
export const pollResponseSchema = lazySchema("pollResponseSchema", () =>
  z.object({ job: jobAssignmentSchema.nullable() }),
);

export const jobHeartbeatResponseSchema = lazySchema("jobHeartbeatResponseSchema", () =>
  z.object({
    cancelRequested: z.boolean(),
    leaseExpiresAt: z.string(),
  }),
);
export type JobHeartbeatResponse = z.infer<typeof jobHeartbeatResponseSchema>;

export const jobVariableSchema = lazySchema("jobVariableSchema", () =>
  z.object({
    key: z.string(),
    kind: variableKindSchema,
    sensitive: z.boolean(),
    value: z.string(),
  }),
);
export type JobVariable = z.infer<typeof jobVariableSchema>;
export const jobVariablesResponseSchema = lazySchema("jobVariablesResponseSchema", () =>
  z.object({ variables: z.array(jobVariableSchema) }),
);

export const logAppendResponseSchema = lazySchema("logAppendResponseSchema", () =>
  z.object({ offset: z.number().int() }),
);

export const jobOutcomeSchema = lazySchema("jobOutcomeSchema", () =>
  z.enum(["succeeded", "failed", "canceled", "errored"]),
);
export type JobOutcome = z.infer<typeof jobOutcomeSchema>;
export const finishJobSchema = lazySchema("finishJobSchema", () =>
  z.object({
    outcome: jobOutcomeSchema,
    // Terraform's error text is multi-line; anything else that could drive a terminal is escaped.
    message: z.string().max(4000).transform(escapeControlChars).nullable().default(null),
    /**
     * A plan job's summary from terraform itself: `plan -detailed-exitcode` (2 = changes) and the
     * counts of its `Plan:` line. The server decides the run's next step from it with the plan
     * JSON's counts, or from it alone when the JSON was too large to store (decision 0050).
     */
    planSummary: planSummarySchema.optional(),
  }),
);
/**
 * Who starts a job: an id the starting process makes once per job (a random UUID), so the
 * server recognises a retried start as the same one and refuses a second process (decision 0028).
 */
export const startJobSchema = lazySchema("startJobSchema", () => z.object({ starter: z.string().min(1).max(128) }));
export const startJobResponseSchema = lazySchema("startJobResponseSchema", () =>
  z.object({ runStatus: runStatusSchema }),
);

// An output's name is printed by `drover output`: one a job uploads holding a control character
// (a terminal escape) is refused. The response schema stays open, so names stored before still list.
export const outputsUploadSchema = lazySchema("outputsUploadSchema", () =>
  z.object({
    outputs: z.array(
      outputSchema.extend({
        name: z.string().refine((n) => !hasControlChars(n), "an output name must not contain control characters"),
      }),
    ),
  }),
);
