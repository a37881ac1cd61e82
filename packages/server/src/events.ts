import { EventEmitter } from "node:events";
import { randomUUID } from "node:crypto";
import pg from "pg";
import type { Logger } from "pino";
import { describeError } from "./db/health.js";
import { pgClientConfig, type GuardedPgPool, type PgConnectionSettings } from "./db/pg-pool.js";

/**
 * Wake-ups between the parts of the server, and between server processes sharing one
 * PostgreSQL (LISTEN/NOTIFY). An event carries no data beyond its key: receivers re-read the
 * database, so a lost or duplicated event costs at most a little latency, never correctness.
 */
export type Topic =
  | "job-queued"
  | "job-cancel"
  | "job-finished"
  | "log"
  | "run-changed"
  | "sessions-changed"
  | "vcs-task-done"
  | "vcs-delivery-processed";

export interface EventBus {
  /** Announces that something changed; delivered to local and (on PostgreSQL) remote listeners. */
  publish(topic: Topic, key: string): void;
  /** Calls `listener` on every event of topic+key until the returned function is called. */
  subscribe(topic: Topic, key: string, listener: () => void): () => void;
  /**
   * Calls `listener` with the key of every event of `topic` until the returned function is
   * called; a `wakeAll` reaches such a listener only through `onWakeAll`.
   */
  subscribeTopic(topic: Topic, listener: (key: string) => void): () => void;
  /**
   * Wakes every listener once, whatever it waits for: after events may have been missed (the
   * LISTEN connection was down) or when waiting is pointless (the database went away).
   */
  wakeAll(): void;
  /** Calls `listener` on every `wakeAll` until the returned function is called. */
  onWakeAll(listener: () => void): () => void;
  close(): Promise<void>;
}

const channel = "drover_events";
const wakeAllEvent = "wake-all";

class LocalBus implements EventBus {
  protected readonly emitter = new EventEmitter();
  constructor() {
    this.emitter.setMaxListeners(0);
  }
  publish(topic: Topic, key: string): void {
    this.deliver(topic, key);
  }
  /** Hands an event, local or from another process, to its listeners. */
  protected deliver(topic: string, key: string): void {
    this.emitter.emit(`${topic}:${key}`);
    // Topic listeners are keyed apart (a `*` cannot occur in a topic): wakeAll calls them with no key.
    this.emitter.emit(`*${topic}`, key);
  }
  subscribe(topic: Topic, key: string, listener: () => void): () => void {
    const name = `${topic}:${key}`;
    this.emitter.on(name, listener);
    return () => this.emitter.off(name, listener);
  }
  subscribeTopic(topic: Topic, listener: (key: string) => void): () => void {
    const name = `*${topic}`;
    // wakeAll emits without a key: for a topic listener that is every key at once, which it
    // learns from onWakeAll; here it is ignored.
    const onEvent = (key?: string) => {
      if (key !== undefined) listener(key);
    };
    this.emitter.on(name, onEvent);
    return () => this.emitter.off(name, onEvent);
  }
  wakeAll(): void {
    for (const name of this.emitter.eventNames()) this.emitter.emit(name);
  }
  onWakeAll(listener: () => void): () => void {
    this.emitter.on(wakeAllEvent, listener);
    return () => this.emitter.off(wakeAllEvent, listener);
  }
  async close(): Promise<void> {
    this.emitter.removeAllListeners();
  }
}

/** Backoff of the LISTEN connection's reconnects. */
const reconnectMinMs = 200;
const reconnectMaxMs = 5_000;

class PostgresBus extends LocalBus {
  private readonly origin = randomUUID();
  private listener: pg.Client | undefined;
  private closed = false;
  private retryTimer: NodeJS.Timeout | undefined;
  private retryDelayMs = reconnectMinMs;
  /** Set once the first connection is up: every later connection may have missed events. */
  private connectedBefore = false;

  constructor(
    private readonly pool: GuardedPgPool,
    private readonly settings: PgConnectionSettings,
    private readonly log: Logger,
  ) {
    super();
  }

  /** Connects and LISTENs; rejects when that fails (the caller decides whether to retry). */
  async start(): Promise<void> {
    const client = new pg.Client(pgClientConfig(this.settings));
    let lost = false;
    const onLost = (err?: Error) => {
      if (lost) return;
      lost = true;
      if (this.listener !== client) return;
      this.log.warn(
        { err: err ? describeError(err) : "connection ended" },
        "event listener connection lost; reconnecting",
      );
      this.listener = undefined;
      client.end().catch(() => undefined);
      this.pool.health.suspect(err ? describeError(err) : "the event listener connection ended");
      this.scheduleReconnect();
    };
    // Registered before connecting: an error at any point after this is handled, never thrown.
    client.on("error", onLost);
    client.on("end", () => onLost());
    client.on("notification", (msg) => {
      if (!msg.payload) return;
      const [origin, topic, key] = msg.payload.split("|");
      if (origin === this.origin || !topic || key === undefined) return;
      this.deliver(topic, key);
    });
    try {
      await client.connect();
      await client.query(`LISTEN ${channel}`);
    } catch (err) {
      lost = true;
      client.end().catch(() => undefined);
      throw err;
    }
    if (this.closed) {
      await client.end().catch(() => undefined);
      return;
    }
    this.listener = client;
    this.retryDelayMs = reconnectMinMs;
    if (this.connectedBefore) {
      this.log.info("event listener reconnected");
      // Notifications sent while we were not listening are gone: every waiter re-checks.
      this.wakeAll();
    }
    this.connectedBefore = true;
  }

  private scheduleReconnect(): void {
    if (this.closed || this.retryTimer) return;
    this.retryTimer = setTimeout(() => {
      this.retryTimer = undefined;
      this.start().catch((err: unknown) => {
        this.log.debug({ err: describeError(err) }, "event listener reconnect failed");
        this.retryDelayMs = Math.min(reconnectMaxMs, this.retryDelayMs * 2);
        this.scheduleReconnect();
      });
    }, this.retryDelayMs);
    this.retryTimer.unref();
  }

  override publish(topic: Topic, key: string): void {
    super.publish(topic, key);
    this.pool.query("SELECT pg_notify($1, $2)", [channel, `${this.origin}|${topic}|${key}`]).catch((err: unknown) => {
      // Remote waiters fall back to their periodic re-check; nothing is lost.
      this.log.warn({ err: describeError(err) }, "pg_notify failed");
    });
  }

  override async close(): Promise<void> {
    this.closed = true;
    clearTimeout(this.retryTimer);
    await super.close();
    const client = this.listener;
    this.listener = undefined;
    await client?.end().catch(() => undefined);
  }
}

/** An in-process bus (SQLite: one server process owns the database). */
export function localEventBus(): EventBus {
  return new LocalBus();
}

/**
 * A bus that also crosses server processes through PostgreSQL LISTEN/NOTIFY. NOTIFY goes
 * through `pool`; LISTEN holds its own connection, re-established with backoff when lost.
 */
export async function postgresEventBus(
  pool: GuardedPgPool,
  settings: PgConnectionSettings,
  log: Logger,
): Promise<EventBus> {
  const bus = new PostgresBus(pool, settings, log);
  await bus.start();
  return bus;
}

/**
 * Resolves true when topic+key fires, false after `timeoutMs` or when `signal` aborts.
 * Subscribe *before* checking the condition you wait for, so no wake-up slips between.
 */
export function waitForEvent(
  bus: EventBus,
  topic: Topic,
  key: string,
  timeoutMs: number,
  signal?: AbortSignal,
): { promise: Promise<boolean>; cancel: () => void } {
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
