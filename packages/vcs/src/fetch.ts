import { DroverError } from "@drover/protocol";
import { mkdtemp, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { cloneUrl, GitError, runGit, type GitAccess } from "./git.js";
import { fetchDirPrefix } from "./work-dir.js";

/*
 * One commit of a repository as a tar.gz: fetched at depth 1 into an empty repository (never a
 * history) and packed by `git archive`, within a size limit. The server stores the archive as a
 * configuration version; a VCS agent uploads it. Both then check it like a CLI upload.
 */

/** Deadlines of the git calls. */
export interface GitDeadlines {
  lsRemoteMs: number;
  fetchMs: number;
}

export const defaultGitDeadlines: GitDeadlines = { lsRemoteMs: 30_000, fetchMs: 300_000 };

const shaPattern = /^[0-9a-f]{40}([0-9a-f]{24})?$/;

/** Wraps git's refusal of a credential in a message that says what to do. */
function explained(err: unknown, repository: string): unknown {
  if (err instanceof GitError && err.authFailed)
    return new GitError(
      `the VCS refused the connection's token for ${repository} (check that the token is valid and may read the repository): ${err.message}`,
      true,
    );
  return err;
}

async function inTempDir<T>(workDir: string | undefined, work: (dir: string) => Promise<T>): Promise<T> {
  const dir = await mkdtemp(join(workDir ?? tmpdir(), fetchDirPrefix));
  try {
    return await work(dir);
  } finally {
    await rm(dir, { recursive: true, force: true });
  }
}

/** The commit a branch points at (`git ls-remote`); null when the branch does not exist. */
export async function branchHead(
  access: GitAccess,
  repository: string,
  branch: string,
  options: { deadlines?: GitDeadlines | undefined; workDir?: string | undefined; signal?: AbortSignal } = {},
): Promise<string | null> {
  const ref = `refs/heads/${branch}`;
  const out = await inTempDir(options.workDir, (dir) =>
    runGit({
      access,
      args: ["ls-remote", cloneUrl(access, repository), ref],
      cwd: dir,
      deadlineMs: (options.deadlines ?? defaultGitDeadlines).lsRemoteMs,
      signal: options.signal,
    }),
  ).catch((err: unknown) => {
    throw explained(err, repository);
  });
  for (const line of out.toString("utf8").split("\n")) {
    const [sha, name] = line.split("\t");
    if (name === ref && sha !== undefined && shaPattern.test(sha)) return sha;
  }
  return null;
}

export interface FetchArchiveInput {
  access: GitAccess;
  repository: string;
  sha: string;
  /** The largest archive accepted, in bytes. */
  maxBytes: number;
  deadlines?: GitDeadlines | undefined;
  /** Where the fetch's own directory is made (see prepareVcsWorkDir); the OS's temp dir by default. */
  workDir?: string | undefined;
  signal?: AbortSignal;
  /**
   * Decides from the files changed since `since` (null when they cannot be known) whether the
   * commit is wanted; an unwanted one is not packed.
   */
  wanted?: { since: string | null; given(changed: string[] | null): boolean };
}

/** A packed commit: the tar.gz, and the commit's author and first message line as git prints them. */
export interface CommitArchive {
  archive: Buffer;
  author: string;
  message: string;
}

/**
 * The files changed between `since` and `sha` (both trees, each fetched at depth 1), or null when
 * `since` is unknown or no longer in the repository (a rewritten history).
 */
async function changedFiles(
  git: (args: string[]) => Promise<Buffer>,
  repo: string[],
  url: string,
  since: string | null,
  sha: string,
): Promise<string[] | null> {
  if (since === null || !shaPattern.test(since)) return null;
  try {
    await git([...repo, "fetch", "--quiet", "--depth", "1", "--no-tags", url, since]);
  } catch {
    return null;
  }
  const out = await git([...repo, "diff", "--name-only", "-z", "--no-renames", since, sha]);
  return out
    .toString("utf8")
    .split("\0")
    .filter((f) => f !== "");
}

/** Fetches one commit and packs it; null when `wanted` turned it down. */
export async function fetchCommitArchive(input: FetchArchiveInput): Promise<CommitArchive | null> {
  if (!shaPattern.test(input.sha)) throw new GitError(`not a commit id: ${JSON.stringify(input.sha)}`, false);
  const deadlineMs = (input.deadlines ?? defaultGitDeadlines).fetchMs;
  return inTempDir(input.workDir, async (dir) => {
    const git = (args: string[], extra: { maxStdout?: number; tooLarge?: () => Error } = {}) =>
      runGit({ access: input.access, args, cwd: dir, deadlineMs, signal: input.signal, ...extra });
    await git(["init", "--quiet", "--bare", "repo.git"]);
    const repo = ["--git-dir", join(dir, "repo.git")];
    const url = cloneUrl(input.access, input.repository);
    await git([...repo, "fetch", "--quiet", "--depth", "1", "--no-tags", url, input.sha]);
    if (input.wanted && !input.wanted.given(await changedFiles(git, repo, url, input.wanted.since, input.sha)))
      return null;
    const meta = await git([...repo, "log", "-1", "--format=%an <%ae>%x00%B", input.sha]);
    const max = input.maxBytes;
    const archive = await git([...repo, "archive", "--format=tar.gz", input.sha], {
      maxStdout: max,
      tooLarge: () =>
        new DroverError(
          "payload_too_large",
          `the archive of ${input.repository} at ${input.sha.slice(0, 12)} is larger than ${Math.round(max / 1024 / 1024)} MB (DROVER_MAX_CONFIGURATION_MB)`,
        ),
    });
    const [author = "", body = ""] = meta.toString("utf8").split("\0");
    return { archive, author: author.trim(), message: body.trim().split("\n")[0] ?? "" };
  }).catch((err: unknown) => {
    throw explained(err, input.repository);
  });
}
