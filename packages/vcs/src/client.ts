import { DroverError, vcsOperationResultSchemas, vcsOperationSchema } from "@drover/protocol";
import { gitlabAccess } from "./gitlab-endpoint.js";
import type { VcsClient, VcsEndpoint } from "./operations.js";

/*
 * The one way to a VCS API: an operation is checked against the closed schema before any
 * request is built (so a relayed one cannot carry a host, a path or a malformed number), and
 * its answer is checked before it is returned.
 */

export interface VcsClientOptions {
  /** Deadline of each operation (and of minting a GitHub App's installation token). */
  deadlineMs?: number;
}

export const defaultVcsDeadlineMs = 30_000;

/**
 * The provider's own client, its library loaded on first use: octokit and gitbeaker are most of
 * what loading this package costs, and a server without VCS connections never needs them.
 */
function providerClient(endpoint: VcsEndpoint, deadlineMs: number): () => Promise<VcsClient> {
  if (endpoint.provider === "gitlab") gitlabAccess(endpoint);
  let loaded: Promise<VcsClient> | undefined;
  return () =>
    (loaded ??=
      endpoint.provider === "github"
        ? import("./github.js").then((m) => m.githubClient(endpoint, { deadlineMs }))
        : import("./gitlab.js").then((m) => m.gitlabClient(endpoint, { deadlineMs })));
}

/** The client of one connection's API: each operation and each answer checked against the closed schemas. */
export function vcsClient(endpoint: VcsEndpoint, options: VcsClientOptions = {}): VcsClient {
  const inner = providerClient(endpoint, options.deadlineMs ?? defaultVcsDeadlineMs);
  return {
    async run(operation, opts) {
      const parsed = vcsOperationSchema.safeParse(operation);
      if (!parsed.success)
        throw new DroverError("bad_request", `not a valid VCS operation: ${parsed.error.issues[0]?.message ?? "?"}`);
      const result = await (await inner()).run(operation, opts);
      const checked = vcsOperationResultSchemas[operation.op].safeParse(result);
      if (!checked.success)
        throw new DroverError("vcs_error", `the VCS answered ${operation.op} with something unexpected`);
      return checked.data as typeof result;
    },
    gitToken: async (opts) => (await inner()).gitToken(opts),
  };
}

/** The REST API base a connection uses when none is given: github.com's own host, else the web URL's API path. */
export function defaultApiUrl(provider: VcsEndpoint["provider"], url: string): string {
  const base = url.replace(/\/+$/, "");
  if (provider === "github") return /^https:\/\/github\.com$/i.test(base) ? "https://api.github.com" : `${base}/api/v3`;
  return `${base}/api/v4`;
}
