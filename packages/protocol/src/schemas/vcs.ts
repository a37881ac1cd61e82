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
  if (url.username || url.password) return "the URL must not carry credentials: give the token with --vcs-token-file";
  if (url.search || url.hash) return "the URL must not have a query or fragment";
  return null;
}

/** A token as the user gives it: one line of visible characters. */
const vcsTokenSchema = z
  .string()
  .min(1, "the token is empty")
  .max(4096)
  .regex(/^[\x21-\x7e]+$/, "the token must be one line of visible ASCII characters (no spaces)");

export const vcsAuthKindSchema = z.enum(["token", "github-app"]);

export const vcsConnectionSchema = z.object({
  id: z.string(),
  name: z.string(),
  provider: vcsProviderSchema,
  /** The web and git base, e.g. https://github.com or https://gitlab.example.com. */
  url: z.string(),
  /** The REST API base, e.g. https://api.github.com or https://gitlab.example.com/api/v4. */
  apiUrl: z.string(),
  /** How the server authenticates; the secrets themselves are never returned. */
  authKind: vcsAuthKindSchema,
  /** A GitHub App's id and installation (its key is never returned); null with a token. */
  app: z.object({ appId: z.string(), installationId: z.number().int() }).nullable(),
  /** The pool of VCS agents the server reaches this connection through; null: the server reaches it itself. */
  viaPool: z.string().nullable(),
  /** Where the VCS delivers webhooks: <server>/api/v1/vcs/<name>/webhook. */
  webhookUrl: z.string(),
  createdAt: z.string(),
});
export type VcsConnection = z.infer<typeof vcsConnectionSchema>;

/** A GitHub App as the user gives it: its id, the installation on the repositories' owner, and its private key. */
export const githubAppSchema = z.object({
  appId: z.string().regex(/^[0-9]{1,20}$|^Iv[0-9A-Za-z.]{1,40}$/, "a GitHub App id (a number) or client id"),
  installationId: z.number().int().positive().max(Number.MAX_SAFE_INTEGER),
  /** Write-only: stored, never shown again. */
  privateKey: z
    .string()
    .max(16_384)
    .regex(/^-----BEGIN (RSA )?PRIVATE KEY-----[\s\S]+-----END (RSA )?PRIVATE KEY-----\s*$/, "a PEM private key"),
});

export const createVcsConnectionSchema = z
  .object({
    name: nameSchema,
    provider: vcsProviderSchema,
    url: vcsUrlSchema,
    /** The REST API base; by default api.github.com for https://github.com, else `<url>/api/v3` (GitHub) or `<url>/api/v4` (GitLab). */
    apiUrl: vcsUrlSchema.optional(),
    /** Write-only: stored, never shown again. Optional with `viaPool`: the VCS agents may hold it alone. */
    token: vcsTokenSchema.optional(),
    githubApp: githubAppSchema.optional(),
    /** A pool of kind `vcs` whose agents reach the VCS for the server (id or name). */
    viaPool: z.string().min(1).optional(),
  })
  .superRefine((c, ctx) => {
    if (c.token !== undefined && c.githubApp !== undefined)
      ctx.addIssue({ code: "custom", message: "give a token or a GitHub App, not both" });
    if (c.token === undefined && c.githubApp === undefined && c.viaPool === undefined)
      ctx.addIssue({
        code: "custom",
        path: ["token"],
        message:
          "a token or a GitHub App is needed, unless the connection is reached through a VCS agent pool (viaPool)",
      });
    if (c.githubApp !== undefined && c.provider !== "github")
      ctx.addIssue({ code: "custom", message: "a GitHub App authenticates to GitHub only" });
    if (c.provider === "gitlab" && c.apiUrl !== undefined && !/\/api\/v4\/*$/.test(c.apiUrl))
      ctx.addIssue({ code: "custom", message: "a GitLab API URL ends in /api/v4" });
  });

/** The REST API base a connection uses when none is given. */
export function defaultVcsApiUrl(provider: VcsProvider, url: string): string {
  const base = url.replace(/\/+$/, "");
  if (provider === "github") return /^https:\/\/github\.com$/i.test(base) ? "https://api.github.com" : `${base}/api/v3`;
  return `${base}/api/v4`;
}

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
  applyOnMerge: z
    .boolean()
    .nullable()
    .default(null)
    .describe("whether the branch's new commits (merges) apply without confirmation; null: the workspace's auto-apply"),
});

export const workspaceVcsSchema = z.object({
  workspaceId: z.string(),
  connectionId: z.string(),
  connection: z.string(),
  provider: vcsProviderSchema,
  repository: z.string(),
  branch: z.string(),
  triggerPaths: z.array(z.string()),
  /** Whether the branch's new commits apply without confirmation; null: as the workspace's auto-apply says. */
  applyOnMerge: z.boolean().nullable(),
  /** The newest commit of the branch a run was started for (null until the first). */
  lastCommitSha: z.string().nullable(),
  /** Why the last attempt to start a run from the branch failed (null after a success). */
  lastError: z.string().nullable(),
  /** The provider's id of the webhook Drover registered; null when it could not (see `webhook`). */
  webhookId: z.number().nullable(),
  createdAt: z.string(),
  /**
   * Only in the answer to linking: whether the webhook was registered, and when it could not be,
   * exactly what to register by hand (the secret is shown here only).
   */
  webhook: z
    .object({
      registered: z.boolean(),
      url: z.string(),
      contentType: z.literal("json"),
      events: z.array(z.string()),
      secret: z.string().optional(),
      reason: z.string().optional(),
    })
    .optional(),
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
