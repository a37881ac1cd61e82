import { z } from "zod";
import { hasControlChars } from "../text.js";
import { branchProblem } from "./vcs.js";

/*
 * The closed set of things Drover asks of a VCS, whether the server asks it directly or through a
 * VCS agent's relay. Each operation names a repository and shas or numbers matching strict
 * patterns; none takes a URL, a host or a path, so the side that builds the request (from its
 * own configured base URL) can never be made to call anything else.
 */

const segment = /^[A-Za-z0-9_][A-Za-z0-9_.-]*$/;

/** A repository path (`owner/name`, or a GitLab `group/…/project`); no `..`, no leading `-`. */
export const repositoryPathSchema = z
  .string()
  .max(300)
  .refine((r) => {
    const parts = r.split("/");
    return parts.length >= 2 && parts.length <= 20 && parts.every((p) => segment.test(p) && !p.endsWith("."));
  }, "not a repository path");

export const commitShaSchema = z.string().regex(/^[0-9a-f]{40}([0-9a-f]{24})?$/, "not a commit id");
const branchSchema = z.string().refine((b) => branchProblem(b) === null, "not a valid branch name");
const numberSchema = z
  .number()
  .int()
  .positive()
  .max(2 ** 31);
// A provider's id of a comment or webhook: GitHub's comment ids are past 2^31 already.
const idSchema = z.number().int().positive().max(Number.MAX_SAFE_INTEGER);
const textSchema = (max: number) =>
  z
    .string()
    .max(max)
    .refine((t) => !hasControlChars(t.replace(/[\n\t]/g, "")), "control characters are not allowed");

const relayedOperations = [
  z.object({ op: z.literal("branchHead"), repository: repositoryPathSchema, branch: branchSchema }),
  z.object({ op: z.literal("commit"), repository: repositoryPathSchema, sha: commitShaSchema }),
  /** The files `head` changes since its merge base with `base`: a pull request's own changes. */
  z.object({
    op: z.literal("changedFiles"),
    repository: repositoryPathSchema,
    base: commitShaSchema,
    head: commitShaSchema,
  }),
  z.object({
    op: z.literal("setCommitStatus"),
    repository: repositoryPathSchema,
    sha: commitShaSchema,
    state: z.enum(["pending", "success", "failure", "error"]),
    /** The status's name on the commit, e.g. `drover/<workspace>`. */
    context: textSchema(100),
    description: textSchema(140),
    /** The run's page on the Drover server. */
    targetUrl: z.url({ protocol: /^https?$/ }).max(2000),
  }),
  z.object({
    op: z.literal("upsertPullRequestComment"),
    repository: repositoryPathSchema,
    number: numberSchema,
    /**
     * The comment to edit in place; null looks for the comment carrying `marker` first and
     * creates one only when there is none (a creation whose answer was lost has made one).
     */
    commentId: idSchema.nullable(),
    body: textSchema(60_000),
    /**
     * Kept hidden in the comment's body; it names the comment, one per report. Absent (a server
     * older than its VCS agents): the comment carries none and is never looked for.
     */
    marker: z
      .string()
      .regex(/^drover:[a-z0-9-]{1,64}$/, "not a comment marker")
      .optional(),
  }),
] as const;

/**
 * What a VCS agent runs for the server: every operation but the webhook's. A webhook names where
 * the VCS sends its events, so relaying its creation would let the control plane point a private
 * VCS's events anywhere; a relayed connection's webhook is registered by hand, at the agents' listener.
 */
export const relayedVcsOperationSchema = z.discriminatedUnion("op", [...relayedOperations]);
export type RelayedVcsOperation = z.infer<typeof relayedVcsOperationSchema>;

export const vcsOperationSchema = z.discriminatedUnion("op", [
  ...relayedOperations,
  z.object({
    op: z.literal("createWebhook"),
    repository: repositoryPathSchema,
    /** Where the VCS delivers: the server's (or a VCS agent listener's) webhook URL. */
    url: z.url({ protocol: /^https?$/ }).max(2000),
    secret: z.string().min(16).max(200),
  }),
  z.object({ op: z.literal("deleteWebhook"), repository: repositoryPathSchema, webhookId: idSchema }),
]);
export type VcsOperation = z.infer<typeof vcsOperationSchema>;
export type VcsOperationName = VcsOperation["op"];

const commitResultSchema = z.object({
  sha: commitShaSchema,
  message: z.string(),
  author: z.string(),
});

/** What each operation answers. */
export const vcsOperationResultSchemas = {
  branchHead: z.object({ sha: commitShaSchema.nullable() }),
  commit: commitResultSchema,
  /** null when the provider cannot say (e.g. too many files). */
  changedFiles: z.object({ files: z.array(z.string()).nullable() }),
  setCommitStatus: z.object({}),
  upsertPullRequestComment: z.object({ commentId: idSchema }),
  createWebhook: z.object({ webhookId: idSchema }),
  deleteWebhook: z.object({}),
} satisfies Record<VcsOperationName, z.ZodType>;
export type VcsOperationResult<K extends VcsOperationName> = z.infer<(typeof vcsOperationResultSchemas)[K]>;
