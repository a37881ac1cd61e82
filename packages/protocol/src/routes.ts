/** Path prefixes of the two HTTP APIs. */
export const userApi = "/api/v1";
export const agentApi = "/api/agent/v1";

/** Headers of the log read endpoint. */
export const logHeaders = {
  /** Byte offset just past the returned bytes: where the next read starts. */
  nextOffset: "x-drover-log-offset",
  /** "true" once the job has finished and every byte up to nextOffset is returned. */
  complete: "x-drover-log-complete",
} as const;

/** The longest a long-poll may hold a request; proxies cut idle requests at 60 s. */
export const maxLongPollMs = 50_000;

/** Largest log chunk the server accepts in one append. */
export const maxLogChunkBytes = 1024 * 1024;
