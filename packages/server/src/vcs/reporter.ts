import { escapeControlChars, isTerminalRun, messageOf, type Run } from "@drover/protocol";
import type { VcsClient, VcsEndpoint } from "@drover/vcs";
import type { Logger } from "pino";
import type { DatabaseHealth } from "../db/health.js";
import type { StoreContext } from "../store/context.js";
import { getRun } from "../store/runs.js";
import { connectionClient } from "./relay.js";
import {
  claimVcsReport,
  deliveredVcsReport,
  dueVcsReports,
  failedVcsReport,
  type VcsReportRow,
} from "../store/vcs-reports.js";

/*
 * Delivers the VCS reports outbox: a run's commit status `drover/<workspace>` (pending while it
 * waits or works, success or failure with the plan summary at the end, linking to the run's web
 * page) and the workspace's one comment on the pull request, edited in place. Each report says
 * what the run is when it is delivered, so a late delivery shows the newest state. A failure is
 * retried with exponential backoff; the run never waits for any of it.
 */

export interface VcsReportTiming {
  /** How often due reports are looked for besides run changes (which wake the reporter at once). */
  sweepMs: number;
  /** The first retry's delay; each later one doubles, up to maxBackoffMs. */
  backoffMs: number;
  maxBackoffMs: number;
  /** Failed deliveries after which a report is given up (logged, kept with its error). */
  maxAttempts: number;
  /** How long one process holds a report it delivers before another may take it. */
  claimMs: number;
}

export const defaultVcsReportTiming: VcsReportTiming = {
  sweepMs: 5_000,
  backoffMs: 5_000,
  maxBackoffMs: 10 * 60_000,
  maxAttempts: 20,
  claimMs: 60_000,
};

export interface VcsReporterOptions {
  ctx: StoreContext;
  log: Logger;
  health: DatabaseHealth;
  publicUrl(): string;
  client(endpoint: VcsEndpoint): VcsClient;
  /** How long a VCS agent's task may take, for connections reached through a VCS agent pool. */
  agentTaskMs: number;
  timing?: Partial<VcsReportTiming>;
}

const batch = 50;

export class VcsReporter {
  private readonly timing: VcsReportTiming;
  private timer: NodeJS.Timeout | undefined;
  private running: Promise<void> | undefined;
  private again = false;
  private unsubscribe: (() => void) | undefined;
  private stopped = false;

  constructor(private readonly o: VcsReporterOptions) {
    this.timing = { ...defaultVcsReportTiming, ...o.timing };
  }

  start(): void {
    this.unsubscribe = this.o.ctx.events.subscribeTopic("run-changed", () => this.wake());
    this.timer = setInterval(() => this.wake(), this.timing.sweepMs);
    this.timer.unref();
  }

  async stop(): Promise<void> {
    this.stopped = true;
    this.unsubscribe?.();
    clearInterval(this.timer);
    await this.running;
  }

  /** Delivers what is due now (and again if something became due meanwhile). */
  wake(): void {
    if (this.stopped || this.o.health.state !== "available") return;
    if (this.running) {
      this.again = true;
      return;
    }
    this.running = (async () => {
      do {
        this.again = false;
        await this.deliverDue().catch((err: unknown) => {
          if (!this.stopped) this.o.log.error({ err }, "delivering VCS reports failed");
        });
      } while (this.again && !this.stopped);
    })().finally(() => (this.running = undefined));
  }

  /** Delivers every report due now, once each. */
  async deliverDue(): Promise<void> {
    for (;;) {
      const due = await dueVcsReports(this.o.ctx, batch);
      let delivered = 0;
      for (const r of due) {
        if (this.stopped) return;
        if (!(await claimVcsReport(this.o.ctx, r, this.timing.claimMs))) continue;
        delivered++;
        await this.deliver(r);
      }
      if (due.length < batch || delivered === 0) return;
    }
  }

  private async deliver(r: VcsReportRow): Promise<void> {
    const { ctx, log } = this.o;
    try {
      const run = await getRun(ctx, r.run_id);
      const client = await connectionClient(ctx, r.connection_id, this.o);
      if (r.kind === "status") {
        await client.run({
          op: "setCommitStatus",
          repository: r.repository,
          sha: r.commit_sha,
          ...commitStatus(run),
          context: `drover/${run.workspaceName}`.slice(0, 100),
          targetUrl: runPage(this.o.publicUrl(), run),
        });
        await deliveredVcsReport(ctx, r, null);
      } else {
        const { commentId } = await client.run({
          op: "upsertPullRequestComment",
          repository: r.repository,
          number: r.pull_request_number ?? 0,
          commentId: r.comment_id === null ? null : Number(r.comment_id),
          body: commentBody(run, runPage(this.o.publicUrl(), run)),
          // The report's id: one per workspace and pull request, never shown before the comment.
          marker: `drover:${r.id}`,
        });
        await deliveredVcsReport(ctx, r, commentId);
      }
      log.debug({ run: r.run_id, kind: r.kind, repository: r.repository }, "reported a run to its VCS");
    } catch (err) {
      const reason = messageOf(err);
      const attempts = r.attempts + 1;
      const giveUp = attempts >= this.timing.maxAttempts;
      const delay = Math.min(this.timing.maxBackoffMs, this.timing.backoffMs * 2 ** (attempts - 1));
      await failedVcsReport(ctx, r, reason, giveUp ? null : ctx.now() + delay);
      if (giveUp)
        log.error({ run: r.run_id, kind: r.kind, attempts, reason }, "reporting a run to its VCS failed; given up");
      else
        log.warn(
          { run: r.run_id, kind: r.kind, attempts, retryInMs: delay, reason },
          "reporting a run to its VCS failed; retrying",
        );
      if (!giveUp) this.retryAfter(delay);
    }
  }

  /** Wakes when a retry falls due, sooner than the next sweep. */
  private retryAfter(ms: number): void {
    if (ms >= this.timing.sweepMs) return;
    setTimeout(() => this.wake(), ms).unref();
  }
}

/** The run's page in the web UI. */
export function runPage(publicUrl: string, run: Pick<Run, "id" | "workspaceName">): string {
  const base = publicUrl.replace(/\/+$/, "");
  return `${base}/app/workspaces/${encodeURIComponent(run.workspaceName)}/runs/${encodeURIComponent(run.id)}`;
}

/** `+a ~c -d`, or "" before a plan. */
export function planCounts(run: Pick<Run, "planSummary">): string {
  const s = run.planSummary;
  return s ? `+${s.add} ~${s.change} -${s.destroy}` : "";
}

type StatusReport = { state: "pending" | "success" | "failure" | "error"; description: string };

function oneLine(text: string, max: number): string {
  return escapeControlChars(text.split("\n")[0] ?? "").slice(0, max);
}

/** The commit status a run shows. */
export function commitStatus(run: Run): StatusReport {
  const counts = planCounts(run);
  switch (run.status) {
    case "pending":
      return { state: "pending", description: "Waiting for the workspace's current run" };
    case "queued":
      return { state: "pending", description: "Queued" };
    case "planning":
      return { state: "pending", description: "Planning" };
    case "planned":
      return { state: "pending", description: `Planned ${counts}, waiting for confirmation` };
    case "confirmed":
    case "applying":
      return { state: "pending", description: `Applying ${counts}` };
    case "planned_and_finished":
      return { state: "success", description: `Plan: ${counts}` };
    case "applied":
      return { state: "success", description: `Applied: ${counts}` };
    case "errored":
      return { state: "failure", description: oneLine(`Errored: ${run.errorMessage ?? "the run failed"}`, 140) };
    case "canceled":
      return { state: "error", description: "Canceled" };
    case "discarded":
      return { state: "error", description: `Discarded ${counts}`.trim() };
  }
}

/** The workspace's comment on the pull request, as of this run. */
export function commentBody(run: Run, page: string): string {
  const s = run.planSummary;
  const commit = run.source ? run.source.commitSha.slice(0, 12) : "";
  const outcome = !isTerminalRun(run.status)
    ? `Run ${run.status}.`
    : run.status === "errored"
      ? `**The plan failed:** ${oneLine(run.errorMessage ?? "see the run", 2000)}`
      : s
        ? `**Plan: ${s.add} to add, ${s.change} to change, ${s.destroy} to destroy** (\`${planCounts(run)}\`)`
        : `Run ${run.status}.`;
  return [
    `#### Drover · workspace \`${escapeControlChars(run.workspaceName)}\``,
    "",
    outcome,
    "",
    `Commit \`${commit}\` · [run ${run.id}](${page}) · ${run.status}`,
  ].join("\n");
}
