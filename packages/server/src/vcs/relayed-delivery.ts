import { messageOf } from "@drover/protocol";
import type { ArchiveLimits } from "@drover/runtime";
import { redact } from "@drover/vcs";
import type { Logger } from "pino";
import type { RunSource } from "@drover/protocol";
import type { StoreContext } from "../store/context.js";
import type { OutcomeInput } from "../store/vcs-deliveries.js";
import { UntakenVcsTaskError } from "../store/vcs-tasks.js";
import { recordVcsError, type PolledLink } from "../store/workspace-vcs.js";
import {
  outcome,
  permanent,
  pullRequestMovedOn,
  pullRequestTargets,
  pushCandidates,
  seenWithoutRun,
  short,
} from "./delivery-outcome.js";
import { pullRequestFiles } from "./pull-request-files.js";
import { commitTriggers } from "./triggers.js";
import type { FetchedCommit, VcsReach } from "./relay.js";
import type { PullRequestEvent, PushEvent } from "./webhook-events.js";

/*
 * A delivery of a connection reached through VCS agents (forwarded by one of them, or received
 * by the server itself): the server holds no credential, so each linked workspace's commit is
 * fetched by an agent, which uploads the archive and tells whether the changed files trigger
 * the workspace. The same claims as the poller's keep one run per commit.
 */

/** What the handling needs of the webhook processor. */
export interface RelayedDelivery {
  ctx: StoreContext;
  log: Logger;
  limits: ArchiveLimits;
  signal: AbortSignal;
  /** Starts the run of a stored configuration version and supersedes older queued ones. */
  startRun(
    l: PolledLink,
    configurationVersionId: string,
    source: RunSource,
    speculative: boolean,
  ): Promise<OutcomeInput>;
}

/**
 * A push to a connection reached through VCS agents: each matching workspace's commit is
 * fetched by an agent (which also decides from the changed files whether it triggers), as the
 * poller would, but at once.
 */
export async function relayedPush(
  d: RelayedDelivery,
  reach: VcsReach,
  e: PushEvent,
  links: PolledLink[],
): Promise<OutcomeInput[]> {
  const { ctx } = d;
  const { out, candidates } = pushCandidates(e, links);
  if (candidates.length === 0) return out;
  // As for a connection the server reaches itself: deliveries can come out of order, so a push
  // whose base some link has moved past is checked against the branch's head first.
  if (candidates.some((l) => l.lastCommitSha !== null && l.lastCommitSha !== e.before)) {
    try {
      const head = await reach.branchHead(e.repository, e.branch, d.signal);
      if (head !== e.after) {
        const detail = `the branch has moved on to ${head === null ? "nothing (deleted)" : short(head)}`;
        return [...out, ...candidates.map((l) => outcome(l, "superseded", null, detail))];
      }
    } catch (err) {
      const reason = redact(messageOf(err), reach.secrets);
      return [...out, ...candidates.map((l) => outcome(l, "fetch_failed", null, reason))];
    }
  }
  const fetch = deliveryFetcher(d, reach);
  for (const l of candidates) {
    // The change since the link's last commit; for a link that has seen none, the push's own.
    const fetched = await fetch(l, e.repository, e.branch, e.after, l.lastCommitSha ?? e.before);
    if ("failed" in fetched) {
      out.push(fetched.failed);
      continue;
    }
    if (fetched.commit === null) {
      out.push(await seenWithoutRun(ctx, l, e.after));
      continue;
    }
    try {
      // The run takes the commit for the link in its own transaction.
      out.push(await d.startRun(l, fetched.commit.configurationVersion.id, fetched.commit.source, false));
    } catch (err) {
      out.push(outcome(l, "failed", null, redact(messageOf(err), reach.secrets)));
    }
  }
  return out;
}

const unmatched = "the pull request changes no file the trigger paths name";

/** A pull request on a connection reached through VCS agents: an agent fetches its head per workspace. */
export async function relayedPullRequest(
  d: RelayedDelivery,
  reach: VcsReach,
  e: PullRequestEvent,
  links: PolledLink[],
): Promise<OutcomeInput[]> {
  const { out, targeted } = pullRequestTargets(e, links);
  if (targeted.length === 0) return out;
  const moved = await pullRequestMovedOn(
    e,
    targeted,
    () => reach.branchHead(e.repository, e.headBranch, d.signal),
    (err) => redact(messageOf(err), reach.secrets),
  );
  if (moved !== null) return [...out, ...moved];
  let since: string | null;
  try {
    since = e.baseSha ?? (await reach.branchHead(e.repository, e.baseBranch, d.signal));
  } catch (err) {
    const reason = redact(messageOf(err), reach.secrets);
    return [...out, ...targeted.map((l) => outcome(l, "fetch_failed", null, reason))];
  }
  const own =
    since === null
      ? undefined
      : await pullRequestFiles(
          reach.client,
          { repository: e.repository, baseSha: since, headSha: e.headSha },
          { signal: d.signal, log: d.log, secrets: reach.secrets },
        );
  const fetch = deliveryFetcher(d, reach);
  for (const l of targeted) {
    if (own !== undefined && !commitTriggers(own, l.triggerPaths, l.workingDirectory)) {
      out.push(outcome(l, "paths_unmatched", null, unmatched));
      continue;
    }
    // Files the VCS listed decide already; without them, the VCS agent compares with the base tip.
    const fetched = await fetch(l, e.repository, e.headBranch, e.headSha, own === undefined ? since : null);
    if ("failed" in fetched) out.push(fetched.failed);
    else if (fetched.commit === null) out.push(outcome(l, "paths_unmatched", null, unmatched));
    else {
      const source = { ...fetched.commit.source, pullRequest: { number: e.number, url: e.url } };
      try {
        out.push(await d.startRun(l, fetched.commit.configurationVersion.id, source, true));
      } catch (err) {
        out.push(outcome(l, "failed", null, redact(messageOf(err), reach.secrets)));
      }
    }
  }
  return out;
}

type FetchedFor = { commit: FetchedCommit | null } | { failed: OutcomeInput };

/**
 * Fetches one delivery's commits, a workspace at a time. Once no agent took one in time, the
 * rest are not asked: each would wait out DROVER_VCS_AGENT_TASK_SECONDS again, holding up the
 * connection's later deliveries for as many deadlines as the repository has linked workspaces.
 */
function deliveryFetcher(d: RelayedDelivery, reach: VcsReach) {
  let untaken: string | undefined;
  return async (l: PolledLink, repository: string, branch: string, sha: string, since: string | null) => {
    if (untaken !== undefined)
      return { failed: outcome(l, "fetch_failed", null, `not fetched: ${untaken}`) } satisfies FetchedFor;
    const fetched = await relayedFetch(d, reach, l, repository, branch, sha, since);
    if ("untaken" in fetched) untaken = fetched.untaken;
    return fetched;
  };
}

/** One workspace's commit through a VCS agent: stored, or null when it triggers nothing, or why not. */
async function relayedFetch(
  d: RelayedDelivery,
  reach: VcsReach,
  l: PolledLink,
  repository: string,
  branch: string,
  sha: string,
  since: string | null,
): Promise<FetchedFor | { failed: OutcomeInput; untaken: string }> {
  try {
    const commit = await reach.fetch({
      repository,
      branch,
      sha,
      workspaceId: l.workspaceId,
      since,
      triggerPaths: l.triggerPaths,
      workingDirectory: l.workingDirectory,
      limits: d.limits,
      signal: d.signal,
    });
    return { commit };
  } catch (err) {
    const reason = redact(messageOf(err), reach.secrets);
    if (permanent(err)) await recordVcsError(d.ctx, l.workspaceId, sha, reason);
    d.log.warn({ repository, commit: sha, reason }, "fetching a commit through a VCS agent failed");
    const failed = outcome(l, "fetch_failed", null, reason);
    return err instanceof UntakenVcsTaskError ? { failed, untaken: reason } : { failed };
  }
}
