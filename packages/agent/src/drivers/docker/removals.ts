import { messageOf } from "@drover/protocol";
import type { Logger } from "pino";
import type { DockerEngine } from "./engine-api.js";

/** When a failed removal is tried again. */
export interface RemovalRetry {
  /** The first retry after a failure, in ms. */
  firstDelayMs?: number;
  /** The longest wait between two retries, in ms: the backoff doubles up to it. */
  maxDelayMs?: number;
}

/** A daemon away for a moment (restarted, upgraded) is usually back within seconds. */
const defaultFirstDelayMs = 5_000;
/** One away for long is asked every few minutes: each try is one cheap call. */
const defaultMaxDelayMs = 5 * 60_000;

/**
 * Removes the run containers of this agent's jobs. A removal that fails (the daemon away at the
 * job's end) is not left to the next start's orphan sweep: the container is kept in a set and
 * removed again at the next job's start and on a timer that backs off, each failure logged once.
 * The timer is unref'd and stop clears it and ends a try in flight: a stopping agent never waits
 * for one (what is left, its next start removes).
 */
export class ContainerRemovals {
  /** Containers to remove: id → name, for the logs. */
  private readonly pending = new Map<string, string>();
  private readonly firstDelayMs: number;
  private readonly maxDelayMs: number;
  private delayMs: number;
  private timer: NodeJS.Timeout | undefined;
  private sweeping: Promise<void> | undefined;
  private readonly stopping = new AbortController();

  constructor(
    private readonly engine: DockerEngine,
    private readonly log: Logger,
    retry: RemovalRetry = {},
  ) {
    this.firstDelayMs = retry.firstDelayMs ?? defaultFirstDelayMs;
    this.maxDelayMs = Math.max(this.firstDelayMs, retry.maxDelayMs ?? defaultMaxDelayMs);
    this.delayMs = this.firstDelayMs;
  }

  /** Removes a job's container; one the daemon would not remove is retried later. Never throws. */
  async remove(id: string, name: string): Promise<void> {
    try {
      await this.engine.remove(id, this.stopping.signal);
    } catch (err) {
      const stopped = this.stopping.signal.aborted;
      this.log.warn(
        { container: name, err: messageOf(err) },
        stopped
          ? "could not remove the run container; the agent's next start removes it"
          : "could not remove the run container; retrying later",
      );
      if (stopped) return;
      this.pending.set(id, name);
      this.schedule();
    }
  }

  /** Tries every removal that failed again, now (a job starts: the daemon answers again); never throws. */
  sweep(): Promise<void> {
    if (this.pending.size === 0 || this.stopping.signal.aborted) return Promise.resolve();
    this.sweeping ??= this.retry().finally(() => (this.sweeping = undefined));
    return this.sweeping;
  }

  private async retry(): Promise<void> {
    clearTimeout(this.timer);
    this.timer = undefined;
    for (const [id, name] of [...this.pending]) {
      try {
        await this.engine.remove(id, this.stopping.signal);
        this.pending.delete(id);
        this.log.info({ container: name }, "removed a run container whose removal had failed");
      } catch (err) {
        if (this.stopping.signal.aborted) return;
        this.log.debug({ container: name, err: messageOf(err) }, "the run container's removal failed again");
      }
    }
    if (this.pending.size === 0) {
      this.delayMs = this.firstDelayMs;
      return;
    }
    this.delayMs = Math.min(this.maxDelayMs, this.delayMs * 2);
    this.schedule();
  }

  private schedule(): void {
    if (this.timer || this.stopping.signal.aborted) return;
    this.timer = setTimeout(() => {
      this.timer = undefined;
      void this.sweep();
    }, this.delayMs);
    this.timer.unref();
  }

  /** The agent stops: no more tries, and the one in flight ends; what is left is logged once. */
  stop(): void {
    if (this.stopping.signal.aborted) return;
    this.stopping.abort();
    clearTimeout(this.timer);
    this.timer = undefined;
    if (this.pending.size > 0)
      this.log.warn(
        { containers: [...this.pending.values()] },
        "run containers the daemon would not remove are left; the agent's next start removes them",
      );
  }
}
