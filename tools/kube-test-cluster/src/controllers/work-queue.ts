/**
 * A per-key serialised work queue: a key is never reconciled twice at once, adds
 * during a run schedule one more run, and delayed adds use unref'd timers.
 */
export class WorkQueue {
  private readonly queued = new Set<string>();
  private readonly running = new Set<string>();
  private readonly dirty = new Set<string>();
  private readonly timers = new Map<string, NodeJS.Timeout>();
  private readonly inFlight = new Set<Promise<void>>();
  private closed = false;

  constructor(
    private readonly reconcile: (key: string) => Promise<void> | void,
    private readonly onError: (key: string, error: unknown) => void,
  ) {}

  add(key: string): void {
    if (this.closed) return;
    if (this.running.has(key)) {
      this.dirty.add(key);
      return;
    }
    if (this.queued.has(key)) return;
    this.queued.add(key);
    setImmediate(() => this.run(key));
  }

  /** Adds `key` after `ms`; an earlier pending delayed add for the key wins. */
  addAfter(key: string, ms: number): void {
    if (this.closed) return;
    const existing = this.timers.get(key);
    if (existing) return;
    const timer = setTimeout(
      () => {
        this.timers.delete(key);
        this.add(key);
      },
      Math.max(0, ms),
    );
    timer.unref();
    this.timers.set(key, timer);
  }

  private run(key: string): void {
    this.queued.delete(key);
    if (this.closed) return;
    this.running.add(key);
    const p = (async () => {
      try {
        await this.reconcile(key);
      } catch (e) {
        this.onError(key, e);
      } finally {
        this.running.delete(key);
        if (this.dirty.delete(key)) this.add(key);
      }
    })();
    this.inFlight.add(p);
    void p.finally(() => this.inFlight.delete(p));
  }

  async close(): Promise<void> {
    this.closed = true;
    for (const t of this.timers.values()) clearTimeout(t);
    this.timers.clear();
    await Promise.allSettled([...this.inFlight]);
  }
}
