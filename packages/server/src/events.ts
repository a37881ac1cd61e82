import { EventEmitter } from "node:events";
import { randomUUID } from "node:crypto";
import pg from "pg";
import type { Logger } from "pino";

/**
 * Wake-ups between the parts of the server, and between server processes sharing one
 * PostgreSQL (LISTEN/NOTIFY). An event carries no data beyond its key: receivers re-read the
 * database, so a lost or duplicated event costs at most a little latency, never correctness.
 */
export type Topic = "job-queued" | "job-cancel" | "job-finished" | "log" | "run-changed";

export interface EventBus {
  /** Announces that something changed; delivered to local and (on PostgreSQL) remote listeners. */
  publish(topic: Topic, key: string): void;
  /** Calls `listener` on every event of topic+key until the returned function is called. */
  subscribe(topic: Topic, key: string, listener: () => void): () => void;
  close(): Promise<void>;
}

const channel = "drover_events";

class LocalBus implements EventBus {
  protected readonly emitter = new EventEmitter();
  constructor() {
    this.emitter.setMaxListeners(0);
  }
  publish(topic: Topic, key: string): void {
    this.emitter.emit(`${topic}:${key}`);
  }
  subscribe(topic: Topic, key: string, listener: () => void): () => void {
    const name = `${topic}:${key}`;
    this.emitter.on(name, listener);
    return () => this.emitter.off(name, listener);
  }
  async close(): Promise<void> {
    this.emitter.removeAllListeners();
  }
}

class PostgresBus extends LocalBus {
  private readonly origin = randomUUID();
  private listener: pg.Client | undefined;
  private closed = false;

  constructor(
    private readonly pool: pg.Pool,
    private readonly connectionString: string,
    private readonly log: Logger,
  ) {
    super();
  }

  async start(): Promise<void> {
    const client = new pg.Client({ connectionString: this.connectionString });
    client.on("error", (err) => {
      this.log.warn({ err }, "event listener connection failed; reconnecting");
      this.reconnect();
    });
    client.on("notification", (msg) => {
      if (!msg.payload) return;
      const [origin, topic, key] = msg.payload.split("|");
      if (origin === this.origin || !topic || key === undefined) return;
      this.emitter.emit(`${topic}:${key}`);
    });
    await client.connect();
    await client.query(`LISTEN ${channel}`);
    this.listener = client;
  }

  private reconnect(): void {
    const old = this.listener;
    this.listener = undefined;
    old?.end().catch(() => undefined);
    if (this.closed) return;
    const retry = setTimeout(() => {
      this.start().catch((err: unknown) => {
        this.log.warn({ err }, "event listener reconnect failed");
        this.reconnect();
      });
    }, 500);
    retry.unref();
  }

  override publish(topic: Topic, key: string): void {
    super.publish(topic, key);
    this.pool.query("SELECT pg_notify($1, $2)", [channel, `${this.origin}|${topic}|${key}`]).catch((err: unknown) => {
      // Remote waiters fall back to their periodic re-check; nothing is lost.
      this.log.warn({ err }, "pg_notify failed");
    });
  }

  override async close(): Promise<void> {
    this.closed = true;
    await super.close();
    await this.listener?.end().catch(() => undefined);
    await this.pool.end().catch(() => undefined);
  }
}

/** An in-process bus (SQLite: one server process owns the database). */
export function localEventBus(): EventBus {
  return new LocalBus();
}

/** A bus that also crosses server processes through PostgreSQL LISTEN/NOTIFY. */
export async function postgresEventBus(connectionString: string, log: Logger): Promise<EventBus> {
  const bus = new PostgresBus(new pg.Pool({ connectionString, max: 2 }), connectionString, log);
  await bus.start();
  return bus;
}

/**
 * Resolves true when topic+key fires, false after `timeoutMs` or when `signal` aborts.
 * Subscribe *before* checking the condition you wait for, so no wake-up slips between.
 */
export function waitForEvent(bus: EventBus, topic: Topic, key: string, timeoutMs: number, signal?: AbortSignal): { promise: Promise<boolean>; cancel: () => void } {
  let cancel = () => {};
  const promise = new Promise<boolean>((resolve) => {
    const done = (fired: boolean) => {
      cancel();
      resolve(fired);
    };
    const unsubscribe = bus.subscribe(topic, key, () => done(true));
    const timer = setTimeout(() => done(false), Math.max(0, timeoutMs));
    const onAbort = () => done(false);
    signal?.addEventListener("abort", onAbort, { once: true });
    cancel = () => {
      unsubscribe();
      clearTimeout(timer);
      signal?.removeEventListener("abort", onAbort);
    };
    if (signal?.aborted) done(false);
  });
  return { promise, cancel };
}
