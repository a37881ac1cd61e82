import { z } from "zod";
import { vcsConnectionSchema } from "./vcs.js";

/*
 * Webhook deliveries of a VCS connection and what each did for each linked workspace: the
 * answer to "why did (or didn't) my push start a run?".
 */

export const vcsDeliveryOutcomeKinds = [
  /** A run was started (runId). */
  "started",
  /** The workspace is linked to another branch of the repository. */
  "other_branch",
  /** No changed file matches the workspace's trigger paths or working directory. */
  "paths_unmatched",
  /** The run started was discarded while still queued: a newer commit came. */
  "superseded",
  /** The commit had already started a run (by polling or another delivery). */
  "already_started",
  /** The commit could not be fetched or its archive was refused (detail says why). */
  "fetch_failed",
  /** The event starts no run (detail says why). */
  "ignored",
  /** The run could not be created (detail says why). */
  "failed",
] as const;
export const vcsDeliveryOutcomeKindSchema = z.enum(vcsDeliveryOutcomeKinds);

export const vcsDeliveryOutcomeSchema = z.object({
  workspaceId: z.string(),
  workspace: z.string(),
  outcome: vcsDeliveryOutcomeKindSchema,
  runId: z.string().nullable(),
  detail: z.string().nullable(),
});
export type VcsDeliveryOutcome = z.infer<typeof vcsDeliveryOutcomeSchema>;

export const vcsDeliverySchema = z.object({
  id: z.string(),
  connection: z.string(),
  /** The provider's delivery id. */
  deliveryId: z.string(),
  /** The provider's event, e.g. push, pull_request.opened, Merge Request Hook.update. */
  event: z.string(),
  receivedAt: z.string(),
  /** `received`, then `processing` while its work is done, then `processed`. */
  status: z.enum(["received", "processing", "processed"]),
  summary: z.string().nullable(),
  outcomes: z.array(vcsDeliveryOutcomeSchema),
});
export type VcsDelivery = z.infer<typeof vcsDeliverySchema>;

export const listVcsDeliveriesQuerySchema = z.object({
  limit: z.coerce.number().int().min(1).max(500).default(50),
});

/** The answer to the VCS: the delivery was taken (or was a replay of one taken before). */
export const webhookAcceptedSchema = z.object({
  delivery: z.string(),
  duplicate: z.boolean(),
});

/** A new connection: shown with its webhook secret this once. */
export const createdVcsConnectionSchema = vcsConnectionSchema.extend({
  /** Write-only afterwards: register it as the webhook's secret (GitHub) or secret token (GitLab). */
  webhookSecret: z.string(),
});
