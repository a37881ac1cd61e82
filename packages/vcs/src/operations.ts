import type { VcsOperation, VcsOperationName, VcsOperationResult, VcsProvider } from "@drover/protocol";

/** How Drover authenticates to a VCS API. */
export type VcsAuth =
  | { kind: "token"; token: string }
  /** A GitHub App: installation tokens are minted from the app's private key as they are needed. */
  | { kind: "github-app"; appId: string; installationId: number; privateKey: string };

/** How a VCS connection is reached and authenticated, on whichever side holds its credentials. */
export interface VcsEndpoint {
  provider: VcsProvider;
  /** The web and git base URL (https://github.com, https://gitlab.example.com). */
  url: string;
  /** The REST API base (https://api.github.com, https://ghe.example.com/api/v3, https://gitlab.example.com/api/v4). */
  apiUrl: string;
  auth: VcsAuth;
}

/** Runs the typed VCS operations against one connection; the only way Drover calls a VCS API. */
export interface VcsClient {
  run<K extends VcsOperationName>(
    operation: Extract<VcsOperation, { op: K }>,
    options?: { signal?: AbortSignal },
  ): Promise<VcsOperationResult<K>>;
  /** A token git can fetch with (a GitHub App's current installation token, or the connection's token). */
  gitToken(options?: { signal?: AbortSignal }): Promise<string>;
}

type Op<K extends VcsOperationName> = Extract<VcsOperation, { op: K }>;

/** One function per operation, as a provider implements them. */
export type OperationHandlers = {
  [K in VcsOperationName]: (operation: Op<K>, signal?: AbortSignal) => Promise<VcsOperationResult<K>>;
};

/** The `run` of a client whose operations are `handlers`. */
export function dispatch(handlers: OperationHandlers): VcsClient["run"] {
  return <K extends VcsOperationName>(operation: Op<K>, options?: { signal?: AbortSignal }) => {
    const handler = handlers[operation.op as K] as unknown as (
      o: Op<K>,
      s?: AbortSignal,
    ) => Promise<VcsOperationResult<K>>;
    return handler(operation, options?.signal);
  };
}
