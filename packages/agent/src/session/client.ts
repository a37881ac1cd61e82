import {
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
}

export const defaultClientTimeouts: ClientTimeouts = { requestMs: 60_000, longPollSlackMs: 15_000, connectMs: 10_000 };

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
}

/** The job-token calls of one job. */
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
  configuration(signal?: AbortSignal): Promise<Buffer> {
    return this.client.call(routes.jobConfiguration, { ...this.ids, signal });
  }
  async variables(signal?: AbortSignal): Promise<JobVariable[]> {
    return (await this.client.call(routes.jobVariables, { ...this.ids, signal })).variables;
  }
  async appendLog(offset: number, data: Buffer, signal?: AbortSignal): Promise<number> {
    return (await this.client.call(routes.appendLog, { ...this.ids, query: { offset }, body: data, signal })).offset;
  }
  async uploadPlan(planFile: Buffer, signal?: AbortSignal): Promise<void> {
    await this.client.call(routes.uploadPlan, { ...this.ids, body: planFile, signal });
  }
  async uploadPlanJson(planJson: Buffer, signal?: AbortSignal): Promise<void> {
    await this.client.call(routes.uploadPlanJson, { ...this.ids, body: planJson, signal });
  }
  async uploadProviderSchemas(schemas: Buffer, signal?: AbortSignal): Promise<void> {
    await this.client.call(routes.uploadProviderSchemas, { ...this.ids, body: schemas, signal });
  }
  downloadPlan(signal?: AbortSignal): Promise<Buffer> {
    return this.client.call(routes.downloadPlan, { ...this.ids, signal });
  }
  /**
   * The workspace's current state from the server's http backend (empty when there is none).
   * The path is the one the assignment names, so it is requested as given.
   */
  async state(statePath: string, signal?: AbortSignal): Promise<Buffer> {
    try {
      const answer = await this.client.http.request("GET", statePath, { token: this.token, signal });
      if (answer.status >= 400) throw decodeErrorAnswer(`GET ${statePath} at ${this.client.baseUrl}`, answer);
      return answer.body;
    } catch (err) {
      throw retriable(err);
    }
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

/**
 * Retries `work` on NetworkError with exponential backoff (or the server's `Retry-After`)
 * until it succeeds or `signal` aborts; then the last error is thrown. Without a signal the
 * loop would be unbounded, so one is required.
 */
export async function withRetry<T>(work: () => Promise<T>, signal: AbortSignal, maxDelayMs = 10_000): Promise<T> {
  const backoff = new Backoff({ initialMs: 200, maxMs: maxDelayMs });
  for (;;) {
    try {
      return await work();
    } catch (err) {
      if (!(err instanceof NetworkError) || signal.aborted) throw err;
      await pause(backoff.next(err), signal);
      if (signal.aborted) throw err;
    }
  }
}
