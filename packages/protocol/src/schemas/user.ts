import { z } from "zod";
import { imageReferenceSchema } from "../images.js";
import { hasControlChars, singleLineText } from "../text.js";
import { engineVersionSchema } from "../versions.js";
import {
  agentStatusSchema,
  driverSchema,
  maxPageSize,
  engineSchema,
  jobStatusSchema,
  nameSchema,
  phaseSchema,
  runStatusSchema,
} from "./common.js";
import { runPlanOptionsSchema } from "./run-options.js";
import { runSourceSchema } from "./vcs.js";

/* The resources of the user API (/api/v1). */

/** What a pool's agents do: run jobs (`runs`), or relay a VCS the server cannot reach (`vcs`). */
export const poolKindSchema = z.enum(["runs", "vcs"]);
export type PoolKind = z.infer<typeof poolKindSchema>;
export const poolSchema = z.object({ id: z.string(), name: z.string(), kind: poolKindSchema, createdAt: z.string() });
export type Pool = z.infer<typeof poolSchema>;
/** A pool in a list, with how many of its agents are online (idle or busy) out of those registered. */
export const poolSummarySchema = poolSchema.extend({
  agents: z.object({ online: z.number().int(), total: z.number().int() }),
});
export type PoolSummary = z.infer<typeof poolSummarySchema>;
/** What deleting a pool ended: its tokens (revoked) and its agents' registrations. */
export const deletedPoolSchema = poolSchema.extend({
  tokensRevoked: z.number().int(),
  agentsEnded: z.number().int(),
});
export const createPoolSchema = z.object({ name: nameSchema, kind: poolKindSchema.default("runs") });

export const poolTokenSchema = z.object({
  id: z.string(),
  poolId: z.string(),
  description: z.string(),
  createdAt: z.string(),
  lastUsedAt: z.string().nullable(),
  revokedAt: z.string().nullable(),
});
export type PoolToken = z.infer<typeof poolTokenSchema>;
export const createPoolTokenSchema = z.object({ description: singleLineText(200).default("") });
/** Returned once, at creation: the only time the secret is shown. */
export const createdPoolTokenSchema = poolTokenSchema.extend({ token: z.string() });

export const userTokenSchema = z.object({
  id: z.string(),
  description: z.string(),
  createdAt: z.string(),
  expiresAt: z.string().nullable(),
  revokedAt: z.string().nullable(),
  /** Installed from DROVER_ADMIN_TOKEN; a new value of that setting revokes it. */
  bootstrap: z.boolean(),
});
export type UserToken = z.infer<typeof userTokenSchema>;
/** The longest life a user token may be given, in days (ten years). */
export const maxUserTokenDays = 3650;
export const createUserTokenSchema = z.object({
  description: singleLineText(200).pipe(z.string().min(1, "name the token: who or what uses it")),
  /** Days until the token stops working; none means it never expires. */
  expiresInDays: z.number().int().min(1).max(maxUserTokenDays).optional(),
});
/** Returned once, at creation: the only time the secret is shown. */
export const createdUserTokenSchema = userTokenSchema.extend({ token: z.string() });

/** A browser signs in with an API token (typed into the sign-in form). */
export const webSignInSchema = z.object({ token: z.string().min(1, "paste an API token (drv_u_…)").max(4096) });
/** A browser session: the API token it stands for, when it ends, and the CSRF token its changes must carry. */
export const webSessionSchema = z.object({
  userTokenId: z.string(),
  expiresAt: z.string(),
  /** Sent back in the `x-drover-csrf` header with every request that changes something. */
  csrfToken: z.string(),
});
export type WebSession = z.infer<typeof webSessionSchema>;

export const agentSchema = z.object({
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
});
export type Agent = z.infer<typeof agentSchema>;

/**
 * What a pool needs from its agents right now, for autoscalers (KEDA's metrics-api scaler reads
 * `desiredAgents`). Runs awaiting confirmation need no agent and are reported apart.
 */
export const poolDemandSchema = z.object({
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
});
export type PoolDemand = z.infer<typeof poolDemandSchema>;
/** Query of the demand endpoints: the agents' concurrency (default: the largest of the pool's online agents, else 1). */
export const poolDemandQuerySchema = z.object({ jobsPerAgent: z.coerce.number().int().min(1).max(100).optional() });

export const workspaceSchema = z.object({
  id: z.string(),
  name: z.string(),
  poolId: z.string(),
  /** The pool's name, for people (poolId stays the reference). */
  poolName: z.string(),
  engine: engineSchema,
  engineVersion: z.string().nullable(),
  workingDirectory: z.string(),
  /** Docker driver: the image each run's container starts from; null: the agent's own (DROVER_AGENT_DOCKER_IMAGE). */
  runnerImage: z.string().nullable(),
  autoApply: z.boolean(),
  /** Runs that do not say otherwise auto-apply even a plan that destroys everything the workspace manages. */
  allowDestroyAll: z.boolean(),
  /** Names of the workspaces whose runs may read this one's state with `terraform_remote_state`. */
  remoteStateConsumers: z.array(z.string()),
  /** Every workspace's runs may read this one's state (TFE's `global-remote-state`). */
  globalRemoteState: z.boolean(),
  currentRunId: z.string().nullable(),
  stateLocked: z.boolean(),
  createdAt: z.string(),
});
export type Workspace = z.infer<typeof workspaceSchema>;

/** The newest run of a workspace, as its list shows it. */
export const runBriefSchema = z.object({ id: z.string(), status: runStatusSchema, createdAt: z.string() });
/** A workspace in a list: the workspace and its newest run. */
export const workspaceSummarySchema = workspaceSchema.extend({ latestRun: runBriefSchema.nullable() });
export type WorkspaceSummary = z.infer<typeof workspaceSummarySchema>;
/** Query of the workspace list: a name filter and a page (ordered by name). */
export const listWorkspacesQuerySchema = z.object({
  search: z.string().max(200).optional().describe("only workspaces whose name contains this (case-insensitive)"),
  pool: z.string().min(1).optional().describe("only workspaces of this pool (id or name)"),
  after: z.string().max(200).optional().describe("the `next` cursor of the previous page"),
  limit: z.coerce.number().int().min(1).max(maxPageSize).optional().describe("page size; all workspaces without it"),
});

const allowDestroyAllHelp =
  "auto-apply even a plan that destroys every resource the workspace manages, for runs that do not say otherwise";

/** A workspace's working directory: relative, inside the configuration (no `..`, not absolute). */
export const workingDirectorySchema = z
  .string()
  .max(500)
  .refine(
    (d) => !d.startsWith("/") && !d.split("/").includes(".."),
    "the working directory must be a relative path inside the configuration",
  )
  .refine((d) => !hasControlChars(d), "the working directory must not hold a control character");

export const createWorkspaceSchema = z.object({
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
  allowDestroyAll: z.boolean().default(false).describe(allowDestroyAllHelp),
});
export const updateWorkspaceSchema = z.object({
  pool: z.string().min(1).optional(),
  engine: engineSchema.optional(),
  engineVersion: engineVersionSchema.nullable().optional(),
  workingDirectory: workingDirectorySchema.optional(),
  runnerImage: imageReferenceSchema.nullable().optional().describe("null: back to the agents' own runner image"),
  autoApply: z.boolean().optional(),
  allowDestroyAll: z.boolean().optional().describe(allowDestroyAllHelp),
  remoteStateConsumers: z
    .array(z.string().min(1).max(200))
    .max(500)
    .optional()
    .describe(
      "the workspaces (ids or names) whose runs may read this workspace's state with terraform_remote_state; replaces the list",
    ),
  globalRemoteState: z
    .boolean()
    .optional()
    .describe("every workspace's runs may read this workspace's state with terraform_remote_state"),
});

export const variableKindSchema = z.enum(["terraform", "env"]);
export type VariableKind = z.infer<typeof variableKindSchema>;
/** A variable as the user API shows it: a sensitive value is never returned (null). */
export const variableSchema = z.object({
  key: z.string(),
  kind: variableKindSchema,
  sensitive: z.boolean(),
  /** The value is an HCL expression (a list, map, object, number…), not a string; terraform variables only. */
  hcl: z.boolean(),
  value: z.string().nullable(),
  updatedAt: z.string(),
});
export type Variable = z.infer<typeof variableSchema>;
export const setVariableSchema = z.object({
  value: z.string().max(256 * 1024),
  kind: variableKindSchema.default("terraform"),
  sensitive: z.boolean().default(false),
  hcl: z
    .boolean()
    .default(false)
    .describe('terraform variables: the value is one line of HCL (`{a = "b"}`, `[1, 2]`), passed to terraform typed'),
});
/**
 * A terraform variable's name as terraform takes it: letters, digits, '_' and '-', not starting
 * with a digit or '-'. Variables a run brings (`-var my-var=…` through the cloud block) use it.
 */
export const terraformVariableNamePattern = /^[A-Za-z_][A-Za-z0-9_-]*$/;

export const variableKeySchema = z
  .string()
  .min(1)
  .max(128)
  .regex(
    terraformVariableNamePattern,
    "a variable key is letters, digits, '_' and '-' (terraform variables only), not starting with a digit or '-'",
  );

/** An environment variable's name: letters, digits and '_', not starting with a digit. */
export const envVariableNamePattern = /^[A-Za-z_][A-Za-z0-9_]*$/;

export const configurationVersionSchema = z.object({
  id: z.string(),
  workspaceId: z.string(),
  size: z.number().int(),
  sha256: z.string(),
  createdAt: z.string(),
});
export type ConfigurationVersion = z.infer<typeof configurationVersionSchema>;

/** The largest resource count a plan summary may report (the database columns are 32-bit). */
export const maxPlanCount = 10_000_000;

export const planSummarySchema = z.object({
  add: z.number().int().min(0).max(maxPlanCount),
  change: z.number().int().min(0).max(maxPlanCount),
  destroy: z.number().int().min(0).max(maxPlanCount),
  hasChanges: z.boolean(),
});
export type PlanSummary = z.infer<typeof planSummarySchema>;

export const runSchema = z.object({
  id: z.string(),
  workspaceId: z.string(),
  /** The workspace's name, for people (workspaceId stays the reference). */
  workspaceName: z.string(),
  configurationVersionId: z.string(),
  status: runStatusSchema,
  planOnly: z.boolean(),
  /** A saved plan (`terraform plan -out` through the cloud API): it applies only by `terraform apply` of that file. */
  savedPlan: z.boolean().default(false),
  isDestroy: z.boolean(),
  autoApply: z.boolean(),
  message: z.string(),
  errorMessage: z.string().nullable(),
  cancelRequested: z.boolean(),
  planSummary: planSummarySchema.nullable(),
  planJobId: z.string().nullable(),
  /** Who started it: the description of the API token it was created with (null for older runs). */
  createdBy: z.string().nullable().default(null),
  applyJobId: z.string().nullable(),
  /** The commit a run from a linked repository was started for (null for uploads). */
  source: runSourceSchema.nullable().default(null),
  createdAt: z.string(),
  updatedAt: z.string(),
  ...runPlanOptionsSchema.shape,
});
export type Run = z.infer<typeof runSchema>;
export const createRunSchema = z.object({
  workspace: z.string().min(1).describe("workspace id or name"),
  configurationVersionId: z.string().min(1),
  planOnly: z.boolean().default(false),
  isDestroy: z.boolean().default(false),
  autoApply: z.boolean().optional().describe("defaults to the workspace's setting"),
  allowDestroyAll: z
    .boolean()
    .optional()
    .describe(
      "auto-apply even a plan that destroys every resource the workspace manages (held for confirmation otherwise); " +
        "defaults to the workspace's setting",
    ),
  message: z
    .string()
    .max(500)
    .refine(
      (m) => !hasControlChars(m.replace(/[\n\t]/g, "")),
      "must not contain control characters other than newlines and tabs",
    )
    .default(""),
  ...runPlanOptionsSchema.shape,
});

/** Query of the run list: newest first, by workspace and status, a page at a time. */
export const listRunsQuerySchema = z.object({
  workspace: z.string().optional(),
  status: runStatusSchema.optional(),
  limit: z.coerce.number().int().min(1).max(maxPageSize).optional(),
  after: z.string().max(200).optional().describe("the `next` cursor of the previous page"),
});

export const jobSchema = z.object({
  id: z.string(),
  runId: z.string(),
  workspaceId: z.string(),
  poolId: z.string(),
  phase: phaseSchema,
  status: jobStatusSchema,
  attempt: z.number().int(),
  agentId: z.string().nullable(),
  /** The agent's name, for people; null without an agent or once its registration is forgotten. */
  agentName: z.string().nullable(),
  message: z.string().nullable(),
  createdAt: z.string(),
  startedAt: z.string().nullable(),
  finishedAt: z.string().nullable(),
});
export type Job = z.infer<typeof jobSchema>;

export const outputSchema = z.object({
  name: z.string(),
  sensitive: z.boolean(),
  type: z.unknown(),
  value: z.unknown(),
});
export type Output = z.infer<typeof outputSchema>;

export const stateVersionSchema = z.object({
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
});
export type StateVersion = z.infer<typeof stateVersionSchema>;
