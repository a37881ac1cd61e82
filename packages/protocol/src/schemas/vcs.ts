import { z } from "zod";
import { hasControlChars } from "../text.js";
import { nameSchema } from "./common.js";

/*
 * VCS connections and the workspaces linked to a repository. Every value here ends up in a git
 * command line or a URL the server builds, so each is checked against a strict pattern: nothing a
 * user sends may become an option, another host, or a path outside the repository.
 */

function problemIssue(ctx: z.RefinementCtx, problem: string | null): void {
  if (problem !== null) ctx.addIssue({ code: "custom", message: problem });
}

export const vcsProviderSchema = z.enum(["github", "gitlab"]);
export type VcsProvider = z.infer<typeof vcsProviderSchema>;

/** A base URL of a VCS (web/git or API): http(s), no credentials, no query or fragment. */
export const vcsUrlSchema = z
  .string()
  .max(500)
  .superRefine((u, ctx) => problemIssue(ctx, vcsUrlProblem(u)))
  .transform((u) => u.replace(/\/+$/, ""));

function vcsUrlProblem(text: string): string | null {
  let url: URL;
  try {
    url = new URL(text);
  } catch {
    return `not a URL: ${JSON.stringify(text)}`;
  }
  if (url.protocol !== "https:" && url.protocol !== "http:") return `the URL must be http(s)://…, not ${url.protocol}`;
  if (url.username || url.password) return "the URL must not carry credentials: give the token with --token-file";
  if (url.search || url.hash) return "the URL must not have a query or fragment";
  return null;
}

/** A token as the user gives it: one line of visible characters. */
const vcsTokenSchema = z
  .string()
  .min(1, "the token is empty")
  .max(4096)
  .regex(/^[\x21-\x7e]+$/, "the token must be one line of visible ASCII characters (no spaces)");

export const vcsConnectionSchema = z.object({
  id: z.string(),
  name: z.string(),
  provider: vcsProviderSchema,
  /** The web and git base, e.g. https://github.com or https://gitlab.example.com. */
  url: z.string(),
  /** How the server authenticates; the secret itself is never returned. */
  authKind: z.literal("token"),
  /** The pool of VCS agents the server reaches this connection through; null: the server reaches it itself. */
  viaPool: z.string().nullable(),
  createdAt: z.string(),
});
export type VcsConnection = z.infer<typeof vcsConnectionSchema>;
export const createVcsConnectionSchema = z
  .object({
    name: nameSchema,
    provider: vcsProviderSchema,
    url: vcsUrlSchema,
    /** Write-only: stored, never shown again. Optional with `viaPool`: the VCS agents may hold it alone. */
    token: vcsTokenSchema.optional(),
    /** A pool of kind `vcs` whose agents reach the VCS for the server (id or name). */
    viaPool: z.string().min(1).optional(),
  })
  .refine((c) => c.token !== undefined || c.viaPool !== undefined, {
    message: "a token is needed, unless the connection is reached through a VCS agent pool (viaPool)",
    path: ["token"],
  });

const segment = /^[A-Za-z0-9_][A-Za-z0-9_.-]*$/;

/** Why `repo` is not a repository path of `provider` (null when it is one). */
export function repositoryProblem(provider: VcsProvider, repo: string): string | null {
  const parts = repo.split("/");
  const shape = provider === "github" ? "owner/name" : "group/[subgroup/…]project";
  if (repo.length > 300 || parts.some((p) => !segment.test(p) || p === "." || p === ".." || p.endsWith(".")))
    return `the repository must be a path like ${shape} (letters, digits, '_', '.', '-'; no '..', no leading '-'), got ${JSON.stringify(repo)}`;
  if (provider === "github" ? parts.length !== 2 : parts.length < 2 || parts.length > 20)
    return `a ${provider} repository is ${shape}, got ${JSON.stringify(repo)}`;
  return null;
}

/** Why `branch` is not a valid git branch name (git check-ref-format's rules), or null. */
export function branchProblem(branch: string): string | null {
  const bad =
    branch.length === 0 ||
    branch.length > 255 ||
    branch === "@" ||
    branch.startsWith("-") ||
    branch.startsWith("/") ||
    branch.endsWith("/") ||
    branch.endsWith(".") ||
    branch.includes("..") ||
    branch.includes("//") ||
    branch.includes("@{") ||
    /[\s~^:?*[\\]/.test(branch) ||
    hasControlChars(branch) ||
    branch.split("/").some((c) => c.startsWith(".") || c.endsWith(".lock"));
  return bad ? `not a valid git branch name: ${JSON.stringify(branch)}` : null;
}

const triggerSchema = z
  .string()
  .min(1)
  .max(200)
  .refine(
    (g) => !hasControlChars(g) && !g.startsWith("/"),
    "a trigger path is a relative glob without control characters",
  );

export const linkWorkspaceVcsSchema = z.object({
  connection: z.string().min(1).describe("VCS connection id or name"),
  repository: z.string().min(1).max(300).describe("owner/name (GitHub) or group/…/project (GitLab)"),
  branch: z.string().superRefine((b, ctx) => problemIssue(ctx, branchProblem(b))),
  triggerPaths: z
    .array(triggerSchema)
    .max(50)
    .default([])
    .describe("run only for commits changing a file that matches one of these globs, or one in the working directory"),
});

export const workspaceVcsSchema = z.object({
  workspaceId: z.string(),
  connectionId: z.string(),
  connection: z.string(),
  provider: vcsProviderSchema,
  repository: z.string(),
  branch: z.string(),
  triggerPaths: z.array(z.string()),
  /** The newest commit of the branch a run was started for (null until the first). */
  lastCommitSha: z.string().nullable(),
  /** Why the last attempt to start a run from the branch failed (null after a success). */
  lastError: z.string().nullable(),
  createdAt: z.string(),
});
export type WorkspaceVcs = z.infer<typeof workspaceVcsSchema>;

/** Where a run's configuration came from, when it came from a repository. */
export const runSourceSchema = z.object({
  repository: z.string(),
  branch: z.string(),
  commitSha: z.string(),
  /** The commit message's first line. */
  message: z.string(),
  author: z.string(),
  /** The pull (merge) request a speculative run plans; absent or null for a branch's commit. */
  pullRequest: z.object({ number: z.number().int().positive(), url: z.string() }).nullable().optional(),
});
export type RunSource = z.infer<typeof runSourceSchema>;
