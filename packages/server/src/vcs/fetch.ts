import { escapeControlChars, type ConfigurationVersion, type RunSource } from "@drover/protocol";
import type { ArchiveLimits } from "@drover/runtime";
import { fetchCommitArchive, type GitAccess, type GitDeadlines } from "@drover/vcs";
import { createConfigurationVersion } from "../store/configuration-versions.js";
import type { StoreContext } from "../store/context.js";

/*
 * A commit of a linked repository as a configuration version: packed by the VCS package, then
 * checked and stored exactly like a CLI upload, size limit included.
 */

export interface FetchCommitInput {
  access: GitAccess;
  repository: string;
  branch: string;
  sha: string;
  /** The workspace the configuration version belongs to (id or name). */
  workspace: string;
  limits: ArchiveLimits;
  deadlines?: GitDeadlines | undefined;
  /** Where git calls make their directories (`<data dir>/vcs-work`); the OS's temp dir by default. */
  workDir?: string | undefined;
  signal?: AbortSignal;
  /** Decides from the files changed since `since` whether the commit is wanted (see fetchCommitArchive). */
  wanted?: { since: string | null; given(changed: string[] | null): boolean };
}

/**
 * Fetches one commit and stores it as a configuration version of the workspace, with what the
 * run shows of it; null when `wanted` turned it down.
 */
export async function fetchCommit(
  ctx: StoreContext,
  input: FetchCommitInput,
): Promise<{ configurationVersion: ConfigurationVersion; source: RunSource } | null> {
  const fetched = await fetchCommitArchive({ ...input, maxBytes: input.limits.maxCompressedBytes });
  if (fetched === null) return null;
  const configurationVersion = await createConfigurationVersion(ctx, input.workspace, fetched.archive, input.limits);
  return {
    configurationVersion,
    source: {
      repository: input.repository,
      branch: input.branch,
      commitSha: input.sha,
      message: escapeControlChars(fetched.message).slice(0, 500),
      author: escapeControlChars(fetched.author).slice(0, 300),
    },
  };
}
