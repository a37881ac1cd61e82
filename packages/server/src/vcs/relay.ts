import {
  DroverError,
  escapeControlChars,
  vcsFetchResultSchema,
  vcsOperationResultSchemas,
  type ConfigurationVersion,
  type RunSource,
  type VcsOperation,
  type VcsOperationName,
  type VcsOperationResult,
} from "@drover/protocol";
import type { ArchiveLimits } from "@drover/runtime";
import {
  branchHead,
  commitTriggers,
  secretsOf,
  type GitAccess,
  type GitDeadlines,
  type VcsClient,
  type VcsEndpoint,
} from "@drover/vcs";
import type { z } from "zod";
import { getConfigurationVersion } from "../store/configuration-versions.js";
import type { StoreContext } from "../store/context.js";
import { vcsRoute } from "../store/vcs-connections.js";
import { awaitVcsTask, enqueueVcsTask } from "../store/vcs-tasks.js";
import { fetchCommit } from "./fetch.js";

/*
 * How the server reaches a connection's VCS: itself, with the credential it holds, or through
 * the VCS agents of the connection's pool, which hold the credential and reach a VCS the server
 * cannot. Through a pool every call is a task: queued, taken by one agent, and awaited here on
 * the task's end event until a deadline.
 */

/** Where a connection's pool is, and how long to wait for its agents. */
export interface RelayTarget {
  poolId: string;
  connectionId: string;
  deadlineMs: number;
}

/** A VcsClient whose operations the pool's VCS agents run. */
export function relayClient(ctx: StoreContext, target: RelayTarget): VcsClient {
  return {
    async run<K extends VcsOperationName>(
      operation: Extract<VcsOperation, { op: K }>,
      options: { signal?: AbortSignal } = {},
    ): Promise<VcsOperationResult<K>> {
      const id = await enqueueVcsTask(ctx, { ...target, task: { kind: "operation", operation } });
      const { result } = await awaitVcsTask(ctx, id, options.signal);
      const schema: z.ZodType = vcsOperationResultSchemas[operation.op];
      return schema.parse(result) as VcsOperationResult<K>;
    },
    gitToken: () =>
      Promise.reject(
        new DroverError("bad_request", "the git credential of a connection through VCS agents stays with the agents"),
      ),
  };
}

/** One commit wanted for a workspace, and what decides whether it is wanted. */
export interface CommitWanted {
  repository: string;
  branch: string;
  sha: string;
  /** The workspace (id) the configuration version belongs to. */
  workspaceId: string;
  since: string | null;
  triggerPaths: string[];
  workingDirectory: string;
  limits: ArchiveLimits;
  signal?: AbortSignal | undefined;
}

export type FetchedCommit = { configurationVersion: ConfigurationVersion; source: RunSource };

/** What the poller (and the webhook handling) asks of a connection, wherever its VCS is reached from. */
export interface VcsReach {
  /** Strings that must never show in a message (the server's own credential; none through a pool). */
  secrets: string[];
  /** The connection's VCS API: straight from the server, or through its VCS agents. */
  client: VcsClient;
  branchHead(repository: string, branch: string, signal?: AbortSignal): Promise<string | null>;
  /** The commit as a configuration version; null when its changed files trigger nothing. */
  fetch(input: CommitWanted): Promise<FetchedCommit | null>;
}

export interface ReachOptions {
  /** How long a VCS agent's task may take. */
  agentTaskMs: number;
  /** Makes the client of a connection the server reaches itself. */
  client: (endpoint: VcsEndpoint) => VcsClient;
  /** Deadlines of the server's own git calls. */
  deadlines?: GitDeadlines | undefined;
  /** Where git calls make their directories (`<data dir>/vcs-work`); the OS's temp dir by default. */
  workDir?: string | undefined;
}

/** How the server reaches a connection: directly, or through its VCS agent pool. */
export async function vcsReach(ctx: StoreContext, connectionId: string, options: ReachOptions): Promise<VcsReach> {
  const route = await vcsRoute(ctx, connectionId);
  if (route.via === "server") {
    const { access, secrets } = await serverGitAccess(route.endpoint, options.client);
    return {
      secrets,
      client: options.client(route.endpoint),
      branchHead: (repository, branch, signal) =>
        branchHead(access, repository, branch, { deadlines: options.deadlines, workDir: options.workDir, signal }),
      fetch: (input) =>
        fetchCommit(ctx, {
          access,
          repository: input.repository,
          branch: input.branch,
          sha: input.sha,
          workspace: input.workspaceId,
          limits: input.limits,
          deadlines: options.deadlines,
          workDir: options.workDir,
          signal: input.signal,
          wanted: {
            since: input.since,
            given: (changed) => commitTriggers(changed, input.triggerPaths, input.workingDirectory),
          },
        }),
    };
  }
  const target = { poolId: route.poolId, connectionId: route.connectionId, deadlineMs: options.agentTaskMs };
  const client = relayClient(ctx, target);
  return {
    secrets: [],
    client,
    branchHead: async (repository, branch, signal) =>
      (await client.run({ op: "branchHead", repository, branch }, { signal })).sha,
    fetch: (input) => relayFetch(ctx, target, input),
  };
}

/** Fetches a commit through a VCS agent, which uploads the archive the server checks and stores. */
async function relayFetch(ctx: StoreContext, target: RelayTarget, input: CommitWanted): Promise<FetchedCommit | null> {
  const id = await enqueueVcsTask(ctx, {
    ...target,
    workspaceId: input.workspaceId,
    task: {
      kind: "fetch",
      fetch: {
        repository: input.repository,
        sha: input.sha,
        since: input.since,
        triggerPaths: input.triggerPaths,
        workingDirectory: input.workingDirectory,
        maxBytes: input.limits.maxCompressedBytes,
      },
    },
  });
  const outcome = await awaitVcsTask(ctx, id, input.signal);
  const result = vcsFetchResultSchema.parse(outcome.result);
  if (!result.wanted || outcome.configurationVersionId === null) return null;
  return {
    configurationVersion: await getConfigurationVersion(ctx, outcome.configurationVersionId),
    source: {
      repository: input.repository,
      branch: input.branch,
      commitSha: input.sha,
      message: escapeControlChars(result.message.split("\n")[0] ?? "").slice(0, 500),
      author: escapeControlChars(result.author).slice(0, 300),
    },
  };
}

/**
 * How git reaches a connection the server reaches itself: its token, or a GitHub App's current
 * installation token; with the strings no message may show.
 */
export async function serverGitAccess(
  endpoint: VcsEndpoint,
  client: (endpoint: VcsEndpoint) => VcsClient,
  signal?: AbortSignal,
): Promise<{ access: GitAccess; secrets: string[] }> {
  const appKey = endpoint.auth.kind === "github-app" ? [endpoint.auth.privateKey] : [];
  const token = await client(endpoint).gitToken(signal ? { signal } : {});
  const access = { provider: endpoint.provider, url: endpoint.url, token };
  return { access, secrets: [...appKey, ...secretsOf(access)] };
}

/** The client of a connection's VCS API: straight from the server, or the relay of its VCS agent pool. */
export async function connectionClient(
  ctx: StoreContext,
  connectionId: string,
  options: Pick<ReachOptions, "agentTaskMs" | "client">,
): Promise<VcsClient> {
  const route = await vcsRoute(ctx, connectionId);
  if (route.via === "server") return options.client(route.endpoint);
  return relayClient(ctx, { poolId: route.poolId, connectionId: route.connectionId, deadlineMs: options.agentTaskMs });
}
