import {
  agentApi,
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

/**
 * The agent's HTTP client for the agent protocol. Every call takes an AbortSignal; every
 * response is validated against the shared schemas; error bodies become DroverErrors.
 * HTTP(S)_PROXY / NO_PROXY are honoured; DROVER_CA_CERT is added to the default roots.
 */
export class AgentClient {
  readonly dispatcher: Dispatcher;

  constructor(
    readonly baseUrl: string,
    caCertPem?: string,
  ) {
    this.dispatcher = new EnvHttpProxyAgent({
      ...(caCertPem ? { connect: { ca: [...rootCertificates, caCertPem] } } : {}),
      headersTimeout: 0,
      bodyTimeout: 0,
    });
  }

  async call(method: Dispatcher.HttpMethod, path: string, token: string, options: { body?: unknown; raw?: Buffer; signal?: AbortSignal | undefined } = {}): Promise<Buffer> {
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
      res = await request(this.baseUrl + path, { method, headers, body, dispatcher: this.dispatcher, signal: options.signal });
    } catch (err) {
      if (options.signal?.aborted) throw err;
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
      if (res.statusCode >= 500) throw new NetworkError(`server error: ${message}`);
      const { error: _e, message: _m, ...details } = parsed as Record<string, unknown>;
      throw new DroverError(isErrorCode(parsed.error) ? parsed.error : res.statusCode === 401 ? "unauthorized" : "bad_request", message, { details });
    }
    return data;
  }

  async json<S extends z.ZodType>(schema: S, method: Dispatcher.HttpMethod, path: string, token: string, options: { body?: unknown; raw?: Buffer; signal?: AbortSignal | undefined } = {}): Promise<z.infer<S>> {
    const data = await this.call(method, path, token, options);
    const result = schema.safeParse(JSON.parse(data.toString("utf8")));
    if (!result.success) throw new Error(`unexpected response from ${method} ${path}: ${result.error.message}`);
    return result.data;
  }

  register(poolToken: string, body: { name: string; version: string; driver: "local" | "kubernetes"; capacity: number }, signal?: AbortSignal): Promise<RegisterResponse> {
    return this.json(registerResponseSchema, "POST", `${agentApi}/register`, poolToken, { body, signal });
  }

  async poll(session: string, waitMs: number, signal?: AbortSignal): Promise<JobAssignment | null> {
    return (await this.json(pollResponseSchema, "POST", `${agentApi}/jobs/next?wait=${waitMs}`, session, { signal })).job;
  }

  async heartbeat(session: string, runningJobs: number, signal?: AbortSignal): Promise<void> {
    await this.call("POST", `${agentApi}/heartbeat`, session, { body: { runningJobs }, signal });
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
    return this.client.json(jobHeartbeatResponseSchema, "POST", this.path(`heartbeat?wait=${waitMs}`), this.token, { signal });
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

/** The server could not be reached or failed (5xx): worth retrying. */
export class NetworkError extends Error {
  override readonly name = "NetworkError";
}

/** Retries `work` on NetworkError with exponential backoff until `signal` aborts or it succeeds. */
export async function withRetry<T>(work: () => Promise<T>, signal?: AbortSignal, maxDelayMs = 10_000): Promise<T> {
  let delay = 200;
  for (;;) {
    try {
      return await work();
    } catch (err) {
      if (!(err instanceof NetworkError) || signal?.aborted) throw err;
      await new Promise((r) => setTimeout(r, delay).unref());
      delay = Math.min(maxDelayMs, delay * 2);
    }
  }
}
