import { DroverError } from "@drover/protocol";
import type { StoreContext } from "../store/context.js";
import type { OutcomeInput } from "../store/vcs-deliveries.js";
import { claimVcsCommit, type PolledLink } from "../store/workspace-vcs.js";
import type { PullRequestEvent, PushEvent } from "./webhook-events.js";

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

/**
 * The links a push may start a run on (its branch, a commit they have not seen), and the
 * outcomes of the others.
 */
export function pushCandidates(e: PushEvent, links: PolledLink[]): { out: OutcomeInput[]; candidates: PolledLink[] } {
  const out: OutcomeInput[] = [];
  const candidates: PolledLink[] = [];
  for (const l of links) {
    if (l.branch !== e.branch)
      out.push(outcome(l, "other_branch", null, `linked to ${l.branch}; the push was to ${e.branch}`));
    else if (l.lastCommitSha === e.after)
      out.push(outcome(l, "already_started", null, `commit ${short(e.after)} was seen before (polling or a delivery)`));
    else candidates.push(l);
  }
  return { out, candidates };
}

/** The links a pull request may plan (those of its base branch), and the outcomes of the others. */
export function pullRequestTargets(
  e: PullRequestEvent,
  links: PolledLink[],
): { out: OutcomeInput[]; targeted: PolledLink[] } {
  const out: OutcomeInput[] = [];
  const targeted: PolledLink[] = [];
  for (const l of links) {
    if (l.branch === e.baseBranch) targeted.push(l);
    else out.push(outcome(l, "other_branch", null, `linked to ${l.branch}; the pull request targets ${e.baseBranch}`));
  }
  return { out, targeted };
}

/**
 * The outcomes of a pull request whose head branch has moved past the delivery's commit, or null
 * when it has not. Deliveries come in any order, and a plan of the older commit would cancel the
 * newer one's. A failed look fails the delivery for every link.
 */
export async function pullRequestMovedOn(
  e: PullRequestEvent,
  targeted: PolledLink[],
  headOf: () => Promise<string | null>,
  reasonOf: (err: unknown) => string,
): Promise<OutcomeInput[] | null> {
  let head: string | null;
  try {
    head = await headOf();
  } catch (err) {
    return targeted.map((l) => outcome(l, "fetch_failed", null, reasonOf(err)));
  }
  if (head === e.headSha) return null;
  const detail = `the pull request has moved on to ${head === null ? "nothing (its branch is gone)" : short(head)}`;
  return targeted.map((l) => outcome(l, "superseded", null, detail));
}

/** What another delivery or the poller did first: a run of the commit, or its claim. */
export const alreadyStarted = (l: PolledLink): OutcomeInput =>
  outcome(l, "already_started", null, "another delivery or the poller took this commit");

/**
 * A pushed commit that starts no run for the link (its changes miss the trigger paths): taken as
 * seen all the same, so the next commit is compared with this one.
 */
export async function seenWithoutRun(ctx: StoreContext, l: PolledLink, sha: string): Promise<OutcomeInput> {
  return (await claimVcsCommit(ctx, l, l.lastCommitSha, sha))
    ? outcome(l, "paths_unmatched", null, "no changed file matches the trigger paths or working directory")
    : alreadyStarted(l);
}
