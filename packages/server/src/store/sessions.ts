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
 * - a change in this process (revoked pool token, superseded, deregistered or lost agent)
 *   publishes `sessions-changed`, which drops every entry before the writer's call returns;
 *   a read that was in flight across the change is not kept (generation check);
 * - on PostgreSQL the event reaches the other server processes too (NOTIFY); should it be
 *   lost, no entry is used past `maxAgeMs`, so another process's change is seen within it;
 * - a `wakeAll` (the database went away, or events may have been missed) drops every entry:
 *   during an outage requests read the database and fail with its clear error, as before.
 * Only valid sessions are kept: a refusal is read again on every request.
 */

/** An agent row with its pool token's revocation, as a session check reads it. */
export type SessionRow = Selectable<AgentsTable> & { revoked_at: number | null };

interface Entry {
  row: SessionRow;
  /** When the read that produced `row` was issued (by the store clock). */
  readAt: number;
  /** Last request that used it; entries unused for `keepMs` are dropped. */
  usedAt: number;
}

const isValid = (row: SessionRow): boolean => row.state === "online" && row.revoked_at === null;

/** Agent ids per refresh statement: far below SQLite's and PostgreSQL's parameter limits. */
const refreshBatchSize = 500;

export class SessionCache {
  private entries = new Map<string, Entry>();
  private generation = 0;
  private timer: NodeJS.Timeout | undefined;
  private refreshing: Promise<void> | undefined;
  private readonly unsubscribe: Array<() => void>;

  /**
   * `read` answers the session rows of a batch of agent ids (a missing id: no such agent);
   * entries older than `maxAgeMs` are not used; entries unused for `keepMs` are forgotten.
   */
  constructor(
    private readonly ctx: { events: EventBus; now(): number },
    private readonly read: (ids: string[]) => Promise<Map<string, SessionRow>>,
    readonly maxAgeMs: number,
    private readonly keepMs: number,
  ) {
    this.unsubscribe = [ctx.events.subscribe("sessions-changed", sessionsChangedKey, () => this.invalidate()), ctx.events.onWakeAll(() => this.invalidate())];
  }

  /** The session of `agentId` if it was valid when read less than `maxAgeMs` ago and nothing changed since. */
  fresh(agentId: string): SessionRow | undefined {
    const entry = this.entries.get(agentId);
    if (!entry) return undefined;
    const now = this.ctx.now();
    if (now - entry.readAt > this.maxAgeMs) return undefined;
    entry.usedAt = now;
    return entry.row;
  }

  /** Call before issuing a read; pass the result to `keep`, which ignores it if a change came in between. */
  mark(): { generation: number; readAt: number } {
    return { generation: this.generation, readAt: this.ctx.now() };
  }

  /** Keeps a row read after `mark` (only a valid one, and only if no change was announced since). */
  keep(agentId: string, row: SessionRow | undefined, mark: { generation: number; readAt: number }): void {
    if (mark.generation !== this.generation) return;
    if (row && isValid(row)) this.entries.set(agentId, { row, readAt: mark.readAt, usedAt: this.entries.get(agentId)?.usedAt ?? mark.readAt });
    else this.entries.delete(agentId);
  }

  /** Drops every entry, and every read in flight, so the next check of each session reads the database. */
  invalidate(): void {
    this.generation++;
    this.entries.clear();
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
    if (this.refreshing) return this.refreshing;
    this.refreshing = this.refreshOnce(olderThanMs).finally(() => (this.refreshing = undefined));
    return this.refreshing;
  }

  private async refreshOnce(olderThanMs: number): Promise<void> {
    const now = this.ctx.now();
    const due: string[] = [];
    for (const [id, entry] of this.entries) {
      if (now - entry.usedAt > this.keepMs) this.entries.delete(id);
      else if (now - entry.readAt >= olderThanMs) due.push(id);
    }
    for (let i = 0; i < due.length; i += refreshBatchSize) {
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

  /** Stops refreshing and listening; the cache is empty afterwards. */
  stop(): void {
    clearInterval(this.timer);
    for (const off of this.unsubscribe) off();
    this.invalidate();
  }
}

/** The key of the `sessions-changed` event (one for all sessions: changes are rare). */
export const sessionsChangedKey = "all";

/** Announces a change that may refuse sessions kept by any server process (see SessionCache). */
export function announceSessionsChanged(events: EventBus): void {
  events.publish("sessions-changed", sessionsChangedKey);
}
