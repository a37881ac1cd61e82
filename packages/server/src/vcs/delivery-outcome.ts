import { DroverError } from "@drover/protocol";
import type { OutcomeInput } from "../store/vcs-deliveries.js";
import type { PolledLink } from "../store/workspace-vcs.js";

/** A refusal a retry cannot change: the same commit gives the same archive and the same refusal. */
export const permanent = (err: unknown): boolean =>
  err instanceof DroverError && (err.code === "invalid_archive" || err.code === "payload_too_large");

/** A commit sha as messages show it. */
export const short = (sha: string): string => sha.slice(0, 12);

/** What a delivery did for one linked workspace. */
export function outcome(
  l: PolledLink,
  kind: OutcomeInput["outcome"],
  runId: string | null,
  detail: string | null,
): OutcomeInput {
  return { workspaceId: l.workspaceId, workspaceName: l.workspaceName, outcome: kind, runId, detail };
}
