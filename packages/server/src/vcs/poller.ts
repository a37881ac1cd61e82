import { messageOf } from "@drover/protocol";
import type { ArchiveLimits } from "@drover/runtime";
import type { Logger } from "pino";
import type { DatabaseHealth } from "../db/health.js";
import type { StoreContext } from "../store/context.js";
import { createClaimedRun } from "../store/run-create.js";
import { claimVcsCommit, listVcsLinks, recordVcsError, type PolledLink } from "../store/workspace-vcs.js";
import { redact, vcsClient, type GitDeadlines, type VcsClient, type VcsEndpoint } from "@drover/vcs";
import { markVcsRunsSuperseded } from "../store/vcs-deliveries.js";
import { supersedeQueuedRuns } from "../store/vcs-supersede.js";
import { UntakenVcsTaskError } from "../store/vcs-tasks.js";
import { permanent } from "./delivery-outcome.js";
import { vcsReach } from "./relay.js";

/*
 * Finds new commits of linked branches by asking git for each branch's head, and starts a run
 * for each new one. Every server process polls; the conditional move of a link's last commit
 * decides which of them starts the run. A failure is logged and recorded on the link and the
 * commit is tried again at the next poll, except a refused archive, which a retry cannot change.
 */

export interface VcsPollerOptions {
  ctx: StoreContext;
  log: Logger;
  intervalMs: number;
  health: DatabaseHealth;
  limits: ArchiveLimits;
  deadlines?: GitDeadlines;
  /** Where git calls make their directories (`<data dir>/vcs-work`); the OS's temp dir by default. */
  workDir?: string | undefined;
  /** How long a VCS agent's task may take, for connections reached through a VCS agent pool. */
  agentTaskMs?: number;
  /** Makes the API client of a connection the server reaches itself (tests give stand-ins' clients). */
  client?: (endpoint: VcsEndpoint) => VcsClient;
}

/** What one poll did, per workspace (tests and logs). */
export type PollOutcome = { workspace: string; started?: string; skipped?: string; failed?: string };

export class VcsPoller {
  private timer: NodeJS.Timeout | undefined;
  private running: Promise<unknown> | undefined;
  private readonly shutdown = new AbortController();

  constructor(private readonly o: VcsPollerOptions) {}

  /** Polls every interval (nothing with an interval of 0). */
  start(): void {
    if (this.o.intervalMs <= 0) return;
    this.timer = setInterval(() => {
      if (this.running || this.shutdown.signal.aborted || this.o.health.state !== "available") return;
      this.running = this.pollOnce()
        .catch((err: unknown) => {
          if (!this.shutdown.signal.aborted) this.o.log.error({ err }, "polling linked repositories failed");
        })
        .finally(() => (this.running = undefined));
    }, this.o.intervalMs);
    this.timer.unref();
  }

  async stop(): Promise<void> {
    this.shutdown.abort();
    clearInterval(this.timer);
    await this.running;
  }

  /**
   * Looks at every link once; one link's failure does not stop the others. Once no VCS agent took
   * a connection's task in time, that connection's other links wait for the next round: each would
   * wait out DROVER_VCS_AGENT_TASK_SECONDS again, and every link after them with it.
   */
  async pollOnce(): Promise<PollOutcome[]> {
    const outcomes: PollOutcome[] = [];
    const untaken = new Map<string, string>();
    for (const link of await listVcsLinks(this.o.ctx)) {
      if (this.shutdown.signal.aborted) break;
      const noAgent = untaken.get(link.connectionId);
      if (noAgent !== undefined) {
        outcomes.push({ workspace: link.workspaceName, failed: `not polled: ${noAgent}` });
        continue;
      }
      outcomes.push(await this.pollLink(link, untaken));
    }
    return outcomes;
  }

  /** Cancels the link's runs still waiting for an older commit; a failure leaves them to run. */
  private async supersede(link: PolledLink, runId: string, head: string): Promise<void> {
    const { ctx } = this.o;
    try {
      const superseded = await supersedeQueuedRuns(ctx, {
        workspaceId: link.workspaceId,
        repository: link.repository,
        keepRunId: runId,
        branch: link.branch,
        pullRequest: null,
        reason: `commit ${head.slice(0, 12)} came after it (run ${runId})`,
      });
      await markVcsRunsSuperseded(ctx, superseded, `by run ${runId} (commit ${head.slice(0, 12)})`);
    } catch (err) {
      this.o.log.warn({ err, run: runId }, "canceling runs of older commits failed; they run");
    }
  }

  /** Polls one link; a task no agent took is noted in `untaken` under the link's connection. */
  private async pollLink(link: PolledLink, untaken: Map<string, string>): Promise<PollOutcome> {
    const { ctx, log } = this.o;
    const workspace = link.workspaceName;
    const where = { workspace, repository: link.repository, branch: link.branch };
    let secrets: string[] = [];
    let head: string | null = null;
    try {
      const reach = await vcsReach(ctx, link.connectionId, {
        agentTaskMs: this.o.agentTaskMs ?? 300_000,
        deadlines: this.o.deadlines,
        workDir: this.o.workDir,
        client: this.o.client ?? vcsClient,
      });
      secrets = reach.secrets;
      const signal = this.shutdown.signal;
      head = await reach.branchHead(link.repository, link.branch, signal);
      if (head === null) throw new Error(`branch ${link.branch} does not exist in ${link.repository}`);
      if (head === link.lastCommitSha) return { workspace, skipped: "no new commit" };
      if (head === link.lastErrorSha) return { workspace, skipped: "this commit was refused before" };
      const fetched = await reach.fetch({
        repository: link.repository,
        branch: link.branch,
        sha: head,
        workspaceId: link.workspaceId,
        since: link.lastCommitSha,
        triggerPaths: link.triggerPaths,
        workingDirectory: link.workingDirectory,
        limits: this.o.limits,
        signal,
      });
      if (fetched === null) {
        // Seen, so the next commit is compared with this one.
        if (await claimVcsCommit(ctx, link, link.lastCommitSha, head))
          log.info(
            { ...where, commit: head },
            "a new commit of a linked branch changed no file its trigger paths name",
          );
        return { workspace, skipped: "no changed file matches the trigger paths" };
      }
      const commit = head;
      const run = await createClaimedRun(
        ctx,
        {
          workspace: link.workspaceId,
          configurationVersionId: fetched.configurationVersion.id,
          planOnly: false,
          isDestroy: false,
          message: fetched.source.message,
          source: fetched.source,
          autoApply: link.applyOnMerge ?? undefined,
        },
        (db) => claimVcsCommit(ctx, link, link.lastCommitSha, commit, db),
      );
      if (run === null) return { workspace, skipped: "another server process started this commit" };
      log.info({ ...where, commit: head, run: run.id }, "a new commit of a linked branch started a run");
      await this.supersede(link, run.id, head);
      return { workspace, started: run.id };
    } catch (err) {
      const reason = redact(messageOf(err), secrets);
      if (this.shutdown.signal.aborted) return { workspace, failed: reason };
      if (err instanceof UntakenVcsTaskError) untaken.set(link.connectionId, reason);
      const refused = permanent(err);
      log.warn(
        { ...where, commit: head, reason },
        refused
          ? "the commit of a linked branch was refused; a new commit is needed"
          : "starting a run from a linked branch failed; retrying at the next poll",
      );
      await recordVcsError(ctx, link.workspaceId, refused ? head : null, reason).catch(() => undefined);
      return { workspace, failed: reason };
    }
  }
}
