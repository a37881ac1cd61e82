import { DroverError, messageOf, type JobAssignment, type RegisterResponse } from "@drover/protocol";
import type { Logger } from "pino";
import { Backoff, pause, waitFor, type Sleep } from "./backoff.js";
import { NetworkError, type AgentClient } from "./client.js";
import { agentVersion } from "./version.js";

/** The pool token was revoked or refused: the session cannot go on, and neither can its process. */
export class FatalAgentError extends Error {
  override readonly name = "FatalAgentError";
}

/** The server refused the pool token (unknown, wrong or revoked): the operator must give another. */
export class TokenRefusedError extends FatalAgentError {}

/** Which session call failed, for the caller's error counters. */
export type SessionErrorKind = "register" | "poll" | "heartbeat" | "session_lost";

/** What the process holding the session says before each poll. */
export type Room = "free" | "full" | "finished";

export interface PoolSessionOptions<W = JobAssignment> {
  client: AgentClient;
  poolToken: string;
  /** Where the token came from (`DROVER_TOKEN_FILE /etc/drover/pool-token`), named when the server refuses it. */
  tokenSource?: string | undefined;
  name: string;
  driver: "local" | "docker" | "kubernetes";
  capacity: number;
  /** The server-side wait of each long-poll. */
  pollWaitMs: number;
  log: Logger;
  /** The log line of a registration; operators' tooling matches it ("registered", "controller registered"). */
  registeredLog: string;
  /** Overrides the heartbeat interval the server hands out at registration. */
  heartbeatMs?: number | undefined;
  /** Whether to take a job now: `full` waits for `roomFreed()`, `finished` ends the poll loop. */
  room: () => Room;
  /** Called after every poll the server answered, with a job or without. */
  onPolled?: () => void;
  /** Called with every job (or VCS task) the server hands out. */
  onJob: (job: W) => void;
  /** How the session long-polls for work; by default the run agents' job poll. */
  take?: (session: string, waitMs: number, signal: AbortSignal) => Promise<W | null>;
  /** What each heartbeat reports: jobs running here, and kept plan directories. */
  load: () => { runningJobs: number; keptPlanRuns?: string[] };
  /** The kept plan runs the server says will not be applied here. */
  onDropPlanRuns?: (runIds: string[]) => void;
  onRegistered?: (reg: RegisterResponse) => void | Promise<void>;
  onError?: (kind: SessionErrorKind) => void;
  /** The round trip of each successful heartbeat, in seconds. */
  onHeartbeat?: (seconds: number) => void;
  /** Every wait of the session goes through it; tests hand in their own clock. */
  sleep?: Sleep;
  /** The registration backoff; the default doubles from 0.5 s to 30 s. */
  registerBackoff?: { initialMs: number; maxMs: number };
  /** The wait after a failed poll or heartbeat (a longer Retry-After wins); 1 s by default. */
  retryMs?: number;
  /** How long a full process waits before it looks at its room again without being told. */
  roomRecheckMs?: number;
}

/**
 * One agent process's registration with its pool: register (retried with backoff and the
 * server's Retry-After), heartbeat, the long-poll loop, stop. Every failure has one meaning,
 * wherever it comes from: `agent_lost` registers again; a revoked or refused pool token ends the
 * session with a FatalAgentError; anything else (no answer, a 5xx, an unexpected answer) is
 * retried after a wait, because a process that holds running jobs must not end over an error it
 * can outlive. The local and docker agent and the Kubernetes controller all hold one.
 */
export class PoolSession<W = JobAssignment> {
  private readonly halt = new AbortController();
  private readonly sleep: Sleep;
  private token: string | undefined;
  private interval = 10_000;
  private fatal: FatalAgentError | undefined;
  private reregistering: Promise<void> | undefined;
  private roomWaiter: (() => void) | undefined;
  private beats: Promise<void> | undefined;

  constructor(private readonly o: PoolSessionOptions<W>) {
    this.sleep = o.sleep ?? pause;
  }

  /** Aborted when the session stops, or ends on a fatal error. */
  get signal(): AbortSignal {
    return this.halt.signal;
  }

  get registered(): boolean {
    return this.token !== undefined && this.reregistering === undefined && !this.halt.signal.aborted;
  }

  /** The session token of the current registration (calls of a VCS agent's tasks carry it). */
  get sessionToken(): string | undefined {
    return this.token;
  }

  /** The heartbeat interval in force (the server's, unless overridden). */
  get heartbeatMs(): number {
    return this.interval;
  }

  /** Why the session ended on its own, if it did. */
  get fatalError(): FatalAgentError | undefined {
    return this.fatal;
  }

  /**
   * Registers, retrying until the server answers or the session stops; then heartbeats run until
   * `stop()`. Resolves true once registered, false when stopped first; a refused token or another
   * coded answer (nothing is running yet, and retrying will not change it) rejects.
   */
  async start(): Promise<boolean> {
    await this.register();
    if (this.halt.signal.aborted) return false;
    this.beats = this.heartbeatLoop();
    return true;
  }

  /**
   * Polls for jobs until the session stops, its process has finished taking work, or its pool
   * token is refused (then rejects with the FatalAgentError).
   */
  async poll(): Promise<void> {
    const retry = this.o.retryMs ?? 1_000;
    while (!this.halt.signal.aborted) {
      const room = this.o.room();
      if (room === "finished") return;
      if (room === "full") {
        await this.waitForRoom();
        continue;
      }
      let job: W | null;
      try {
        await this.reregistering;
        if (this.halt.signal.aborted) break;
        job = await this.take(this.token!);
      } catch (err) {
        if (this.halt.signal.aborted) break;
        if (await this.failed(err, "poll")) await this.sleep(waitFor(err, retry), this.halt.signal);
        continue;
      }
      this.o.onPolled?.();
      if (job) this.o.onJob(job);
    }
    if (this.fatal) throw this.fatal;
  }

  private take(session: string): Promise<W | null> {
    if (this.o.take) return this.o.take(session, this.o.pollWaitMs, this.halt.signal);
    // Without `take`, W is the default: the session of a run agent, polling for jobs.
    return this.o.client.poll(session, this.o.pollWaitMs, this.halt.signal) as Promise<unknown> as Promise<W | null>;
  }

  /** Wakes a poll loop waiting for room. */
  roomFreed(): void {
    this.roomWaiter?.();
  }

  /** Ends polling and heartbeats at once; resolves when the heartbeat loop has ended. */
  async stop(): Promise<void> {
    this.halt.abort();
    this.roomWaiter?.();
    await this.beats;
  }

  /** Tells the server this process is leaving (after `stop()`, once its jobs have wound down). */
  async deregister(signal: AbortSignal): Promise<void> {
    if (this.token) await this.o.client.deregister(this.token, signal);
  }

  private async register(): Promise<void> {
    const backoff = new Backoff(this.o.registerBackoff ?? { initialMs: 500, maxMs: 30_000 });
    while (!this.halt.signal.aborted) {
      try {
        const reg = await this.o.client.register(
          this.o.poolToken,
          {
            name: this.o.name,
            version: agentVersion,
            driver: this.o.driver,
            capacity: this.o.capacity,
          },
          this.halt.signal,
        );
        this.token = reg.sessionToken;
        this.interval = this.o.heartbeatMs ?? reg.heartbeatIntervalMs;
        this.o.log.info({ agent: reg.agentId, pool: reg.poolName, url: this.o.client.baseUrl }, this.o.registeredLog);
        await this.o.onRegistered?.(reg);
        return;
      } catch (err) {
        if (this.halt.signal.aborted) return;
        const refused = refusal(err, this.o.tokenSource);
        if (refused) throw refused;
        if (!(err instanceof NetworkError)) throw err;
        this.o.onError?.("register");
        const wait = backoff.next(err);
        this.o.log.warn(
          { err: messageOf(err), retryInMs: wait },
          "registering with the Drover server failed; retrying",
        );
        await this.sleep(wait, this.halt.signal);
      }
    }
  }

  /**
   * What a failed poll or heartbeat means. Resolves true when the caller should wait before its
   * next call (a retried failure), false when it may go on at once (registered again, or ended).
   */
  private async failed(err: unknown, kind: "poll" | "heartbeat"): Promise<boolean> {
    const refused = refusal(err, this.o.tokenSource);
    if (refused) {
      if (!this.fatal) {
        this.fatal = refused;
        this.o.log.error(refused.message);
      }
      this.halt.abort();
      this.roomWaiter?.();
      return false;
    }
    if (err instanceof DroverError && err.code === "agent_lost") {
      this.o.onError?.("session_lost");
      // The poll and the heartbeat may both learn it: one registration serves both.
      this.reregistering ??= this.reregister(err).finally(() => (this.reregistering = undefined));
      await this.reregistering;
      return false;
    }
    this.o.onError?.(kind);
    const level = err instanceof NetworkError ? "warn" : "error";
    this.o.log[level]({ err: messageOf(err) }, `${kind} failed; retrying`);
    return true;
  }

  private async reregister(err: DroverError): Promise<void> {
    this.o.log.warn({ err: err.message }, "the server no longer knows this agent; registering again");
    try {
      await this.register();
    } catch (e) {
      this.fatal = e instanceof FatalAgentError ? e : new FatalAgentError(`registering again failed: ${messageOf(e)}`);
      this.o.log.error(this.fatal.message);
      this.halt.abort();
      this.roomWaiter?.();
    }
  }

  private async heartbeatLoop(): Promise<void> {
    let wait = this.interval;
    while (!this.halt.signal.aborted) {
      await this.sleep(wait, this.halt.signal);
      wait = this.interval;
      if (this.halt.signal.aborted) return;
      await this.reregistering;
      try {
        const { runningJobs, keptPlanRuns } = this.o.load();
        // process.hrtime, not `performance`: the global's first use loads Node's perf_hooks.
        const sent = process.hrtime.bigint();
        const drop = await this.o.client.heartbeat(this.token!, runningJobs, this.halt.signal, keptPlanRuns);
        this.o.onHeartbeat?.(Number(process.hrtime.bigint() - sent) / 1e9);
        if (drop.length > 0) this.o.onDropPlanRuns?.(drop);
      } catch (err) {
        if (this.halt.signal.aborted) return;
        // The next beat at the usual interval, or later when the server asked for it.
        if (await this.failed(err, "heartbeat")) wait = waitFor(err, this.interval);
      }
    }
  }

  private waitForRoom(): Promise<void> {
    return new Promise<void>((resolve) => {
      const done = () => {
        clearTimeout(timer);
        this.roomWaiter = undefined;
        resolve();
      };
      // A recheck without being told: a process may free room on a path that does not say so.
      const timer = setTimeout(done, this.o.roomRecheckMs ?? 1_000);
      this.roomWaiter = done;
    });
  }
}

/** The error of a refused or revoked pool token (naming where it came from), or undefined for any other failure. */
function refusal(err: unknown, source: string | undefined): TokenRefusedError | undefined {
  if (!(err instanceof DroverError)) return undefined;
  const from = source === undefined ? "" : ` from ${source}`;
  if (err.code === "token_revoked")
    return new TokenRefusedError(`the pool token${from} was revoked; stopping (${err.message})`);
  if (err.code === "unauthorized")
    return new TokenRefusedError(`the server refused the pool token${from}; stopping (${err.message})`);
  // A token of the other kind of pool (a vcs pool's for a run agent, or the reverse).
  if (err.code === "forbidden")
    return new TokenRefusedError(`the pool token${from} is for another kind of pool; stopping (${err.message})`);
  return undefined;
}
