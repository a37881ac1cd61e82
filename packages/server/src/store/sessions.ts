import type { Selectable } from "kysely";
import type { AgentsTable } from "../db/schema.js";
import type { EventBus } from "../events.js";

/*
 * Agent sessions a server process checked recently, kept fresh off the request path.
 *
 * Every heartbeat and long-poll authenticates its session. Read from the database on each
 * request (even coalesced, decision 0033), a heartbeat cost a database round trip, and with
 * 5,000 agents on a loaded machine that round trip (the PostgreSQL backend and then the server
 * each waiting for a core) was most of the heartbeat's latency. Here a valid session read less
 * than `maxAgeMs` ago answers without the database; a timer re-reads the sessions in use in
 * batches (one statement per 500 agents) so that they stay fresh.
 *
 * What still refuses an agent promptly:
 * - a change in this process publishes `sessions-changed`, which drops the entries it concerns
 *   before the writer's call returns (a deregistered or superseded agent's own; every entry
 *   for a revoked pool token or the lost sweep); a read in flight across the change is not
 *   kept (sequence check);
 * - on PostgreSQL the event reaches the other server processes too (NOTIFY); should it be
 *   lost, no entry is used past `maxAgeMs` (by a monotonic clock), so another process's change
 *   is seen within it, and a claim re-checks the agent inside its transaction (store/queue.ts);
 * - a `wakeAll` (the database went away, or events may have been missed) drops every entry:
 *   during an outage requests read the database and fail with its clear error, as before.
 * Only valid sessions are kept: a refusal is read again on every request.
 */

/** An agent row with its pool token's revocation, as a session check reads it. */
export type SessionRow = Selectable<AgentsTable> & { revoked_at: number | null };

interface Entry {
  row: SessionRow;
  /** When the read that produced `row` was issued (by the cache's monotonic clock). */
  readAt: number;
  /** Last request that used it; entries unused for `keepMs` are dropped. */
  usedAt: number;
}

/** What `mark` hands to `keep`: when the read was issued, and which changes it may predate. */
export interface ReadMark {
  readAt: number;
  seq: number;
}

const isValid = (row: SessionRow): boolean => row.state === "online" && row.revoked_at === null;

/** Agent ids per refresh statement: far below SQLite's and PostgreSQL's parameter limits. */
const refreshBatchSize = 500;

/**
 * Single-agent drops remembered to refuse reads in flight across them; past this many (a burst
 * of deregistrations) the cache empties instead, which forgets them all.
 */
const maxRememberedDrops = 10_000;

/**
 * Milliseconds since an arbitrary start, never stepping back: entries age by it, not by the
 * wall clock, which an NTP step or an operator can move back and leave entries never expiring.
 * process.hrtime rather than `performance.now`, whose first use loads perf_hooks.
 */
export const monotonicMs = (): number => Number(process.hrtime.bigint() / 1_000_000n);

export class SessionCache {
  private entries = new Map<string, Entry>();
  /** Counts announced changes; a read marked before a change that concerns its agent is not kept. */
  private seq = 0;
  /** `seq` of the last change that concerned every agent. */
  private allChangedAt = 0;
  /** `seq` of the last change of single agents since `allChangedAt`. */
  private changedAt = new Map<string, number>();
  private timer: NodeJS.Timeout | undefined;
  private refreshing: Promise<void> | undefined;
  private stopped = false;
  private readonly unsubscribe: Array<() => void>;

  /**
   * `read` answers the session rows of a batch of agent ids (a missing id: no such agent);
   * entries older than `maxAgeMs` are not used; entries unused for `keepMs` are forgotten.
   * `clock` is monotonic milliseconds (injected by tests).
   */
  constructor(
    ctx: { events: EventBus },
    private readonly read: (ids: string[]) => Promise<Map<string, SessionRow>>,
    readonly maxAgeMs: number,
    private readonly keepMs: number,
    private readonly clock: () => number = monotonicMs,
  ) {
    this.unsubscribe = [
      ctx.events.subscribeTopic("sessions-changed", (key) =>
        key === sessionsChangedKey ? this.invalidate() : this.drop(key),
      ),
      ctx.events.onWakeAll(() => this.invalidate()),
    ];
  }

  /** The session of `agentId` if it was valid when read less than `maxAgeMs` ago and nothing changed since. */
  fresh(agentId: string): SessionRow | undefined {
    const entry = this.entries.get(agentId);
    if (!entry) return undefined;
    const now = this.clock();
    if (now - entry.readAt > this.maxAgeMs) return undefined;
    entry.usedAt = now;
    return entry.row;
  }

  /** Call before issuing a read; pass the result to `keep`, which ignores it if a change came in between. */
  mark(): ReadMark {
    return { readAt: this.clock(), seq: this.seq };
  }

  /** Keeps a row read after `mark` (only a valid one, and only if no change of its agent was announced since). */
  keep(agentId: string, row: SessionRow | undefined, mark: ReadMark): void {
    if (this.stopped || mark.seq < this.allChangedAt || mark.seq < (this.changedAt.get(agentId) ?? 0)) return;
    if (row && isValid(row))
      this.entries.set(agentId, { row, readAt: mark.readAt, usedAt: this.entries.get(agentId)?.usedAt ?? mark.readAt });
    else this.entries.delete(agentId);
  }

  /** Drops every entry, and every read in flight, so the next check of each session reads the database. */
  invalidate(): void {
    this.allChangedAt = ++this.seq;
    this.changedAt.clear();
    this.entries.clear();
  }

  /** Drops one agent's entry and its reads in flight (it deregistered or was superseded). */
  drop(agentId: string): void {
    if (this.changedAt.size >= maxRememberedDrops) {
      this.invalidate();
      return;
    }
    this.changedAt.set(agentId, ++this.seq);
    this.entries.delete(agentId);
  }

  /** How many sessions are kept (for tests and metrics). */
  get size(): number {
    return this.entries.size;
  }

  /**
   * Re-reads the kept sessions older than `olderThanMs` and forgets those unused for `keepMs`;
   * concurrent callers share one pass.
   */
  async refresh(olderThanMs = this.maxAgeMs / 3): Promise<void> {
    if (this.stopped) return;
    if (this.refreshing) return this.refreshing;
    this.refreshing = this.refreshOnce(olderThanMs).finally(() => (this.refreshing = undefined));
    return this.refreshing;
  }

  private async refreshOnce(olderThanMs: number): Promise<void> {
    const now = this.clock();
    const due: string[] = [];
    for (const [id, entry] of this.entries) {
      if (now - entry.usedAt > this.keepMs) this.entries.delete(id);
      else if (now - entry.readAt >= olderThanMs) due.push(id);
    }
    for (let i = 0; i < due.length; i += refreshBatchSize) {
      // Stopping (the server shutting down) must not send batches to a database being closed.
      if (this.stopped) return;
      const ids = due.slice(i, i + refreshBatchSize);
      const mark = this.mark();
      const rows = await this.read(ids);
      for (const id of ids) {
        if (this.entries.has(id)) this.keep(id, rows.get(id), mark);
      }
    }
  }

  /** Refreshes every `intervalMs` until `stop`. */
  start(intervalMs: number, onError: (err: unknown) => void): void {
    this.timer = setInterval(() => void this.refresh().catch(onError), intervalMs);
    this.timer.unref();
  }

  /**
   * Stops refreshing and listening; the cache is empty afterwards. Resolves once a refresh in
   * progress has ended (it issues no further batch), so the database can be closed after it.
   */
  async stop(): Promise<void> {
    this.stopped = true;
    clearInterval(this.timer);
    for (const off of this.unsubscribe) off();
    this.invalidate();
    // Its error was already reported through `start`'s onError (or its caller's promise).
    await this.refreshing?.catch(() => undefined);
  }
}

/**
 * The key of the `sessions-changed` event that concerns every session (a revoked pool token,
 * the lost sweep); a deregistration or a supersede carries the agent's id instead, so that a
 * fleet deregistering often (DROVER_AGENT_SINGLE, autoscaling) does not empty every cache.
 */
export const sessionsChangedKey = "all";

/**
 * Announces a change that may refuse sessions kept by any server process (see SessionCache):
 * of the agents `agentIds`, or of every agent when they are not given.
 */
export function announceSessionsChanged(events: EventBus, agentIds?: readonly string[]): void {
  if (!agentIds) {
    events.publish("sessions-changed", sessionsChangedKey);
    return;
  }
  for (const id of agentIds) events.publish("sessions-changed", id);
}
