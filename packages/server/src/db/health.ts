import { DroverError } from "@drover/protocol";

/*
 * Whether this process can reach its database. A PostgreSQL restart, failover, a terminated
 * backend or a stopped cluster shows up as one of a handful of connection errors; while they
 * last, every caller gets `database_unavailable` at once instead of waiting on a dead socket,
 * and a probe finds the moment the database is back. Query errors of any other kind (a
 * constraint, a bad statement) say nothing about availability and pass through untouched.
 */

/** `available`: queries go through; `unavailable`: callers fail fast until a probe succeeds. */
export type DatabaseState = "available" | "unavailable";

/** How long clients are told to wait before retrying, in the Retry-After header. */
export const retryAfterSeconds = 2;

// Class 08 (connection exception), 57P01–57P03 (admin/crash shutdown, cannot connect now),
// 53300 (too many connections) and 3D000 never (a missing database is configuration, not an outage).
const unavailableSqlStates = new Set(["57P01", "57P02", "57P03", "53300"]);
const unavailableErrnos = new Set([
  "ECONNREFUSED",
  "ECONNRESET",
  "EPIPE",
  "ETIMEDOUT",
  "EHOSTUNREACH",
  "ENETUNREACH",
  "ENOTFOUND",
  "EAI_AGAIN",
]);
const unavailableMessages = [
  /Connection terminated/i,
  /connection timeout/i,
  /timeout exceeded when trying to connect/i,
  /Query read timeout/i,
  /Client has encountered a connection error/i,
  /Client was closed and is not queryable/i,
  /the database system is (starting up|shutting down|in recovery mode)/i,
  /terminating connection/i,
  /server closed the connection unexpectedly/i,
];

/** True when `err` means "the database cannot be reached", not "this query is wrong". */
export function isConnectionError(err: unknown): boolean {
  if (err instanceof DatabaseUnavailableError) return true;
  if (!(err instanceof Error)) return false;
  const code = (err as { code?: unknown }).code;
  if (
    typeof code === "string" &&
    (code.startsWith("08") || unavailableSqlStates.has(code) || unavailableErrnos.has(code))
  )
    return true;
  if (err instanceof AggregateError && err.errors.some(isConnectionError)) return true;
  return unavailableMessages.some((re) => re.test(err.message));
}

/** The coded error every caller sees while the database is away. */
export class DatabaseUnavailableError extends DroverError {
  constructor(reason: string, cause?: unknown) {
    super(
      "database_unavailable",
      `the database is unavailable (${reason}); retry shortly — the server reconnects on its own`,
      {
        cause,
        details: { retryAfterSeconds },
      },
    );
  }
}

/** One line describing a connection error, for logs and error messages. */
export function describeError(err: unknown): string {
  if (!(err instanceof Error)) return String(err);
  const code = (err as { code?: unknown }).code;
  const message =
    err.message || (err instanceof AggregateError ? err.errors.map((e) => describeError(e)).join("; ") : err.name);
  return typeof code === "string" && !message.includes(code) ? `${code}: ${message}` : message;
}

/**
 * The database's availability as this process sees it. `probe` is how the tracker checks
 * for the database's return; it runs with backoff only while the state is `unavailable`.
 */
export class DatabaseHealth {
  private current: DatabaseState = "available";
  private reason = "";
  private changedAt: number;
  private probing: NodeJS.Timeout | undefined;
  private probeDelayMs: number;
  private closed = false;
  private verifying = false;
  private lastOkAt: number | undefined;
  private readonly stallListeners = new Set<(gapMs: number) => void>();
  private readonly listeners = new Set<(state: DatabaseState) => void>();

  constructor(
    private readonly probe: () => Promise<void>,
    private readonly options: {
      now?: () => number;
      minProbeMs?: number;
      maxProbeMs?: number;
      /** A gap between successful round trips longer than this counts as a stall (see noteSuccess). */
      stallMs?: number;
    } = {},
  ) {
    this.changedAt = this.now();
    this.probeDelayMs = this.options.minProbeMs ?? 200;
  }

  private now(): number {
    return (this.options.now ?? Date.now)();
  }

  /** The current state. */
  get state(): DatabaseState {
    return this.current;
  }

  /** When the current state began (epoch ms): the start of an outage, or of the recovery. */
  get since(): number {
    return this.changedAt;
  }

  /** What made the database unavailable; empty while it is available. */
  get lastError(): string {
    return this.reason;
  }

  /** Calls `listener` on every change of state until the returned function is called. */
  onChange(listener: (state: DatabaseState) => void): () => void {
    this.listeners.add(listener);
    return () => this.listeners.delete(listener);
  }

  /** Throws `database_unavailable` while the database is away. */
  assertAvailable(): void {
    if (this.current === "unavailable") throw new DatabaseUnavailableError(this.reason);
  }

  /**
   * Records a failed call: a connection error is returned as a DatabaseUnavailableError (that
   * call is lost either way) and makes the tracker check the database; any other error is
   * returned unchanged.
   */
  failure(err: unknown): unknown {
    if (err instanceof DatabaseUnavailableError) return err;
    if (!isConnectionError(err)) return err;
    const reason = describeError(err);
    this.suspect(reason);
    return new DatabaseUnavailableError(reason, err);
  }

  /**
   * One connection failed: probes the database at once and turns unavailable only if the probe
   * fails too. A single terminated backend or a pooler closing an idle connection is not an
   * outage; a stopped or restarting database fails the probe.
   */
  suspect(reason: string): void {
    if (this.closed || this.current === "unavailable" || this.verifying) return;
    this.verifying = true;
    this.probe().then(
      () => (this.verifying = false),
      (err: unknown) => {
        this.verifying = false;
        this.markUnavailable(`${reason}; then ${describeError(err)}`);
      },
    );
  }

  /**
   * Records a successful round trip. When the one before it was longer ago than `stallMs`, the
   * database (or this process) stalled: a paused VM or a frozen disk answers again before any
   * deadline fires, an outage this process never saw as one, while agents' heartbeats through
   * other servers may have failed. The lease grace then starts over, as after an outage.
   */
  noteSuccess(): void {
    const now = this.now();
    const stallMs = this.options.stallMs;
    if (
      stallMs !== undefined &&
      this.lastOkAt !== undefined &&
      now - this.lastOkAt > stallMs &&
      this.current === "available"
    ) {
      this.changedAt = now;
      for (const l of this.stallListeners) l(now - this.lastOkAt);
    }
    this.lastOkAt = now;
  }

  /** Calls `listener` with the gap's length whenever `noteSuccess` detects a stall. */
  onStall(listener: (gapMs: number) => void): void {
    this.stallListeners.add(listener);
  }

  /** Turns the state unavailable (idempotent) and starts probing for the database's return. */
  markUnavailable(reason: string): void {
    if (this.closed) return;
    if (this.current === "unavailable") return;
    this.current = "unavailable";
    this.reason = reason;
    this.changedAt = this.now();
    this.probeDelayMs = this.options.minProbeMs ?? 200;
    this.emit();
    this.scheduleProbe();
  }

  private scheduleProbe(): void {
    if (this.closed || this.probing) return;
    this.probing = setTimeout(() => {
      this.probe().then(
        () => {
          this.probing = undefined;
          this.markAvailable();
        },
        (err: unknown) => {
          this.probing = undefined;
          if (this.current !== "unavailable") return;
          this.reason = describeError(err);
          this.probeDelayMs = Math.min(this.options.maxProbeMs ?? 2_000, this.probeDelayMs * 2);
          this.scheduleProbe();
        },
      );
    }, this.probeDelayMs);
    this.probing.unref();
  }

  private markAvailable(): void {
    if (this.closed || this.current === "available") return;
    this.lastOkAt = this.now();
    this.current = "available";
    this.reason = "";
    this.changedAt = this.now();
    this.emit();
  }

  private emit(): void {
    for (const l of this.listeners) {
      try {
        l(this.current);
      } catch {
        // A listener's failure must not stop the others from hearing the change.
      }
    }
  }

  /** Stops probing; the state no longer changes. */
  close(): void {
    this.closed = true;
    clearTimeout(this.probing);
    this.probing = undefined;
    this.listeners.clear();
    this.stallListeners.clear();
  }
}
