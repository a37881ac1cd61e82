import { z } from "zod";
import { escapeControlChars, hasControlChars, singleLineText } from "../text.js";
import { driverSchema, engineSchema, nameSchema, phaseSchema, runStatusSchema } from "./common.js";
import { runPlanOptionsSchema } from "./run-options.js";
import { outputSchema, planSummarySchema, variableKindSchema } from "./user.js";

/* The agent protocol (/api/agent/v1). */

export const registerRequestSchema = z.object({
  name: nameSchema,
  version: singleLineText(60),
  driver: driverSchema,
  capacity: z.number().int().min(1).max(1000),
});

export const registerResponseSchema = z.object({
  agentId: z.string(),
  poolId: z.string(),
  poolName: z.string(),
  sessionToken: z.string(),
  heartbeatIntervalMs: z.number().int(),
  leaseTtlMs: z.number().int(),
  maxPollWaitMs: z.number().int(),
});
export type RegisterResponse = z.infer<typeof registerResponseSchema>;

export const agentHeartbeatSchema = z.object({
  runningJobs: z.number().int().min(0),
  /** Runs whose plan directory the agent keeps for their apply (they hold variables and the plan). */
  keptPlanRuns: z.array(z.string().max(100)).max(100).optional(),
});
export const agentHeartbeatResponseSchema = z.object({
  ok: z.boolean(),
  /** Of the kept plan runs, those that will never be applied here (discarded, canceled, gone): delete their directories. */
  dropPlanRuns: z.array(z.string()).default([]),
});

/** Everything an agent needs to execute one job, except variable values (fetched with the job token). */
export const jobAssignmentSchema = z.object({
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
  /**
   * The hostname (port included) users write in `cloud` blocks and `terraform_remote_state`: the
   * host of the server's public URL. The agent gives the run's terraform the job token for it
   * (TF_TOKEN_…, decision 0072); absent from older servers.
   */
  tfeHostname: z.string().max(300).optional(),
  /**
   * The server's largest configuration archive (DROVER_MAX_CONFIGURATION_MB), in bytes: the
   * agent's own check of the archive allows what the server accepted; absent from older servers.
   */
  maxConfigurationBytes: z.number().int().positive().optional(),
  /**
   * A plan job of a saved cloud plan: upload `providers schema -json` too, which the human
   * `terraform show` of the plan renders with; absent from older servers.
   */
  providerSchemas: z.boolean().default(false),
  /** W3C traceparent of the job's root span: every process's spans for this job are its descendants. */
  traceparent: z.string().max(100).optional(),
  // Plan options: absent from older servers (a full plan); checked again here, as they become terraform arguments.
  ...runPlanOptionsSchema.shape,
});
export type JobAssignment = z.infer<typeof jobAssignmentSchema>;
export const pollResponseSchema = z.object({ job: jobAssignmentSchema.nullable() });

export const jobHeartbeatResponseSchema = z.object({
  cancelRequested: z.boolean(),
  leaseExpiresAt: z.string(),
});
export type JobHeartbeatResponse = z.infer<typeof jobHeartbeatResponseSchema>;

export const jobVariableSchema = z.object({
  key: z.string(),
  kind: variableKindSchema,
  sensitive: z.boolean(),
  /** The value is an HCL expression; absent from servers that predate HCL variables. */
  hcl: z.boolean().default(false),
  value: z.string(),
});
export type JobVariable = z.infer<typeof jobVariableSchema>;
export const jobVariablesResponseSchema = z.object({ variables: z.array(jobVariableSchema) });

export const logAppendResponseSchema = z.object({ offset: z.number().int() });

export const jobOutcomeSchema = z.enum(["succeeded", "failed", "canceled", "errored"]);
export type JobOutcome = z.infer<typeof jobOutcomeSchema>;
export const finishJobSchema = z.object({
  outcome: jobOutcomeSchema,
  // Terraform's error text is multi-line; anything else that could drive a terminal is escaped.
  message: z.string().max(4000).transform(escapeControlChars).nullable().default(null),
  /**
   * A plan job's summary from terraform itself: `plan -detailed-exitcode` (2 = changes) and the
   * counts of its `Plan:` line. The server decides the run's next step from it with the plan
   * JSON's counts, or from it alone when the JSON was too large to store (decision 0050).
   */
  planSummary: planSummarySchema.optional(),
});
/**
 * Who starts a job: an id the starting process makes once per job (a random UUID), so the
 * server recognises a retried start as the same one and refuses a second process (decision 0028).
 */
export const startJobSchema = z.object({ starter: z.string().min(1).max(128) });
export const startJobResponseSchema = z.object({ runStatus: runStatusSchema });

// An output's name is printed by `drover output`: one a job uploads holding a control character
// (a terminal escape) is refused. The response schema stays open, so names stored before still list.
export const outputsUploadSchema = z.object({
  outputs: z.array(
    outputSchema.extend({
      name: z.string().refine((n) => !hasControlChars(n), "an output name must not contain control characters"),
    }),
  ),
});
