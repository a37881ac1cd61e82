import type { VcsOperation, VcsOperationName, VcsOperationResult, VcsProvider } from "@drover/protocol";

/** How a VCS connection is reached and authenticated, on whichever side holds its credentials. */
export interface VcsEndpoint {
  provider: VcsProvider;
  /** The web and git base URL (https://github.com, https://gitlab.example.com). */
  url: string;
  /** The REST API base (https://api.github.com, https://ghe.example.com/api/v3, https://gitlab.example.com/api/v4). */
  apiUrl: string;
  token: string;
}

/** Runs the typed VCS operations against one connection; the only way Drover calls a VCS API. */
export interface VcsClient {
  run<K extends VcsOperationName>(
    operation: Extract<VcsOperation, { op: K }>,
    options?: { signal?: AbortSignal },
  ): Promise<VcsOperationResult<K>>;
}
