import {
  DroverError,
  messageOf,
  routes,
  type ErrorCode,
  type JobAssignment,
  type JobHeartbeatResponse,
  type JobOutcome,
  type JobVariable,
  type Output,
  type PlanSummary,
  type RegisterResponse,
  type ResultOf,
  type Route,
  type RunStatus,
} from "@drover/protocol";
import { ApiError, decodeErrorAnswer, DroverClient, type RequestOf } from "@drover/runtime";
import type { Dispatcher } from "undici";
import { Backoff, maxRetryAfterMs, pause } from "./backoff.js";
import { proxyDispatcher } from "../net/http-dispatcher.js";

/** Deadlines of the agent's HTTP calls. */
export interface ClientTimeouts {
  /** Whole-call deadline of an ordinary request (not a long-poll), in ms. */
  requestMs: number;
  /** Added to a long-poll's server-side wait to make its deadline, in ms. */
  longPollSlackMs: number;
  /** TCP/TLS connect deadline, in ms. */
  connectMs: number;
  /**
   * The slowest link a job's upload is given time for, in bytes/s: each try of an n-byte body
   * may take requestMs + n / this. A job's downloads instead fail after requestMs without a byte.
   */
  transferBytesPerSecond: number;
  /** How long a job's upload or download is tried again before its stage fails, in ms. */
  transferRetryMs: number;
}

export const defaultClientTimeouts: ClientTimeouts = {
  requestMs: 60_000,
  longPollSlackMs: 15_000,
  connectMs: 10_000,
  // 2 Mbit/s, a poor uplink's rate: a 200 MB plan still gets 14 min a try on it.
  transferBytesPerSecond: 256 * 1024,
  // Well past a server's restart or failover; a server failing longer than that is not coming back soon.
  transferRetryMs: 10 * 60_000,
};

/**
 * The agent's HTTP client for the agent protocol, on the protocol's typed client: every call
 * takes an AbortSignal and has a deadline, every answer is checked against the route table.
 * What is worth retrying — no answer, a 5xx, a 429 — becomes a NetworkError; every other
 * coded error passes through as the DroverError it is.
 * HTTP(S)_PROXY / NO_PROXY are honoured; DROVER_CA_CERT is added to the default roots.
 */
export class AgentClient {
  readonly dispatcher: Dispatcher;
  readonly timeouts: ClientTimeouts;
  readonly http: DroverClient;

  constructor(
    readonly baseUrl: string,
    caCertPem?: string,
    timeouts: Partial<ClientTimeouts> = {},
  ) {
    this.timeouts = { ...defaultClientTimeouts, ...timeouts };
    // undici's own timeouts catch a server that stops answering mid-response; the per-call
    // deadline bounds the whole call (a long-poll legitimately waits for headers).
    const longest = this.timeouts.requestMs + this.timeouts.longPollSlackMs + 50_000;
    this.dispatcher = proxyDispatcher({
      caCertPem,
      connectMs: this.timeouts.connectMs,
      headersTimeoutMs: longest,
      bodyTimeoutMs: this.timeouts.requestMs,
    });
    this.http = new DroverClient({ baseUrl, dispatcher: this.dispatcher, timeoutMs: this.timeouts.requestMs });
  }

  /** Calls a route; retriable failures become NetworkErrors. */
  async call<R extends Route>(route: R, request: RequestOf<R>): Promise<ResultOf<R>> {
    try {
      return await this.http.call(route, request);
    } catch (err) {
      throw retriable(err);
    }
  }

  register(
    poolToken: string,
    body: {
      name: string;
      version: string;
      driver: "local" | "kubernetes" | "docker";
      capacity: number;
    },
    signal?: AbortSignal,
  ): Promise<RegisterResponse> {
    return this.call(routes.register, { token: poolToken, body, signal });
  }

  async poll(session: string, waitMs: number, signal?: AbortSignal): Promise<JobAssignment | null> {
    return (
      await this.call(routes.pollJob, {
        token: session,
        query: { wait: waitMs },
        signal,
        timeoutMs: waitMs + this.timeouts.longPollSlackMs,
      })
    ).job;
  }

  /** Returns the kept plan runs the server says will not be applied here. */
  async heartbeat(
    session: string,
    runningJobs: number,
    signal?: AbortSignal,
    keptPlanRuns: string[] = [],
  ): Promise<string[]> {
    const body = keptPlanRuns.length > 0 ? { runningJobs, keptPlanRuns } : { runningJobs };
    return (await this.call(routes.agentHeartbeat, { token: session, body, signal })).dropPlanRuns;
  }

  async deregister(session: string, signal?: AbortSignal): Promise<void> {
    await this.call(routes.deregister, { token: session, signal });
  }

  /** Calls made with one job's token. */
  job(jobId: string, token: string): JobClient {
    return new JobClient(this, jobId, token);
  }

  /** One try's deadline for sending `body` to the server: the ordinary one, plus its time at the slowest rate allowed. */
  sendingMs(body: Buffer): number {
    return this.timeouts.requestMs + Math.ceil((body.length * 1000) / this.timeouts.transferBytesPerSecond);
  }
}

/**
 * The job-token calls of one job. Its transfers (the configuration, the plan, the state, the
 * plan's JSON and the providers' schemas) retry themselves within the transfer budget; the
 * other calls are retried by their caller.
 */
export class JobClient {
  constructor(
    private readonly client: AgentClient,
    readonly jobId: string,
    readonly token: string,
  ) {}

  private get ids() {
    return { params: { id: this.jobId }, token: this.token };
  }

  /** Starts the job as `starter` (this process's id for it; a retry must pass the same one). */
  async start(starter: string, signal?: AbortSignal): Promise<RunStatus> {
    return (await this.client.call(routes.startJob, { ...this.ids, body: { starter }, signal })).runStatus;
  }
  /** Renews the lease; the server holds it up to `waitMs`. `timeoutMs`: the call's deadline (default: wait + slack). */
  heartbeat(waitMs: number, signal?: AbortSignal, timeoutMs?: number): Promise<JobHeartbeatResponse> {
    return this.client.call(routes.jobHeartbeat, {
      ...this.ids,
      query: { wait: waitMs },
      signal,
      timeoutMs: timeoutMs ?? waitMs + this.client.timeouts.longPollSlackMs,
    });
  }
  configuration(signal: AbortSignal): Promise<Buffer> {
    return this.transfer("downloading the configuration archive", signal, (s) =>
      this.client.call(routes.jobConfiguration, { ...this.ids, signal: s, deadlineOn: "progress" }),
    );
  }
  async variables(signal?: AbortSignal): Promise<JobVariable[]> {
    return (await this.client.call(routes.jobVariables, { ...this.ids, signal })).variables;
  }
  async appendLog(offset: number, data: Buffer, signal?: AbortSignal): Promise<number> {
    return (await this.client.call(routes.appendLog, { ...this.ids, query: { offset }, body: data, signal })).offset;
  }
  async uploadPlan(planFile: Buffer, signal: AbortSignal): Promise<void> {
    await this.upload("uploading the plan file", planFile, signal, (o) =>
      this.client.call(routes.uploadPlan, { ...this.ids, ...o }),
    );
  }
  async uploadPlanJson(planJson: Buffer, signal: AbortSignal): Promise<void> {
    await this.upload("uploading the plan's JSON", planJson, signal, (o) =>
      this.client.call(routes.uploadPlanJson, { ...this.ids, ...o }),
    );
  }
  async uploadProviderSchemas(schemas: Buffer, signal: AbortSignal): Promise<void> {
    await this.upload("uploading the providers' schemas", schemas, signal, (o) =>
      this.client.call(routes.uploadProviderSchemas, { ...this.ids, ...o }),
    );
  }
  downloadPlan(signal: AbortSignal): Promise<Buffer> {
    return this.transfer("downloading the plan file", signal, (s) =>
      this.client.call(routes.downloadPlan, { ...this.ids, signal: s, deadlineOn: "progress" }),
    );
  }
  /**
   * The workspace's current state from the server's http backend (empty when there is none).
   * The path is the one the assignment names, so it is requested as given.
   */
  state(statePath: string, signal: AbortSignal): Promise<Buffer> {
    return this.transfer("downloading the state", signal, async (s) => {
      try {
        const answer = await this.client.http.request("GET", statePath, {
          token: this.token,
          signal: s,
          deadlineOn: "progress",
        });
        if (answer.status >= 400) throw decodeErrorAnswer(`GET ${statePath} at ${this.client.baseUrl}`, answer);
        return answer.body;
      } catch (err) {
        throw retriable(err);
      }
    });
  }
  async uploadOutputs(outputs: Output[], signal?: AbortSignal): Promise<void> {
    await this.client.call(routes.uploadOutputs, { ...this.ids, body: { outputs }, signal });
  }
  /** Reports the job's outcome; a plan job adds its plan's summary (decision 0050). */
  async finish(
    outcome: JobOutcome,
    message: string | null,
    signal?: AbortSignal,
    planSummary?: PlanSummary,
  ): Promise<void> {
    await this.client.call(routes.finishJob, {
      ...this.ids,
      body: { outcome, message, ...(planSummary ? { planSummary } : {}) },
      signal,
    });
  }

  /** Sends `body` as a transfer: retried within its budget, each try with a deadline that grows with its size. */
  private upload<T>(
    what: string,
    body: Buffer,
    signal: AbortSignal,
    send: (options: { body: Buffer; signal: AbortSignal; timeoutMs: number }) => Promise<T>,
  ): Promise<T> {
    return this.transfer(what, signal, (s) => send({ body, signal: s, timeoutMs: this.client.sendingMs(body) }));
  }

  /** `work` retried within the transfer budget, or until `signal` (the job's end, its cancel) aborts. */
  private transfer<T>(what: string, signal: AbortSignal, work: (signal: AbortSignal) => Promise<T>): Promise<T> {
    return withRetry(() => work(signal), signal, { giveUpAfterMs: this.client.timeouts.transferRetryMs, what });
  }
}

/** A failure worth retrying as a NetworkError; anything else unchanged. */
function retriable(err: unknown): unknown {
  if (!(err instanceof ApiError)) return err;
  if (err.code === "server_unreachable" || err.httpStatus >= 500 || err.httpStatus === 429) {
    const asked = err.httpStatus === 503 || err.httpStatus === 429 ? err.retryAfterMs : undefined;
    const retryAfterMs = asked === undefined ? undefined : Math.min(asked, maxRetryAfterMs);
    return new NetworkError(
      err.httpStatus >= 500 || err.httpStatus === 429 ? `server error: ${err.message}` : err.message,
      { cause: err, retryAfterMs, code: err.code },
    );
  }
  return err;
}

/** The server could not be reached, did not answer in time, or failed (5xx, 429): worth retrying. */
export class NetworkError extends Error {
  override readonly name = "NetworkError";
  /** How long the server asked the agent to wait (`Retry-After`), capped. */
  readonly retryAfterMs: number | undefined;
  /** The coded error underneath: `server_unreachable`, or the server's code of a 5xx/429. */
  readonly code: ErrorCode;

  constructor(message: string, options: { cause?: unknown; retryAfterMs?: number | undefined; code?: ErrorCode } = {}) {
    super(message, { cause: options.cause });
    this.retryAfterMs = options.retryAfterMs;
    this.code = options.code ?? "server_unreachable";
  }
}

/** Bounds of `withRetry`. */
export interface RetryLimits {
  /** Longest wait between two tries, in ms. */
  maxDelayMs?: number;
  /** No try starts this long after the first one, in ms; unset: tries go on until the signal aborts. */
  giveUpAfterMs?: number;
  /** What is tried, for the error of giving up ("uploading the plan file"). */
  what?: string;
}

/**
 * Retries `work` on NetworkError with exponential backoff (or the server's `Retry-After`)
 * until it succeeds, `signal` aborts (the last error is thrown), or the budget of
 * `giveUpAfterMs` is spent (a DroverError says what was given up, and why). Without a signal
 * the loop could be unbounded, so one is required.
 */
export async function withRetry<T>(work: () => Promise<T>, signal: AbortSignal, limits: RetryLimits = {}): Promise<T> {
  const backoff = new Backoff({ initialMs: 200, maxMs: limits.maxDelayMs ?? 10_000 });
  const started = Date.now();
  for (let tries = 1; ; tries++) {
    try {
      return await work();
    } catch (err) {
      if (!(err instanceof NetworkError) || signal.aborted) throw err;
      const wait = backoff.next(err);
      if (limits.giveUpAfterMs !== undefined && Date.now() + wait - started >= limits.giveUpAfterMs)
        throw gaveUp(limits.what ?? "a call to the server", tries, started, err);
      await pause(wait, signal);
      if (signal.aborted) throw err;
    }
  }
}

/** The error of a retry budget spent: not a NetworkError, so no caller tries again. */
function gaveUp(what: string, tries: number, started: number, last: NetworkError): DroverError {
  const seconds = Math.round((Date.now() - started) / 1000);
  const attempts = `${tries} ${tries === 1 ? "try" : "tries"}`;
  return new DroverError(last.code, `gave up ${what} after ${attempts} in ${seconds} s: ${messageOf(last)}`, {
    cause: last,
  });
}
