import { messageOf } from "@drover/protocol";
import { redact, type VcsClient } from "@drover/vcs";
import type { Logger } from "pino";

/**
 * The files a pull request changes: from the merge base of its head and the base branch's tip, as
 * the VCS's own compare lists them (its "files changed"). Commits fetched at depth 1 hold no
 * history to find the merge base with, so the VCS API is asked; a diff against the base tip
 * would count every change the base branch got after the pull request branched off as the pull
 * request's own, and plan workspaces it does not touch.
 *
 * null when the VCS cannot say (too many files: every linked workspace is planned); undefined
 * when the API call failed, and the caller compares with the base branch's tip instead.
 */
export async function pullRequestFiles(
  client: VcsClient,
  pr: { repository: string; baseSha: string; headSha: string },
  options: { signal?: AbortSignal | undefined; log: Logger; secrets?: readonly string[] },
): Promise<string[] | null | undefined> {
  try {
    const { files } = await client.run(
      { op: "changedFiles", repository: pr.repository, base: pr.baseSha, head: pr.headSha },
      options.signal ? { signal: options.signal } : {},
    );
    return files;
  } catch (err) {
    const reason = redact(messageOf(err), options.secrets ?? []);
    options.log.warn(
      { repository: pr.repository, commit: pr.headSha, reason },
      "the VCS did not list the pull request's changed files; they are taken from a diff with the base branch's tip",
    );
    return undefined;
  }
}
