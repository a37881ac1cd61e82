import {
  DroverError,
  messageOf,
  vcsTaskSchema,
  type ErrorCode,
  type VcsFetchResult,
  type VcsOperation,
  type VcsTask,
  type VcsTaskEnvelope,
} from "@drover/protocol";
import {
  branchHead,
  commitTriggers,
  fetchCommitArchive,
  redact,
  secretsOf,
  type GitAccess,
  type GitDeadlines,
  type VcsClient,
} from "@drover/vcs";
import type { AgentVcsConnection } from "./config.js";

/*
 * What a VCS agent does with one task. The task is checked against the closed schemas here too,
 * whatever the server sent: anything else is refused, never attempted. Every URL is built from
 * the connection's own configured base; the task supplies only a repository path and shas that
 * match strict patterns. Every message leaving here has the connection's credentials removed.
 */

/** How a task ends: a result for the server to check, or an error (with its code, when it has one). */
export type TaskEnd = { result: unknown } | { error: string; code?: ErrorCode };

/** What a task needs from the agent around it. */
export interface TaskContext {
  connections: ReadonlyMap<string, AgentVcsConnection>;
  /** The provider API client of a connection (octokit or gitbeaker); none: only git operations run. */
  clientFor?: ((connection: string, endpoint: AgentVcsConnection) => VcsClient) | undefined;
  /** Sends a fetch's archive to the server (the task's upload route). */
  upload(task: VcsTask, archive: Buffer, signal: AbortSignal): Promise<void>;
  deadlines?: GitDeadlines | undefined;
  /** Where git calls make their directories (`<data dir>/vcs-work`); the OS's temp dir by default. */
  workDir?: string | undefined;
  signal: AbortSignal;
}

/** The task checked against the closed schemas, or why it is refused. */
export function checkedTask(raw: VcsTaskEnvelope): { task: VcsTask } | { refused: string } {
  const parsed = vcsTaskSchema.safeParse(raw);
  if (parsed.success) return { task: parsed.data };
  const why = parsed.error.issues.map((i) => `${i.path.join(".") || "(task)"}: ${i.message}`).join("; ");
  return { refused: `refused: not one of the VCS operations this agent runs (${why})` };
}

/** Runs a checked task; never throws (an error is the task's end). */
export async function runTask(task: VcsTask, ctx: TaskContext): Promise<TaskEnd> {
  const endpoint = ctx.connections.get(task.connection);
  if (!endpoint)
    return {
      error: `this VCS agent has no connection named ${task.connection} in its DROVER_AGENT_VCS_CONNECTIONS_FILE`,
      code: "not_found",
    };
  const secrets = [
    ...(endpoint.auth.kind === "token" ? [endpoint.auth.token] : [endpoint.auth.privateKey]),
    ...(endpoint.webhookSecret ? [endpoint.webhookSecret] : []),
  ];
  try {
    const access = await gitAccess(task.connection, endpoint, ctx);
    secrets.push(...secretsOf(access));
    if (task.kind === "fetch") return { result: await fetchTask(task, access, ctx) };
    return { result: await operation(task.operation, task.connection, endpoint, access, ctx) };
  } catch (err) {
    const code = err instanceof DroverError ? err.code : undefined;
    return { error: redact(messageOf(err), secrets), ...(code ? { code } : {}) };
  }
}

/** What git fetches with: the connection's token, or a GitHub App's current installation token. */
async function gitAccess(connection: string, endpoint: AgentVcsConnection, ctx: TaskContext): Promise<GitAccess> {
  const { provider, url, auth } = endpoint;
  if (auth.kind === "token") return { provider, url, token: auth.token };
  if (!ctx.clientFor) throw new DroverError("bad_request", "this VCS agent has no provider API client to mint a token");
  return { provider, url, token: await ctx.clientFor(connection, endpoint).gitToken({ signal: ctx.signal }) };
}

async function operation(
  op: VcsOperation,
  connection: string,
  endpoint: AgentVcsConnection,
  access: GitAccess,
  ctx: TaskContext,
): Promise<unknown> {
  // A branch's head needs no provider API: git answers it, as the server's own poller asks it.
  if (op.op === "branchHead")
    return {
      sha: await branchHead(access, op.repository, op.branch, {
        deadlines: ctx.deadlines,
        workDir: ctx.workDir,
        signal: ctx.signal,
      }),
    };
  if (!ctx.clientFor) throw new DroverError("bad_request", `this VCS agent has no provider API client for ${op.op}`);
  return ctx.clientFor(connection, endpoint).run(op, { signal: ctx.signal });
}

async function fetchTask(
  task: Extract<VcsTask, { kind: "fetch" }>,
  access: GitAccess,
  ctx: TaskContext,
): Promise<VcsFetchResult> {
  const f = task.fetch;
  const fetched = await fetchCommitArchive({
    access,
    repository: f.repository,
    sha: f.sha,
    maxBytes: f.maxBytes,
    deadlines: ctx.deadlines,
    workDir: ctx.workDir,
    signal: ctx.signal,
    wanted: { since: f.since, given: (changed) => commitTriggers(changed, f.triggerPaths, f.workingDirectory) },
  });
  if (fetched === null) return { wanted: false, author: "", message: "" };
  await ctx.upload(task, fetched.archive, ctx.signal);
  return { wanted: true, author: fetched.author.slice(0, 1000), message: fetched.message.slice(0, 10_000) };
}
