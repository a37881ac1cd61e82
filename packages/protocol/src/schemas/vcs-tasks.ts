import { z } from "zod";
import { errorCodes } from "../errors.js";
import { nameSchema } from "./common.js";
import { commitShaSchema, relayedVcsOperationSchema, repositoryPathSchema } from "./vcs-operations.js";

/*
 * What the server hands a VCS agent and what the agent answers. A task is one of the closed
 * operations or the fetch of one commit; both name a connection (by name: the agent holds its
 * credentials under that name) and nothing the agent could be made to reach beyond it. Every
 * schema is strict, so a field the agent does not know is a refusal, not something ignored.
 */

const triggerGlobSchema = z.string().min(1).max(200);

/** Fetch one commit at depth 1, pack it, upload it; trigger paths let the agent skip an unwanted one. */
export const vcsFetchTaskSchema = z.strictObject({
  repository: repositoryPathSchema,
  sha: commitShaSchema,
  /** The commit seen before: the files changed since it decide whether this one is wanted (null: always). */
  since: commitShaSchema.nullable(),
  triggerPaths: z.array(triggerGlobSchema).max(50),
  workingDirectory: z.string().max(500),
  /** The largest archive the server accepts. */
  maxBytes: z.number().int().positive(),
});
export type VcsFetchTask = z.infer<typeof vcsFetchTaskSchema>;

/** What a fetch answers once its archive is uploaded (or without one, when the commit was not wanted). */
export const vcsFetchResultSchema = z.strictObject({
  wanted: z.boolean(),
  author: z.string().max(1000),
  message: z.string().max(10_000),
});
export type VcsFetchResult = z.infer<typeof vcsFetchResultSchema>;

const taskBase = { id: z.string(), attempt: z.number().int().positive(), connection: nameSchema };

export const vcsTaskSchema = z.discriminatedUnion("kind", [
  z.strictObject({ ...taskBase, kind: z.literal("operation"), operation: relayedVcsOperationSchema }),
  z.strictObject({ ...taskBase, kind: z.literal("fetch"), fetch: vcsFetchTaskSchema }),
]);
export type VcsTask = z.infer<typeof vcsTaskSchema>;

/**
 * A task as it travels: the agent checks it against `vcsTaskSchema` itself and refuses (completes
 * with an error) anything else, so a task it cannot run is answered rather than retried forever.
 */
export const vcsTaskEnvelopeSchema = z.looseObject({ id: z.string(), attempt: z.number().int().positive() });

export const vcsTaskPollResponseSchema = z.object({
  task: vcsTaskEnvelopeSchema.nullable(),
  /** How long a lease lasts without a renewal. */
  leaseTtlMs: z.number().int().positive(),
});

/** The attempt a call speaks for: a call of a superseded attempt is refused (stale_attempt). */
export const vcsTaskAttemptSchema = z.object({ attempt: z.coerce.number().int().positive() });

export const vcsTaskLeaseSchema = z.object({ leaseExpiresAt: z.string() });

/** A task's end: the operation's result (checked against its schema), or why it failed. */
export const completeVcsTaskSchema = z.union([
  z.strictObject({ attempt: z.number().int().positive(), result: z.unknown() }),
  z.strictObject({
    attempt: z.number().int().positive(),
    error: z.string().min(1).max(4000),
    /** The coded error underneath (an archive over the limit is payload_too_large). */
    code: z.enum(errorCodes).optional(),
  }),
]);
export type CompleteVcsTask = z.infer<typeof completeVcsTaskSchema>;

/**
 * Largest webhook delivery body taken, by the server and by a VCS agent: GitHub's own cap on a
 * payload (a push of many commits lists each one). The body is held in memory to check its proof.
 */
export const maxWebhookBytes = 25 * 1024 * 1024;

/** A webhook delivery a VCS agent verified and forwards: the body as received, and the headers that name it. */
export const forwardedDeliverySchema = z.strictObject({
  connection: nameSchema,
  event: z.string().min(1).max(100),
  deliveryId: z.string().min(1).max(200),
  /** The raw body, base64: the signature covered these bytes. */
  body: z.string().max(Math.ceil(maxWebhookBytes / 3) * 4),
});
export type ForwardedDelivery = z.infer<typeof forwardedDeliverySchema>;
export type VcsTaskEnvelope = z.infer<typeof vcsTaskEnvelopeSchema>;
