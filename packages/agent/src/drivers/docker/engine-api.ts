import { messageOf } from "@drover/protocol";
import { Pool } from "undici";
import { StreamDemuxer } from "./demux.js";

/** Engine API version every call names: Docker 20.10+ and podman 4's Docker API both serve it. */
const apiVersion = "v1.41";

/** A failed call to the Docker Engine API, with its HTTP status (0: the socket could not be reached). */
export class DockerApiError extends Error {
  override readonly name = "DockerApiError";
  constructor(
    readonly status: number,
    message: string,
    options?: { cause?: unknown },
  ) {
    super(message, options);
  }
}

/** What the agent reads of `GET /containers/{id}/json`. */
export interface ContainerInspect {
  Id: string;
  State: { Status: string; Running: boolean; OOMKilled: boolean; ExitCode: number; Pid: number; Error?: string };
  Config: { Labels: Record<string, string> | null };
}

/** One row of `GET /containers/json`. */
export interface ContainerSummary {
  Id: string;
  Labels: Record<string, string> | null;
  State: string;
}

/** The body of `POST /containers/create` the agent sends (the Engine API's field names). */
export interface ContainerCreate {
  Image: string;
  Entrypoint: string[];
  Cmd: string[];
  User: string;
  Env: string[];
  WorkingDir: string;
  Labels: Record<string, string>;
  HostConfig: {
    Binds: string[];
    Tmpfs: Record<string, string>;
    ReadonlyRootfs: boolean;
    NetworkMode: string;
    Memory?: number;
    MemorySwap?: number;
    NanoCpus?: number;
    PidsLimit?: number;
    CapDrop: string[];
    SecurityOpt: string[];
    AutoRemove: false;
  };
}

/** How long the client waits on the daemon. */
export interface DockerDeadlines {
  /** A call the daemon answers at once (create, start, inspect, kill, remove, list, an image's lookup), in ms. */
  callTimeoutMs?: number;
  /** A pull may take long, but not this long without a byte of its progress, in ms. */
  pullSilenceMs?: number;
}

/** A busy daemon answers in seconds; a minute without an answer is a hung one. */
const defaultCallTimeoutMs = 60_000;
/** A registry that sends no progress for two minutes has stalled the pull. */
const defaultPullSilenceMs = 120_000;

/**
 * The parts of the Docker Engine API the docker driver uses, over the daemon's unix socket
 * with undici (decision 0015). Every call takes an AbortSignal and ends by a deadline (a
 * container's `wait` and followed logs last as long as it runs, and end with their signal);
 * errors carry the daemon's own message, which names the image, container or limit at fault.
 */
export class DockerEngine {
  private readonly client: Pool;
  private readonly callTimeoutMs: number;
  private readonly pullSilenceMs: number;

  constructor(
    readonly socketPath: string,
    deadlines: DockerDeadlines = {},
  ) {
    // The host part is never sent anywhere: the socket is the connection. A pool, not one
    // connection: `wait` and followed logs hold theirs open for as long as a container runs.
    this.client = new Pool("http://docker", { socketPath, headersTimeout: 0, bodyTimeout: 0 });
    this.callTimeoutMs = deadlines.callTimeoutMs ?? defaultCallTimeoutMs;
    this.pullSilenceMs = deadlines.pullSilenceMs ?? defaultPullSilenceMs;
  }

  /** One call, its answer read whole; `limit` "none" for the calls that last as long as a container runs. */
  private async call(
    method: "GET" | "POST" | "DELETE",
    path: string,
    signal: AbortSignal | undefined,
    body?: unknown,
    limit: "deadline" | "none" = "deadline",
  ): Promise<{ status: number; text: string }> {
    const deadline = limit === "deadline" ? AbortSignal.timeout(this.callTimeoutMs) : undefined;
    const either = deadline && signal ? AbortSignal.any([signal, deadline]) : (deadline ?? signal);
    try {
      const res = await this.client.request({
        method,
        path: `/${apiVersion}${path}`,
        headers: body === undefined ? {} : { "content-type": "application/json" },
        body: body === undefined ? undefined : JSON.stringify(body),
        signal: either,
      });
      return { status: res.statusCode, text: await res.body.text() };
    } catch (err) {
      if (signal?.aborted) throw err;
      if (deadline?.aborted)
        throw new DockerApiError(
          0,
          `the Docker daemon at ${this.socketPath} did not answer ${method} ${path.split("?")[0]} within ${this.callTimeoutMs} ms`,
          { cause: err },
        );
      throw new DockerApiError(0, `cannot reach the Docker daemon at ${this.socketPath}: ${messageOf(err)}`, {
        cause: err,
      });
    }
  }

  private async json<T>(
    method: "GET" | "POST" | "DELETE",
    path: string,
    signal: AbortSignal | undefined,
    body?: unknown,
    ok: number[] = [200, 201, 204],
    limit: "deadline" | "none" = "deadline",
  ): Promise<T> {
    const { status, text } = await this.call(method, path, signal, body, limit);
    if (!ok.includes(status))
      throw new DockerApiError(status, daemonMessage(text) ?? `${method} ${path} answered ${status}`);
    return (text ? JSON.parse(text) : undefined) as T;
  }

  /** The daemon's version answer; fails when the socket is not a Docker API. */
  version(signal?: AbortSignal): Promise<{ Version: string; ApiVersion?: string }> {
    return this.json("GET", "/version", signal);
  }

  /** Creates a container; a missing image is a DockerApiError with status 404. */
  async create(name: string, spec: ContainerCreate, signal?: AbortSignal): Promise<string> {
    const made = await this.json<{ Id: string }>(
      "POST",
      `/containers/create?name=${encodeURIComponent(name)}`,
      signal,
      spec,
    );
    return made.Id;
  }

  async start(id: string, signal?: AbortSignal): Promise<void> {
    await this.json("POST", `/containers/${id}/start`, signal, undefined, [204, 304]);
  }

  inspect(id: string, signal?: AbortSignal): Promise<ContainerInspect> {
    return this.json("GET", `/containers/${id}/json`, signal);
  }

  /** Sends a signal to the container's main process; a container already stopped is no error. */
  async kill(id: string, signal: string, abort?: AbortSignal): Promise<void> {
    await this.json("POST", `/containers/${id}/kill?signal=${signal}`, abort, undefined, [204, 404, 409, 500]);
  }

  /** Removes the container (killing it first when it runs); one already gone is no error. */
  async remove(id: string, signal?: AbortSignal): Promise<void> {
    await this.json("DELETE", `/containers/${id}?force=true&v=true`, signal, undefined, [200, 204, 404]);
  }

  /** Containers (running or not) carrying every one of `labels` (`key=value`). */
  list(labels: string[], signal?: AbortSignal): Promise<ContainerSummary[]> {
    const filters = encodeURIComponent(JSON.stringify({ label: labels }));
    return this.json("GET", `/containers/json?all=true&filters=${filters}`, signal);
  }

  /** Waits until the container has stopped; resolves with its exit code. */
  async wait(id: string, signal?: AbortSignal): Promise<number> {
    const r = await this.json<{ StatusCode: number }>(
      "POST",
      `/containers/${id}/wait`,
      signal,
      undefined,
      [200],
      "none",
    );
    return r.StatusCode;
  }

  /** True when the image is on the daemon. */
  async hasImage(image: string, signal?: AbortSignal): Promise<boolean> {
    const { status, text } = await this.call(
      "GET",
      `/images/${image.split("/").map(encodeURIComponent).join("/")}/json`,
      signal,
    );
    if (status === 200) return true;
    if (status === 404) return false;
    throw new DockerApiError(status, daemonMessage(text) ?? `looking up image ${image} answered ${status}`);
  }

  /**
   * Pulls an image (`:latest` when the reference names no tag or digest: the daemon would pull
   * every tag of the repository). The daemon answers 200 and then reports a failure inside its
   * progress stream, so the stream is read to its end and its error lines checked.
   */
  async pull(image: string, signal?: AbortSignal): Promise<void> {
    const tagged = image.includes("@") || (image.split("/").pop() ?? "").includes(":");
    const path = `/images/create?fromImage=${encodeURIComponent(image)}${tagged ? "" : "&tag=latest"}`;
    const { status, text } = await this.progressing(path, `pulling ${image}`, signal);
    if (status !== 200) throw new DockerApiError(status, daemonMessage(text) ?? `pulling ${image} answered ${status}`);
    for (const line of text.split("\n")) {
      if (!line.trim()) continue;
      let event: { error?: string; errorDetail?: { message?: string } };
      try {
        event = JSON.parse(line) as typeof event;
      } catch {
        continue;
      }
      const failed = event.errorDetail?.message ?? event.error;
      if (failed) throw new DockerApiError(500, failed);
    }
  }

  /** A POST whose answer streams progress: it may take long, but fails once nothing came for pullSilenceMs. */
  private async progressing(
    path: string,
    what: string,
    signal: AbortSignal | undefined,
  ): Promise<{ status: number; text: string }> {
    const silence = new AbortController();
    const timer = setTimeout(() => silence.abort(), this.pullSilenceMs);
    try {
      const res = await this.client.request({
        method: "POST",
        path: `/${apiVersion}${path}`,
        signal: signal ? AbortSignal.any([signal, silence.signal]) : silence.signal,
      });
      timer.refresh();
      const chunks: Buffer[] = [];
      for await (const chunk of res.body as AsyncIterable<Buffer>) {
        chunks.push(chunk);
        timer.refresh();
      }
      return { status: res.statusCode, text: Buffer.concat(chunks).toString("utf8") };
    } catch (err) {
      if (signal?.aborted) throw err;
      if (silence.signal.aborted)
        throw new DockerApiError(
          0,
          `${what}: the Docker daemon at ${this.socketPath} sent nothing for ${this.pullSilenceMs} ms`,
          { cause: err },
        );
      throw new DockerApiError(0, `cannot reach the Docker daemon at ${this.socketPath}: ${messageOf(err)}`, {
        cause: err,
      });
    } finally {
      clearTimeout(timer);
    }
  }

  /**
   * Follows the container's stdout and stderr (the multiplexed stream format of a container
   * without a TTY) until it stops or `signal` aborts; each frame goes to `onFrame`.
   */
  async follow(
    id: string,
    onFrame: (stream: "stdout" | "stderr", data: Buffer) => void,
    signal: AbortSignal,
  ): Promise<void> {
    const res = await this.client.request({
      method: "GET",
      path: `/${apiVersion}/containers/${id}/logs?follow=true&stdout=true&stderr=true`,
      signal,
    });
    if (res.statusCode !== 200)
      throw new DockerApiError(
        res.statusCode,
        daemonMessage(await res.body.text()) ?? `following the logs of ${id} answered ${res.statusCode}`,
      );
    const demux = new StreamDemuxer(onFrame);
    for await (const chunk of res.body) demux.push(chunk as Buffer);
  }

  /** Ends the client, and any call still in flight: by now nobody waits for one. */
  close(): Promise<void> {
    return this.client.destroy();
  }
}

/** The `message` of a daemon's JSON error body. */
function daemonMessage(text: string): string | undefined {
  try {
    const m = (JSON.parse(text) as { message?: unknown }).message;
    return typeof m === "string" ? m : undefined;
  } catch {
    return text.trim() || undefined;
  }
}
