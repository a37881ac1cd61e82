import { Octokit } from "@octokit/rest";
import { createAppAuth } from "@octokit/auth-app";
import { hasMarker, markedBody, markedCommentPages } from "./comment-marker.js";
import { deadlineSignal, failureReason, isTimeout, untilAborted, vcsApiError } from "./api-errors.js";
import { dispatch, type OperationHandlers, type VcsClient, type VcsEndpoint } from "./operations.js";
import { vcsFetch } from "./proxy.js";

/*
 * The VCS operations against GitHub (github.com or a GitHub Enterprise Server) through Octokit.
 * Requests go to the endpoint's API base only: every operation's fields are schema-checked
 * before they get here, and Octokit encodes each one as a path segment. A GitHub App mints
 * installation tokens from its key (cached by the auth library until shortly before they expire).
 */

const silent = { debug: () => {}, info: () => {}, warn: () => {}, error: () => {} };

// GitHub lists at most this many files of a comparison; with as many, some may be missing.
const compareFileLimit = 300;

function ownerRepo(repository: string): { owner: string; repo: string } {
  const [owner = "", repo = ""] = repository.split("/");
  return { owner, repo };
}

function statusOf(err: unknown): number | undefined {
  // Octokit gives a request that got no answer (refused, reset, a proxy's refusal) status 500 too.
  if ((err as { response?: unknown }).response === undefined) return undefined;
  const s = (err as { status?: unknown }).status;
  return typeof s === "number" && s >= 100 ? s : undefined;
}

/** The oldest comment of the pull request carrying the operation's marker, or null. */
async function markedComment(
  o: Octokit,
  op: { repository: string; number: number },
  marker: string,
  signal: AbortSignal,
): Promise<number | null> {
  const pages = o.paginate.iterator(o.rest.issues.listComments, {
    ...ownerRepo(op.repository),
    issue_number: op.number,
    per_page: 100,
    request: { signal },
  });
  let read = 0;
  for await (const { data } of pages) {
    const found = data.find((c) => hasMarker(c.body, marker));
    if (found) return found.id;
    if (++read >= markedCommentPages) break;
  }
  return null;
}

export function githubClient(endpoint: VcsEndpoint, options: { deadlineMs: number }): VcsClient {
  const secrets = new Set<string>();
  const auth = endpoint.auth;
  if (auth.kind === "token") secrets.add(auth.token);
  else secrets.add(auth.privateKey);
  const mintFetch = ((input: Parameters<typeof fetch>[0], init?: RequestInit) =>
    vcsFetch(input, {
      ...init,
      signal: deadlineSignal(options.deadlineMs, init?.signal ?? undefined),
    })) as typeof fetch;
  const appAuth =
    auth.kind === "github-app"
      ? createAppAuth({
          appId: auth.appId,
          privateKey: auth.privateKey,
          installationId: auth.installationId,
          // Unauthenticated: the app authenticates the token request itself with its JWT. The auth
          // library passes no caller's signal on to this request, so it carries its own deadline.
          request: new Octokit({ baseUrl: endpoint.apiUrl, log: silent, request: { fetch: mintFetch } }).request,
          log: silent,
        })
      : undefined;

  async function token(signal: AbortSignal): Promise<string> {
    if (auth.kind === "token") return auth.token;
    const minted = await untilAborted(appAuth!({ type: "installation" }), signal);
    secrets.add(minted.token);
    return minted.token;
  }

  async function call<T>(
    operation: string,
    outer: AbortSignal | undefined,
    work: (o: Octokit, s: AbortSignal) => Promise<T>,
  ) {
    const signal = deadlineSignal(options.deadlineMs, outer);
    try {
      const octokit = new Octokit({
        baseUrl: endpoint.apiUrl,
        auth: await token(signal),
        log: silent,
        request: { fetch: vcsFetch },
      });
      return await work(octokit, signal);
    } catch (err) {
      throw vcsApiError({
        provider: "github",
        operation,
        status: statusOf(err),
        reason: failureReason(err, statusOf(err) !== undefined),
        secrets: [...secrets],
        timedOut: timedOut(signal, err),
      });
    }
  }

  const handlers: OperationHandlers = {
    branchHead: (op, outer) =>
      call("branchHead", outer, async (o, signal) => {
        try {
          const { data } = await o.rest.repos.getBranch({
            ...ownerRepo(op.repository),
            branch: op.branch,
            request: { signal },
          });
          return { sha: data.commit.sha };
        } catch (err) {
          if (statusOf(err) === 404 && (await repositoryExists(o, op.repository, signal))) return { sha: null };
          throw err;
        }
      }),
    commit: (op, outer) =>
      call("commit", outer, async (o, signal) => {
        const { data } = await o.rest.repos.getCommit({
          ...ownerRepo(op.repository),
          ref: op.sha,
          request: { signal },
        });
        const a = data.commit.author;
        return {
          sha: data.sha,
          message: data.commit.message.split("\n")[0] ?? "",
          author: a ? `${a.name ?? ""} <${a.email ?? ""}>` : "",
        };
      }),
    changedFiles: (op, outer) =>
      call("changedFiles", outer, async (o, signal) => {
        const { data } = await o.rest.repos.compareCommitsWithBasehead({
          ...ownerRepo(op.repository),
          basehead: `${op.base}...${op.head}`,
          per_page: compareFileLimit,
          request: { signal },
        });
        const files = (data.files ?? []).flatMap((f) =>
          f.previous_filename ? [f.filename, f.previous_filename] : [f.filename],
        );
        return { files: (data.files?.length ?? 0) >= compareFileLimit ? null : files };
      }),
    setCommitStatus: (op, outer) =>
      call("setCommitStatus", outer, async (o, signal) => {
        await o.rest.repos.createCommitStatus({
          ...ownerRepo(op.repository),
          sha: op.sha,
          state: op.state,
          context: op.context,
          description: op.description,
          target_url: op.targetUrl,
          request: { signal },
        });
        return {};
      }),
    upsertPullRequestComment: (op, outer) =>
      call("upsertPullRequestComment", outer, async (o, signal) => {
        const where = ownerRepo(op.repository);
        const body = markedBody(op.body, op.marker);
        const commentId =
          op.commentId ?? (op.marker === undefined ? null : await markedComment(o, op, op.marker, signal));
        if (commentId !== null) {
          try {
            const { data } = await o.rest.issues.updateComment({
              ...where,
              comment_id: commentId,
              body,
              request: { signal },
            });
            return { commentId: data.id };
          } catch (err) {
            // Deleted by someone: a new comment takes its place.
            if (statusOf(err) !== 404) throw err;
          }
        }
        const { data } = await o.rest.issues.createComment({
          ...where,
          issue_number: op.number,
          body,
          request: { signal },
        });
        return { commentId: data.id };
      }),
    createWebhook: (op, outer) =>
      call("createWebhook", outer, async (o, signal) => {
        const { data } = await o.rest.repos.createWebhook({
          ...ownerRepo(op.repository),
          name: "web",
          active: true,
          events: ["push", "pull_request"],
          config: { url: op.url, content_type: "json", secret: op.secret, insecure_ssl: "0" },
          request: { signal },
        });
        return { webhookId: data.id };
      }),
    deleteWebhook: (op, outer) =>
      call("deleteWebhook", outer, async (o, signal) => {
        try {
          await o.rest.repos.deleteWebhook({ ...ownerRepo(op.repository), hook_id: op.webhookId, request: { signal } });
        } catch (err) {
          // Already gone is what was asked for.
          if (statusOf(err) !== 404) throw err;
        }
        return {};
      }),
  };

  return {
    run: dispatch(handlers),
    gitToken: async (opts) => {
      const signal = deadlineSignal(options.deadlineMs, opts?.signal);
      try {
        return await token(signal);
      } catch (err) {
        throw vcsApiError({
          provider: "github",
          operation: "installation token",
          status: statusOf(err),
          reason: failureReason(err, statusOf(err) !== undefined),
          secrets: [...secrets],
          timedOut: timedOut(signal, err),
        });
      }
    },
  };
}

/**
 * Whether a call got no answer in time: its own deadline passed, or the installation token it
 * waited for did (the auth library shares one token request among the calls that need it).
 */
function timedOut(signal: AbortSignal, err: unknown): boolean {
  return (signal.aborted && isTimeout(signal.reason)) || (statusOf(err) === undefined && isTimeout(err));
}

/** Whether the repository is visible: GitHub answers 404 for a missing branch and a missing repository alike. */
async function repositoryExists(o: Octokit, repository: string, signal: AbortSignal): Promise<boolean> {
  try {
    await o.rest.repos.get({ ...ownerRepo(repository), request: { signal } });
    return true;
  } catch (err) {
    if (statusOf(err) === 404) return false;
    throw err;
  }
}
