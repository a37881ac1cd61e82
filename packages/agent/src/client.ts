import {
  agentApi,
  agentHeartbeatResponseSchema,
  DroverError,
  isErrorCode,
  jobHeartbeatResponseSchema,
  jobVariablesResponseSchema,
  logAppendResponseSchema,
  pollResponseSchema,
  registerResponseSchema,
  startJobResponseSchema,
  type JobAssignment,
  type JobHeartbeatResponse,
  type JobOutcome,
  type JobVariable,
  type Output,
  type RegisterResponse,
  type RunStatus,
} from "@drover/protocol";
import { rootCertificates } from "node:tls";
import { EnvHttpProxyAgent, request, type Dispatcher } from "undici";
import type { z } from "zod";
import { pause, parseRetryAfter, waitFor } from "./backoff.js";

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

/** Options of one call. */
export interface CallOptions {
  body?: unknown;
  raw?: Buffer;
  /** The caller's stop signal: aborting it ends the call with its reason. */
  signal?: AbortSignal | undefined;
  /** This call's deadline; default `timeouts.requestMs`. Expiry is a NetworkError (retriable). */
  timeoutMs?: number;
}

/**
 * The agent's HTTP client for the agent protocol. Every call takes an AbortSignal; every
 * response is validated against the shared schemas; error bodies become DroverErrors.
 * HTTP(S)_PROXY / NO_PROXY are honoured; DROVER_CA_CERT is added to the default roots.
 */
export class AgentClient {
  readonly dispatcher: Dispatcher;
  readonly timeouts: ClientTimeouts;

  constructor(
    readonly baseUrl: string,
    caCertPem?: string,
    timeouts: Partial<ClientTimeouts> = {},
  ) {
    this.timeouts = { ...defaultClientTimeouts, ...timeouts };
    // undici's own timeouts catch a server that stops answering mid-response; the per-call
    // deadline below bounds the whole call (a long-poll legitimately waits for headers).
    const longest = this.timeouts.requestMs + this.timeouts.longPollSlackMs + 50_000;
    this.dispatcher = new EnvHttpProxyAgent({
      connect: { timeout: this.timeouts.connectMs, ...(caCertPem ? { ca: [...rootCertificates, caCertPem] } : {}) },
      headersTimeout: longest,
      bodyTimeout: this.timeouts.requestMs,
    });
  }

  async call(method: Dispatcher.HttpMethod, path: string, token: string, options: CallOptions = {}): Promise<Buffer> {
    const limit = callDeadline(options.signal, options.timeoutMs ?? this.timeouts.requestMs);
    try {
      return await this.send(method, path, token, options, limit.signal);
    } catch (err) {
      if (limit.timedOut() && !options.signal?.aborted) {
        throw new NetworkError(`no answer from the Drover server at ${this.baseUrl} within ${options.timeoutMs ?? this.timeouts.requestMs} ms (${method} ${path.split("?")[0]})`, { cause: err });
      }
      throw err;
    } finally {
      limit.dispose();
    }
  }

  private async send(method: Dispatcher.HttpMethod, path: string, token: string, options: CallOptions, signal: AbortSignal): Promise<Buffer> {
    const headers: Record<string, string> = { authorization: `Bearer ${token}` };
    let body: string | Buffer | undefined;
    if (options.raw) {
      headers["content-type"] = "application/octet-stream";
      body = options.raw;
    } else if (options.body !== undefined) {
      headers["content-type"] = "application/json";
      body = JSON.stringify(options.body);
    }
    let res: Dispatcher.ResponseData;
    try {
      res = await request(this.baseUrl + path, { method, headers, body, dispatcher: this.dispatcher, signal });
    } catch (err) {
      if (signal.aborted) throw err;
      throw new NetworkError(`cannot reach the Drover server at ${this.baseUrl}: ${err instanceof Error ? err.message : String(err)}`, { cause: err });
    }
    const data = Buffer.from(await res.body.arrayBuffer());
    if (res.statusCode >= 400) {
      let parsed: { error?: unknown; message?: unknown } = {};
      try {
        parsed = JSON.parse(data.toString("utf8")) as typeof parsed;
      } catch {
        // not JSON
      }
      const message = typeof parsed.message === "string" ? parsed.message : `HTTP ${res.statusCode} from ${method} ${path}`;
      if (res.statusCode >= 500 || res.statusCode === 429) {
        const retryAfterMs = res.statusCode === 503 || res.statusCode === 429 ? parseRetryAfter(res.headers["retry-after"]) : undefined;
        throw new NetworkError(`server error: ${message}`, { retryAfterMs });
      }
      const { error: _e, message: _m, ...details } = parsed as Record<string, unknown>;
      throw new DroverError(isErrorCode(parsed.error) ? parsed.error : res.statusCode === 401 ? "unauthorized" : "bad_request", message, { details });
    }
    return data;
  }

  async json<S extends z.ZodType>(schema: S, method: Dispatcher.HttpMethod, path: string, token: string, options: CallOptions = {}): Promise<z.infer<S>> {
    const data = await this.call(method, path, token, options);
    const result = schema.safeParse(JSON.parse(data.toString("utf8")));
    if (!result.success) throw new Error(`unexpected response from ${method} ${path}: ${result.error.message}`);
    return result.data;
  }

  register(poolToken: string, body: { name: string; version: string; driver: "local" | "kubernetes"; capacity: number }, signal?: AbortSignal): Promise<RegisterResponse> {
    return this.json(registerResponseSchema, "POST", `${agentApi}/register`, poolToken, { body, signal });
  }

  async poll(session: string, waitMs: number, signal?: AbortSignal): Promise<JobAssignment | null> {
    return (await this.json(pollResponseSchema, "POST", `${agentApi}/jobs/next?wait=${waitMs}`, session, { signal, timeoutMs: waitMs + this.timeouts.longPollSlackMs })).job;
  }

  /** Returns the kept plan runs the server says will not be applied here. */
  async heartbeat(session: string, runningJobs: number, signal?: AbortSignal, keptPlanRuns: string[] = []): Promise<string[]> {
    const body = keptPlanRuns.length > 0 ? { runningJobs, keptPlanRuns } : { runningJobs };
    return (await this.json(agentHeartbeatResponseSchema, "POST", `${agentApi}/heartbeat`, session, { body, signal })).dropPlanRuns;
  }

  async deregister(session: string, signal?: AbortSignal): Promise<void> {
    await this.call("POST", `${agentApi}/deregister`, session, { signal });
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

  private path(suffix: string): string {
    return `${agentApi}/jobs/${this.jobId}/${suffix}`;
  }

  async start(signal?: AbortSignal): Promise<RunStatus> {
    return (await this.client.json(startJobResponseSchema, "POST", this.path("start"), this.token, { signal })).runStatus;
  }
  heartbeat(waitMs: number, signal?: AbortSignal): Promise<JobHeartbeatResponse> {
    return this.client.json(jobHeartbeatResponseSchema, "POST", this.path(`heartbeat?wait=${waitMs}`), this.token, { signal, timeoutMs: waitMs + this.client.timeouts.longPollSlackMs });
  }
  configuration(signal?: AbortSignal): Promise<Buffer> {
    return this.client.call("GET", this.path("configuration"), this.token, { signal });
  }
  async variables(signal?: AbortSignal): Promise<JobVariable[]> {
    return (await this.client.json(jobVariablesResponseSchema, "GET", this.path("variables"), this.token, { signal })).variables;
  }
  async appendLog(offset: number, data: Buffer, signal?: AbortSignal): Promise<number> {
    return (await this.client.json(logAppendResponseSchema, "POST", this.path(`logs?offset=${offset}`), this.token, { raw: data, signal })).offset;
  }
  async uploadPlan(planFile: Buffer, signal?: AbortSignal): Promise<void> {
    await this.client.call("PUT", this.path("plan"), this.token, { raw: planFile, signal });
  }
  async uploadPlanJson(planJson: Buffer, signal?: AbortSignal): Promise<void> {
    await this.client.call("PUT", this.path("plan-json"), this.token, { raw: planJson, signal });
  }
  downloadPlan(signal?: AbortSignal): Promise<Buffer> {
    return this.client.call("GET", this.path("plan"), this.token, { signal });
  }
  /** The workspace's current state from the server's http backend (empty when there is none). */
  state(statePath: string, signal?: AbortSignal): Promise<Buffer> {
    return this.client.call("GET", statePath, this.token, { signal });
  }
  async uploadOutputs(outputs: Output[], signal?: AbortSignal): Promise<void> {
    await this.client.call("PUT", this.path("outputs"), this.token, { body: { outputs }, signal });
  }
  async finish(outcome: JobOutcome, message: string | null, signal?: AbortSignal): Promise<void> {
    await this.client.call("POST", this.path("finish"), this.token, { body: { outcome, message }, signal });
  }
}

/** The server could not be reached, did not answer in time, or failed (5xx, 429): worth retrying. */
export class NetworkError extends Error {
  override readonly name = "NetworkError";
  /** How long the server asked the agent to wait (`Retry-After`), capped. */
  readonly retryAfterMs: number | undefined;

  constructor(message: string, options: { cause?: unknown; retryAfterMs?: number | undefined } = {}) {
    super(message, { cause: options.cause });
    this.retryAfterMs = options.retryAfterMs;
  }
}

/**
 * Retries `work` on NetworkError with exponential backoff (or the server's `Retry-After`)
 * until it succeeds or `signal` aborts; then the last error is thrown. Without a signal the
 * loop would be unbounded, so one is required.
 */
export async function withRetry<T>(work: () => Promise<T>, signal: AbortSignal, maxDelayMs = 10_000): Promise<T> {
  let delay = 200;
  for (;;) {
    try {
      return await work();
    } catch (err) {
      if (!(err instanceof NetworkError) || signal.aborted) throw err;
      await pause(waitFor(err, delay), signal);
      if (signal.aborted) throw err;
      delay = Math.min(maxDelayMs, delay * 2);
    }
  }
}

/**
 * A signal that aborts when `parent` does or after `ms`. Linked by hand rather than with
 * AbortSignal.any so that the listener on a long-lived parent is removed when the call ends.
 */
function callDeadline(parent: AbortSignal | undefined, ms: number): { signal: AbortSignal; timedOut(): boolean; dispose(): void } {
  const controller = new AbortController();
  let expired = false;
  const onParent = () => controller.abort(parent?.reason);
  if (parent?.aborted) controller.abort(parent.reason);
  else parent?.addEventListener("abort", onParent, { once: true });
  const timer = setTimeout(() => {
    expired = true;
    controller.abort(new Error(`deadline of ${ms} ms passed`));
  }, ms);
  timer.unref();
  return {
    signal: controller.signal,
    timedOut: () => expired,
    dispose() {
      clearTimeout(timer);
      parent?.removeEventListener("abort", onParent);
    },
  };
}
