import type { EventBus } from "../events.js";

/*
 * Long-poll waiters of each pool, woken one at a time. A queued job wakes the longest-waiting
 * poller only (not every agent of the pool: with 1,000 idle agents that would be 1,000 claim
 * transactions per job). A woken poller that finds nothing — the job went to a poller that was
 * not waiting — simply waits again. Once per `recheckMs` one waiter per pool re-checks the
 * queue anyway, which covers an event lost between server processes.
 */

interface Waiter {
  wake(): void;
}

class PoolWaiters {
  private readonly byPool = new Map<string, Set<Waiter>>();
  private readonly unsubscribe = new Map<string, () => void>();
  private readonly timer: NodeJS.Timeout;

  constructor(
    private readonly events: EventBus,
    recheckMs: number,
  ) {
    this.timer = setInterval(() => {
      for (const pool of this.byPool.keys()) this.wakeOne(pool);
    }, recheckMs);
    this.timer.unref();
    events.onWakeAll(() => this.wakeAll());
  }

  /** Wakes every waiter of every pool (events may have been missed, or the database left). */
  private wakeAll(): void {
    for (const [pool, set] of [...this.byPool]) {
      const woken = [...set];
      set.clear();
      this.cleanup(pool);
      for (const w of woken) w.wake();
    }
  }

  private wakeOne(pool: string): void {
    const set = this.byPool.get(pool);
    const first = set?.values().next();
    if (!set || !first || first.done) return;
    set.delete(first.value);
    this.cleanup(pool);
    first.value.wake();
  }

  private cleanup(pool: string): void {
    if (this.byPool.get(pool)?.size) return;
    this.byPool.delete(pool);
    this.unsubscribe.get(pool)?.();
    this.unsubscribe.delete(pool);
  }

  /** How many long-polls of `pool` are waiting now. */
  waiting(pool: string): number {
    return this.byPool.get(pool)?.size ?? 0;
  }

  /** Resolves true when woken for `pool`, false on timeout or abort. */
  wait(pool: string, timeoutMs: number, signal?: AbortSignal): { promise: Promise<boolean>; cancel: () => void } {
    let cancel = () => {};
    const promise = new Promise<boolean>((resolve) => {
      let set = this.byPool.get(pool);
      if (!set) {
        set = new Set();
        this.byPool.set(pool, set);
        this.unsubscribe.set(
          pool,
          this.events.subscribe("job-queued", pool, () => this.wakeOne(pool)),
        );
      }
      const done = (woken: boolean) => {
        cancel();
        resolve(woken);
      };
      const waiter: Waiter = { wake: () => done(true) };
      const timer = setTimeout(() => done(false), Math.max(0, timeoutMs));
      const onAbort = () => done(false);
      signal?.addEventListener("abort", onAbort, { once: true });
      const mine = set;
      cancel = () => {
        clearTimeout(timer);
        signal?.removeEventListener("abort", onAbort);
        if (mine.delete(waiter)) this.cleanup(pool);
      };
      mine.add(waiter);
      if (signal?.aborted) done(false);
    });
    return { promise, cancel };
  }
}

const registry = new WeakMap<EventBus, PoolWaiters>();

/** The waiter queues of one event bus (one per server process); the first call for a bus sets its `recheckMs`. */
export function poolWaiters(events: EventBus, recheckMs = 2_000): PoolWaiters {
  let w = registry.get(events);
  if (!w) {
    w = new PoolWaiters(events, recheckMs);
    registry.set(events, w);
  }
  return w;
}
