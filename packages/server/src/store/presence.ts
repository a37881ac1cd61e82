import { sql } from "kysely";
import type { PresenceRecorder, StoreContext } from "./context.js";

/*
 * Agents' signs of life (heartbeats and long-polls), coalesced into one write per interval.
 * With 1,000 agents each heartbeat was its own UPDATE, and on PostgreSQL those round trips
 * queued behind each other; `last_seen_at` only feeds the offline sweep (agent TTL: a minute)
 * and the agents list, so it may lag by a flush interval. Nothing else reads it.
 */

interface Sighting {
  seenAt: number;
  /** null: a long-poll, which does not know the agent's job count. */
  runningJobs: number | null;
}

/** Rows per UPDATE statement on SQLite: keeps the parameter count far below its limit. */
const batchSize = 500;

export class AgentPresence implements PresenceRecorder {
  private pending = new Map<string, Sighting>();
  private flushing: Promise<void> | undefined;
  private timer: NodeJS.Timeout | undefined;

  constructor(private readonly ctx: Pick<StoreContext, "db" | "now" | "dialect">) {}

  /** Notes that an agent is alive (and, from a heartbeat, how many jobs it runs). */
  record(agentId: string, runningJobs: number | null): void {
    const previous = this.pending.get(agentId);
    this.pending.set(agentId, { seenAt: this.ctx.now(), runningJobs: runningJobs ?? previous?.runningJobs ?? null });
  }

  /** Writes every pending sighting; concurrent callers share one write. */
  async flush(): Promise<void> {
    while (this.flushing) await this.flushing;
    if (this.pending.size === 0) return;
    const batch = [...this.pending];
    this.pending = new Map();
    this.flushing = this.write(batch).finally(() => (this.flushing = undefined));
    await this.flushing;
  }

  /** Flushes every `intervalMs` until `stop`. */
  start(intervalMs: number, onError: (err: unknown) => void): void {
    this.timer = setInterval(() => void this.flush().catch(onError), intervalMs);
    this.timer.unref();
  }

  /** Stops the timer and writes what is pending. */
  async stop(): Promise<void> {
    clearInterval(this.timer);
    await this.flush();
  }

  private async write(batch: Array<[string, Sighting]>): Promise<void> {
    if (this.ctx.dialect === "postgres") {
      // Three array parameters, however many agents: one statement to build and send, where
      // VALUES took three parameters per agent (5,000 agents: ~1,500 a statement, every 500 ms).
      const ids = batch.map(([id]) => id);
      const seen = batch.map(([, s]) => s.seenAt);
      const jobs = batch.map(([, s]) => s.runningJobs);
      await sql`update agents set last_seen_at = v.seen_at, running_jobs = coalesce(v.running_jobs, agents.running_jobs)
        from unnest(cast(${ids} as text[]), cast(${seen} as bigint[]), cast(${jobs} as integer[])) as v(id, seen_at, running_jobs)
        where agents.id = v.id and agents.state = 'online' and agents.last_seen_at <= v.seen_at`.execute(this.ctx.db);
      return;
    }
    for (let i = 0; i < batch.length; i += batchSize) {
      const rows = batch
        .slice(i, i + batchSize)
        .map(([id, s]) => sql`(${id}, cast(${s.seenAt} as bigint), cast(${s.runningJobs} as integer))`);
      // UPDATE … FROM (VALUES …) on SQLite (≥ 3.33), whose VALUES list names its columns column1, column2, …
      await sql`update agents set last_seen_at = v.column2, running_jobs = coalesce(v.column3, agents.running_jobs)
        from (values ${sql.join(rows)}) as v
        where agents.id = v.column1 and agents.state = 'online' and agents.last_seen_at <= v.column2`.execute(
        this.ctx.db,
      );
    }
  }
}
