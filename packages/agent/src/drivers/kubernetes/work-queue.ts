/** How a keyed work queue runs, retries and waits. */
export interface WorkQueueOptions {
  /** Keys processed at the same time (each key is always processed one item at a time). */
  parallelism: number;
  /** Attempts of one item before it is given up (1 = no retry). */
  maxAttempts: number;
  /** Delay before attempt `attempt + 1` (attempt counts from 1). */
  backoffMs: (attempt: number) => number;
  /** Waits `ms`; injectable so tests control time. Resolves early when `signal` aborts. */
  sleep: (ms: number, signal: AbortSignal) => Promise<void>;
  /** An item failed and will be retried after `retryInMs`, or (retryInMs undefined) was given up. */
  onError: (key: string, err: unknown, attempt: number, retryInMs: number | undefined) => void;
  /** Aborting stops the queue: queued items are dropped (but those added with `keepOnStop`), running ones finish. */
  signal: AbortSignal;
}

interface Item {
  work: () => Promise<void>;
  done: () => void;
  /** Still run, and retried, after the queue stops. */
  keep: boolean;
}

/** Never aborted: the backoff of items kept past a stop. */
const neverAborted = new AbortController().signal;

/** Exponential backoff: `baseMs` doubling per attempt, capped at `maxMs`. */
export function exponentialBackoff(baseMs: number, maxMs: number): (attempt: number) => number {
  return (attempt) => Math.min(maxMs, baseMs * 2 ** Math.max(0, attempt - 1));
}

/**
 * A serialised per-key work queue: items of one key (one Kubernetes Job) run strictly one after
 * another in the order they were added, so two events for the same Job never interleave; items
 * of different keys run in parallel up to `parallelism`. A failing item is retried with backoff
 * up to `maxAttempts` while it holds its key (later events for that key wait behind it, as they
 * must see its effect) and other keys go on. After the last attempt it is reported and dropped.
 */
export class KeyedWorkQueue {
  private readonly pending = new Map<string, Item[]>();
  /** Keys with items waiting for a free slot, in arrival order. */
  private readonly ready: string[] = [];
  private readonly active = new Set<string>();

  constructor(private readonly o: WorkQueueOptions) {
    o.signal.addEventListener(
      "abort",
      () => {
        for (const [key, items] of [...this.pending]) {
          const kept = items.filter((item) => item.keep);
          for (const item of items) if (!item.keep) item.done();
          if (kept.length > 0) this.pending.set(key, kept);
          else this.pending.delete(key);
        }
        // Keys waiting for a slot keep their place only for the items kept.
        const waiting = this.ready.filter((key) => this.pending.has(key));
        this.ready.length = 0;
        this.ready.push(...waiting);
      },
      { once: true },
    );
  }

  /**
   * Adds `work` for `key`; resolves once it ran (successfully, or for the last time), or was
   * dropped on stop. With `keepOnStop` it is never dropped: it waits for a slot, runs and is
   * retried after the stop too (work that must not be lost, such as a claimed job's launch).
   */
  add(key: string, work: () => Promise<void>, o: { keepOnStop?: boolean } = {}): Promise<void> {
    const keep = o.keepOnStop === true;
    if (this.o.signal.aborted && !keep) return Promise.resolve();
    return new Promise<void>((done) => {
      const items = this.pending.get(key);
      if (items) items.push({ work, done, keep });
      else {
        this.pending.set(key, [{ work, done, keep }]);
        if (!this.active.has(key)) this.ready.push(key);
      }
      this.pump();
    });
  }

  /** Keys being processed now. */
  get activeKeys(): number {
    return this.active.size;
  }

  private pump(): void {
    while (this.active.size < this.o.parallelism && this.ready.length > 0) {
      const key = this.ready.shift()!;
      this.active.add(key);
      void this.drain(key);
    }
  }

  /** Runs `key`'s items one by one until none is left, then frees its slot. */
  private async drain(key: string): Promise<void> {
    for (;;) {
      const items = this.pending.get(key);
      const item = items?.shift();
      if (!item) break;
      if (items!.length === 0) this.pending.delete(key);
      await this.attempt(key, item);
    }
    this.active.delete(key);
    // Items added for this key while its last one ran are picked up here.
    // After a stop only kept items are pending.
    if (this.pending.has(key)) this.ready.push(key);
    this.pump();
  }

  private async attempt(key: string, item: Item): Promise<void> {
    for (let attempt = 1; ; attempt++) {
      try {
        await item.work();
        break;
      } catch (err) {
        const stopped = this.o.signal.aborted && !item.keep;
        if (stopped || attempt >= this.o.maxAttempts) {
          this.o.onError(key, err, attempt, undefined);
          break;
        }
        const wait = this.o.backoffMs(attempt);
        this.o.onError(key, err, attempt, wait);
        await this.o.sleep(wait, item.keep ? neverAborted : this.o.signal);
        if (this.o.signal.aborted && !item.keep) break;
      }
    }
    item.done();
  }
}
