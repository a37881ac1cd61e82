import { escapeControlChars, messageOf, type RunSource } from "@drover/protocol";
import type { ArchiveLimits } from "@drover/runtime";
import {
  branchHead,
  fetchCommitArchive,
  redact,
  secretsOf,
  type CommitArchive,
  type GitAccess,
  type GitDeadlines,
  type VcsClient,
  type VcsEndpoint,
} from "@drover/vcs";
import type { Logger } from "pino";
import type { DatabaseHealth } from "../db/health.js";
import {
  createConfigurationVersion,
  inspectConfiguration,
  type InspectedArchive,
} from "../store/configuration-versions.js";
import type { StoreContext } from "../store/context.js";
import { createClaimedRun } from "../store/run-create.js";
import { vcsRoute } from "../store/vcs-connections.js";
import {
  alreadyStarted,
  outcome,
  permanent,
  pullRequestMovedOn,
  pullRequestTargets,
  pushCandidates,
  seenWithoutRun,
  short,
} from "./delivery-outcome.js";
import { relayedPullRequest, relayedPush, type RelayedDelivery } from "./relayed-delivery.js";
import { serverGitAccess, vcsReach } from "./relay.js";
import { DeliveryQueue } from "./delivery-queue.js";
import {
  finishVcsDelivery,
  markVcsRunsSuperseded,
  recordVcsDeliveryOutcomes,
  vcsDeliveryWork,
  type OutcomeInput,
} from "../store/vcs-deliveries.js";
import { supersedeQueuedRuns } from "../store/vcs-supersede.js";
import { claimVcsCommit, listVcsLinks, recordVcsError, type PolledLink } from "../store/workspace-vcs.js";
import { pullRequestFiles } from "./pull-request-files.js";
import { commitTriggers } from "./triggers.js";
import type { PullRequestEvent, PushEvent, WebhookEvent } from "./webhook-events.js";

/*
 * The work a webhook delivery asks for, done after the delivery was answered: one delivery at a
 * time, in the order received. A push's commit is claimed on each link exactly as the poller
 * claims it, so the poller and the webhook never both start a run for one commit.
 * Which delivery is worked on when, and by which server, is the queue's (delivery-queue.ts).
 */

export interface WebhookProcessorOptions {
  ctx: StoreContext;
  log: Logger;
  limits: ArchiveLimits;
  deadlines?: GitDeadlines;
  /** Where git calls make their directories (`<data dir>/vcs-work`); the OS's temp dir by default. */
  workDir?: string | undefined;
  /** Makes the API client of a connection the server reaches itself (a GitHub App's git token comes from it). */
  client: (endpoint: VcsEndpoint) => VcsClient;
  /** How long a VCS agent's task may take, for connections reached through a VCS agent pool. */
  agentTaskMs: number;
  /** How long a claim on a delivery lasts unless renewed; also how often lapsed claims are looked for. */
  claimTtlMs: number;
  /** No look for lapsed claims while the database is unavailable (the tracker reports the outage). */
  health: DatabaseHealth;
}

export class WebhookProcessor {
  private readonly shutdown = new AbortController();
  private readonly queue: DeliveryQueue;

  constructor(private readonly o: WebhookProcessorOptions) {
    this.queue = new DeliveryQueue({
      ctx: o.ctx,
      log: o.log,
      claimTtlMs: o.claimTtlMs,
      health: o.health,
      signal: this.shutdown.signal,
      work: (id) => this.act(id),
    });
  }

  /** Queues a stored delivery's work. */
  enqueue(deliveryId: string, connectionId: string): void {
    this.queue.enqueue(deliveryId, connectionId);
  }

  /** Queues the deliveries a stopped server left, and from then on those of a dead one. */
  start(): Promise<void> {
    return this.queue.start();
  }

  /** Resolves when everything queued so far is done. */
  idle(): Promise<void> {
    return this.queue.idle();
  }

  async stop(): Promise<void> {
    this.shutdown.abort();
    await this.queue.stop();
  }

  private async act(id: string): Promise<void> {
    const { ctx } = this.o;
    const stored = await vcsDeliveryWork(ctx, id);
    if (!stored) return;
    const parsed = JSON.parse(stored.work) as WebhookEvent;
    // GitHub and GitLab take a repository's path in any case: a link matches the payload's name
    // whatever its case, and the link's own spelling (the one checked when linking) is used after.
    const named = parsed.repository?.toLowerCase();
    const links = (await listVcsLinks(ctx, stored.connectionId)).filter(
      (l) => named === undefined || l.repository.toLowerCase() === named,
    );
    const event =
      parsed.kind === "ignored" || links[0] === undefined ? parsed : { ...parsed, repository: links[0].repository };
    let outcomes: OutcomeInput[];
    if (event.kind === "ignored") outcomes = links.map((l) => outcome(l, "ignored", null, event.reason));
    else {
      const route = await vcsRoute(ctx, stored.connectionId);
      if (route.via === "pool") {
        const reach = await vcsReach(ctx, stored.connectionId, {
          agentTaskMs: this.o.agentTaskMs,
          client: this.o.client,
        });
        outcomes =
          event.kind === "push"
            ? await relayedPush(this.relayed(), reach, event, links)
            : await relayedPullRequest(this.relayed(), reach, event, links);
        await this.finish(id, outcomes);
        return;
      }
      let access: GitAccess;
      try {
        ({ access } = await serverGitAccess(route.endpoint, this.o.client, this.shutdown.signal));
      } catch (err) {
        const reason = `no git credential for the connection: ${messageOf(err)}`;
        await this.finish(
          id,
          links.map((l) => outcome(l, "fetch_failed", null, reason)),
        );
        return;
      }
      outcomes =
        event.kind === "push"
          ? await this.push(access, event, links)
          : await this.pullRequest(access, this.o.client(route.endpoint), event, links);
    }
    await this.finish(id, outcomes);
  }

  /**
   * Records what the delivery did. A server stopping mid-way cut its fetches short: their
   * failures are the stop's, not the repository's, so the delivery goes back for the next start.
   */
  private async finish(id: string, outcomes: OutcomeInput[]): Promise<void> {
    if (this.shutdown.signal.aborted) throw new Error("the server stopped before the delivery was acted on");
    await recordVcsDeliveryOutcomes(this.o.ctx, id, outcomes);
    await finishVcsDelivery(this.o.ctx, id);
  }

  private fetch(
    access: GitAccess,
    repository: string,
    sha: string,
    wanted?: Parameters<typeof fetchCommitArchive>[0]["wanted"],
  ) {
    return fetchCommitArchive({
      access,
      repository,
      sha,
      maxBytes: this.o.limits.maxCompressedBytes,
      deadlines: this.o.deadlines,
      workDir: this.o.workDir,
      signal: this.shutdown.signal,
      wanted,
    });
  }

  private async push(access: GitAccess, e: PushEvent, links: PolledLink[]): Promise<OutcomeInput[]> {
    const { ctx } = this.o;
    const { out, candidates } = pushCandidates(e, links);
    if (candidates.length === 0) return out;
    // A link that saw a commit other than the push's base may have seen a newer one (deliveries
    // can arrive out of order): a push that is no longer the branch's head starts nothing.
    if (candidates.some((l) => l.lastCommitSha !== null && l.lastCommitSha !== e.before)) {
      let head: string | null;
      try {
        head = await branchHead(access, e.repository, e.branch, {
          deadlines: this.o.deadlines,
          workDir: this.o.workDir,
          signal: this.shutdown.signal,
        });
      } catch (err) {
        const reason = redact(messageOf(err), secretsOf(access));
        return [...out, ...candidates.map((l) => outcome(l, "fetch_failed", null, reason))];
      }
      if (head !== e.after) {
        const detail = `the branch has moved on to ${head === null ? "nothing (deleted)" : short(head)}`;
        return [...out, ...candidates.map((l) => outcome(l, "superseded", null, detail))];
      }
    }
    // A link is run for the change since its last commit; one that has seen none yet, for the
    // push's own change. The payload's files are that change only when it starts at the push's base.
    const since = (l: PolledLink) => l.lastCommitSha ?? e.before;
    const payloadKnows = (l: PolledLink) => e.files !== null && since(l) === e.before;
    const gitSince = candidates.map(since).find((s, i) => s !== null && !payloadKnows(candidates[i]!)) ?? null;
    let gitChanged: string[] | null = null;
    const triggers = (l: PolledLink) =>
      commitTriggers(
        payloadKnows(l) ? e.files : since(l) === gitSince ? gitChanged : null,
        l.triggerPaths,
        l.workingDirectory,
      );
    let archive: CommitArchive | null = null;
    if (gitSince !== null || candidates.some(triggers)) {
      try {
        archive = await this.fetch(
          access,
          e.repository,
          e.after,
          gitSince === null
            ? undefined
            : {
                since: gitSince,
                given: (changed) => {
                  gitChanged = changed;
                  return candidates.some(triggers);
                },
              },
        );
      } catch (err) {
        const reason = redact(messageOf(err), secretsOf(access));
        this.o.log.warn({ repository: e.repository, commit: e.after, reason }, "fetching a pushed commit failed");
        return [...out, ...candidates.map((l) => outcome(l, "fetch_failed", null, reason))];
      }
    }
    const inspected = this.inspectOnce(archive);
    for (const l of candidates) {
      if (archive === null || !triggers(l)) {
        out.push(await seenWithoutRun(ctx, l, e.after));
        continue;
      }
      const source = sourceOf(e.repository, e.branch, e.after, archive, null);
      try {
        out.push(await this.startFromArchive(l, archive, inspected, source, false));
      } catch (err) {
        // Nothing was claimed: the claim is taken with the run, so a later delivery or poll retries.
        const reason = redact(messageOf(err), secretsOf(access));
        if (permanent(err)) await recordVcsError(ctx, l.workspaceId, e.after, reason);
        out.push(outcome(l, permanent(err) ? "fetch_failed" : "failed", null, reason));
      }
    }
    return out;
  }

  private async pullRequest(
    access: GitAccess,
    client: VcsClient,
    e: PullRequestEvent,
    links: PolledLink[],
  ): Promise<OutcomeInput[]> {
    const { out, targeted } = pullRequestTargets(e, links);
    if (targeted.length === 0) return out;
    const moved = await pullRequestMovedOn(
      e,
      targeted,
      () =>
        branchHead(access, e.repository, e.headBranch, {
          deadlines: this.o.deadlines,
          workDir: this.o.workDir,
          signal: this.shutdown.signal,
        }),
      (err) => redact(messageOf(err), secretsOf(access)),
    );
    if (moved !== null) return [...out, ...moved];
    let changed: string[] | null = null;
    const triggers = (l: PolledLink) => commitTriggers(changed, l.triggerPaths, l.workingDirectory);
    let archive: CommitArchive | null;
    try {
      const since =
        e.baseSha ??
        (await branchHead(access, e.repository, e.baseBranch, {
          deadlines: this.o.deadlines,
          workDir: this.o.workDir,
          signal: this.shutdown.signal,
        }));
      const listed =
        since === null
          ? undefined
          : await pullRequestFiles(
              client,
              { repository: e.repository, baseSha: since, headSha: e.headSha },
              { signal: this.shutdown.signal, log: this.o.log, secrets: secretsOf(access) },
            );
      if (listed !== undefined) changed = listed;
      // The VCS's list decides before the fetch; without it, the diff with the base branch's tip.
      const wanted =
        listed !== undefined || since === null
          ? undefined
          : {
              since,
              given: (c: string[] | null) => {
                changed = c;
                return targeted.some(triggers);
              },
            };
      archive =
        listed !== undefined && !targeted.some(triggers)
          ? null
          : await this.fetch(access, e.repository, e.headSha, wanted);
    } catch (err) {
      const reason = redact(messageOf(err), secretsOf(access));
      this.o.log.warn(
        { repository: e.repository, commit: e.headSha, reason },
        "fetching a pull request's commit failed",
      );
      return [...out, ...targeted.map((l) => outcome(l, "fetch_failed", null, reason))];
    }
    const inspected = this.inspectOnce(archive);
    for (const l of targeted) {
      if (archive === null || !triggers(l)) {
        out.push(outcome(l, "paths_unmatched", null, "the pull request changes no file the trigger paths name"));
        continue;
      }
      const source = sourceOf(e.repository, e.headBranch, e.headSha, archive, { number: e.number, url: e.url });
      try {
        out.push(await this.startFromArchive(l, archive, inspected, source, true));
      } catch (err) {
        const reason = redact(messageOf(err), secretsOf(access));
        out.push(outcome(l, permanent(err) ? "fetch_failed" : "failed", null, reason));
      }
    }
    return out;
  }

  /** What the handling of a relayed connection's delivery needs of this processor. */
  private relayed(): RelayedDelivery {
    return {
      ctx: this.o.ctx,
      log: this.o.log,
      limits: this.o.limits,
      signal: this.shutdown.signal,
      startRun: (l, cvId, source, speculative) => this.startRun(l, cvId, source, speculative),
    };
  }

  /**
   * The archive's checks, run when the first workspace stores it and shared by the rest: one
   * push can start a hundred workspaces of one repository.
   */
  private inspectOnce(archive: CommitArchive | null): () => Promise<InspectedArchive> {
    let inspection: Promise<InspectedArchive> | undefined;
    return () => {
      if (archive === null) throw new Error("no archive to inspect");
      inspection ??= inspectConfiguration(archive.archive, this.o.limits);
      return inspection;
    };
  }

  /** Stores the archive for the workspace, starts the run and cancels the older ones still waiting. */
  private async startFromArchive(
    l: PolledLink,
    archive: CommitArchive,
    inspected: () => Promise<InspectedArchive>,
    source: RunSource,
    speculative: boolean,
  ) {
    const cv = await createConfigurationVersion(this.o.ctx, l.workspaceId, archive.archive, this.o.limits, {
      inspected: await inspected(),
    });
    return this.startRun(l, cv.id, source, speculative);
  }

  /**
   * Starts the run of a stored configuration version and cancels the older ones still waiting. A
   * push's run takes its commit for the link in the same transaction (a pull request's plan
   * takes none): when another delivery or the poller took it first, no run starts.
   */
  private async startRun(l: PolledLink, configurationVersionId: string, source: RunSource, speculative: boolean) {
    const { ctx, log } = this.o;
    const run = await createClaimedRun(
      ctx,
      {
        workspace: l.workspaceId,
        configurationVersionId,
        planOnly: speculative,
        isDestroy: false,
        message: source.message,
        source,
        autoApply: speculative ? undefined : (l.applyOnMerge ?? undefined),
      },
      async (db) => speculative || claimVcsCommit(ctx, l, l.lastCommitSha, source.commitSha, db),
    );
    if (run === null) return alreadyStarted(l);
    const pr = source.pullRequest ?? null;
    log.info(
      {
        workspace: l.workspaceName,
        repository: source.repository,
        commit: source.commitSha,
        run: run.id,
        pr: pr?.number,
      },
      speculative ? "a pull request started a speculative plan" : "a push to a linked branch started a run",
    );
    try {
      const superseded = await supersedeQueuedRuns(ctx, {
        workspaceId: l.workspaceId,
        repository: source.repository,
        keepRunId: run.id,
        branch: source.branch,
        pullRequest: pr?.number ?? null,
        reason: `commit ${short(source.commitSha)} came after it (run ${run.id})`,
      });
      await markVcsRunsSuperseded(ctx, superseded, `by run ${run.id} (commit ${short(source.commitSha)})`);
    } catch (err) {
      // The run is started either way; the older ones then run too.
      log.warn({ err, run: run.id }, "canceling runs of older commits failed; they run");
    }
    return outcome(l, "started", run.id, null);
  }
}

function sourceOf(
  repository: string,
  branch: string,
  sha: string,
  archive: CommitArchive,
  pullRequest: RunSource["pullRequest"],
): RunSource {
  return {
    repository,
    branch,
    commitSha: sha,
    message: escapeControlChars(archive.message).slice(0, 500),
    author: escapeControlChars(archive.author).slice(0, 300),
    pullRequest,
  };
}
