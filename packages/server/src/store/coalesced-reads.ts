/*
 * Reads by key, coalesced. Thousands of agents each asking the same small question (is my
 * session valid, is anything queued in my pool) cost the database one statement per request;
 * here the requests share statements. A key asked for joins the next read that has not been
 * issued yet, never one already in flight, so every answer is read from the database after its
 * request asked: a revocation, or a job queued before the request, is seen exactly as it was
 * with a statement of its own. While `maxInFlight` reads are out, new keys gather for the
 * next: under load the batches grow instead of the statements queuing for the pool.
 */

interface Pending<V> {
  resolve: (value: V | undefined) => void;
  reject: (err: unknown) => void;
}

export class CoalescedReads<K, V> {
  private waiting = new Map<K, Array<Pending<V>>>();
  private scheduled = false;
  private inFlight = 0;

  /**
   * `read` answers a batch of at most `maxKeys` keys (a key missing from its map answers
   * undefined); at most `maxInFlight` batches are read at once.
   */
  constructor(
    private readonly read: (keys: K[]) => Promise<Map<K, V>>,
    private readonly maxKeys: number,
    private readonly maxInFlight = 2,
  ) {}

  /** The value of `key`, read by a statement issued after this call. */
  get(key: K): Promise<V | undefined> {
    return new Promise((resolve, reject) => {
      const list = this.waiting.get(key);
      if (list) list.push({ resolve, reject });
      else this.waiting.set(key, [{ resolve, reject }]);
      this.schedule();
    });
  }

  private schedule(): void {
    if (this.scheduled || this.waiting.size === 0 || this.inFlight >= this.maxInFlight) return;
    this.scheduled = true;
    // The next turn: the requests read from the sockets in this one share the statement.
    setImmediate(() => {
      this.scheduled = false;
      this.flush();
    });
  }

  private flush(): void {
    while (this.waiting.size > 0 && this.inFlight < this.maxInFlight) {
      const batch = new Map<K, Array<Pending<V>>>();
      for (const [key, list] of this.waiting) {
        if (batch.size >= this.maxKeys) break;
        batch.set(key, list);
      }
      for (const key of batch.keys()) this.waiting.delete(key);
      this.inFlight++;
      void this.answer(batch);
    }
  }

  /** Reads one batch and answers its callers; every caller is answered, whatever fails. */
  private async answer(batch: Map<K, Array<Pending<V>>>): Promise<void> {
    try {
      const values = await this.read([...batch.keys()]);
      // Looked up before anyone is answered: a result that cannot be read fails the whole batch.
      const answers = [...batch].map(([key, list]) => ({ list, value: values.get(key) }));
      for (const { list, value } of answers) for (const p of list) p.resolve(value);
    } catch (err) {
      for (const list of batch.values()) for (const p of list) p.reject(err);
    } finally {
      this.inFlight--;
      this.schedule();
    }
  }
}
