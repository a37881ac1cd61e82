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

/**
 * The parts of the Docker Engine API the docker driver uses, over the daemon's unix socket
 * with undici (decision 0015). Every call takes an AbortSignal; errors carry the daemon's own
 * message, which names the image, container or limit at fault.
 */
export class DockerEngine {
  private readonly client: Pool;

  constructor(readonly socketPath: string) {
    // The host part is never sent anywhere: the socket is the connection. A pool, not one
    // connection: `wait` and followed logs hold theirs open for as long as a container runs.
    this.client = new Pool("http://docker", { socketPath, headersTimeout: 0, bodyTimeout: 0 });
  }

  private async call(
    method: "GET" | "POST" | "DELETE",
    path: string,
    signal: AbortSignal | undefined,
    body?: unknown,
  ): Promise<{ status: number; text: string }> {
    let res;
    try {
      res = await this.client.request({
        method,
        path: `/${apiVersion}${path}`,
        headers: body === undefined ? {} : { "content-type": "application/json" },
        body: body === undefined ? undefined : JSON.stringify(body),
        signal,
      });
    } catch (err) {
      if (signal?.aborted) throw err;
      throw new DockerApiError(0, `cannot reach the Docker daemon at ${this.socketPath}: ${messageOf(err)}`, {
        cause: err,
      });
    }
    const text = await res.body.text();
    return { status: res.statusCode, text };
  }

  private async json<T>(
    method: "GET" | "POST" | "DELETE",
    path: string,
    signal: AbortSignal | undefined,
    body?: unknown,
    ok: number[] = [200, 201, 204],
  ): Promise<T> {
    const { status, text } = await this.call(method, path, signal, body);
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
    const r = await this.json<{ StatusCode: number }>("POST", `/containers/${id}/wait`, signal);
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
   * Pulls an image. The daemon answers 200 and then reports a failure inside its progress
   * stream, so the stream is read to its end and its error lines checked.
   */
  async pull(image: string, signal?: AbortSignal): Promise<void> {
    const { status, text } = await this.call("POST", `/images/create?fromImage=${encodeURIComponent(image)}`, signal);
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

  close(): Promise<void> {
    return this.client.close();
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
