import { Gitlab } from "@gitbeaker/rest";
import { hasMarker, markedBody, markedCommentPages } from "./comment-marker.js";
import { failureReason, isTimeout, vcsApiError } from "./api-errors.js";
import { gitlabAccess } from "./gitlab-endpoint.js";
import { dispatch, type OperationHandlers, type VcsClient, type VcsEndpoint } from "./operations.js";
import { vcsDispatcher } from "./proxy.js";

/*
 * The VCS operations against GitLab (gitlab.com or self-managed) through Gitbeaker. The API base
 * is the endpoint's own `/api/v4` URL; a project path is one URL-encoded segment (Gitbeaker
 * encodes every value it puts in a path), so no field of an operation can reach another route.
 */

const gitlabState = { pending: "pending", success: "success", failure: "failed", error: "failed" } as const;

function statusOf(err: unknown): number | undefined {
  const cause = (err as { cause?: { response?: { status?: unknown } } }).cause;
  const s = cause?.response?.status;
  return typeof s === "number" ? s : undefined;
}

/** `work`, failing when `signal` aborts first (Gitbeaker takes only a per-client deadline). */
function within<T>(work: Promise<T>, signal: AbortSignal | undefined): Promise<T> {
  if (!signal) return work;
  return new Promise<T>((resolve, reject) => {
    const onAbort = () => reject(Object.assign(new Error("stopped"), { name: "AbortError" }));
    if (signal.aborted) return onAbort();
    signal.addEventListener("abort", onAbort, { once: true });
    work.then(resolve, reject).finally(() => signal.removeEventListener("abort", onAbort));
  });
}

export function gitlabClient(endpoint: VcsEndpoint, options: { deadlineMs: number }): VcsClient {
  const { host, token } = gitlabAccess(endpoint);
  const api = new Gitlab({
    host,
    token,
    queryTimeout: options.deadlineMs,
    // Typed as an http.Agent, but gitbeaker hands it to fetch as its dispatcher.
    agent: vcsDispatcher() as never,
  });

  async function call<T>(operation: string, signal: AbortSignal | undefined, work: () => Promise<T>): Promise<T> {
    try {
      return await within(work(), signal);
    } catch (err) {
      const reason = failureReason(err, statusOf(err) !== undefined);
      throw vcsApiError({
        provider: "gitlab",
        operation,
        status: statusOf(err),
        reason,
        secrets: [token],
        timedOut: statusOf(err) === undefined && isTimeout(err),
      });
    }
  }

  /** The oldest note of the merge request carrying the operation's marker, or null. */
  async function markedNote(op: { repository: string; number: number }, marker: string): Promise<number | null> {
    const notes = await api.MergeRequestNotes.all(op.repository, op.number, {
      sort: "asc",
      orderBy: "created_at",
      perPage: 100,
      maxPages: markedCommentPages,
    });
    return notes.find((n) => hasMarker(n.body, marker))?.id ?? null;
  }

  const handlers: OperationHandlers = {
    branchHead: (op, signal) =>
      call("branchHead", signal, async () => {
        try {
          const branch = await api.Branches.show(op.repository, op.branch);
          return { sha: String(branch.commit.id) };
        } catch (err) {
          // GitLab says which is missing: "404 Branch Not Found" or "404 Project Not Found".
          if (statusOf(err) === 404 && /branch/i.test(err instanceof Error ? err.message : "")) return { sha: null };
          throw err;
        }
      }),
    commit: (op, signal) =>
      call("commit", signal, async () => {
        const c = await api.Commits.show(op.repository, op.sha);
        return {
          sha: c.id,
          message: (c.message ?? c.title ?? "").split("\n")[0] ?? "",
          author: `${c.author_name ?? ""} <${c.author_email ?? ""}>`,
        };
      }),
    changedFiles: (op, signal) =>
      call("changedFiles", signal, async () => {
        // From the merge base (GitLab's default), as GitHub's three-dot compare: a merge request's own changes.
        const cmp = await api.Repositories.compare(op.repository, op.base, op.head, { straight: false });
        if (cmp.compare_timeout === true || !Array.isArray(cmp.diffs)) return { files: null };
        const files = new Set<string>();
        for (const d of cmp.diffs) for (const p of [d.new_path, d.old_path]) if (typeof p === "string") files.add(p);
        return { files: [...files] };
      }),
    setCommitStatus: (op, signal) =>
      call("setCommitStatus", signal, async () => {
        try {
          await api.Commits.editStatus(op.repository, op.sha, gitlabState[op.state], {
            name: op.context,
            description: op.description,
            targetUrl: op.targetUrl,
          });
        } catch (err) {
          // GitLab refuses to set the state a status already has; it is set.
          if (!(statusOf(err) === 400 && /cannot transition status/i.test(err instanceof Error ? err.message : "")))
            throw err;
        }
        return {};
      }),
    upsertPullRequestComment: (op, signal) =>
      call("upsertPullRequestComment", signal, async () => {
        const body = markedBody(op.body, op.marker);
        const noteId = op.commentId ?? (op.marker === undefined ? null : await markedNote(op, op.marker));
        if (noteId !== null) {
          try {
            const note = await api.MergeRequestNotes.edit(op.repository, op.number, noteId, { body });
            return { commentId: note.id };
          } catch (err) {
            if (statusOf(err) !== 404) throw err;
          }
        }
        const note = await api.MergeRequestNotes.create(op.repository, op.number, body);
        return { commentId: note.id };
      }),
    createWebhook: (op, signal) =>
      call("createWebhook", signal, async () => {
        const hook = await api.ProjectHooks.add(op.repository, op.url, {
          pushEvents: true,
          mergeRequestsEvents: true,
          token: op.secret,
          enableSslVerification: true,
        });
        return { webhookId: hook.id };
      }),
    deleteWebhook: (op, signal) =>
      call("deleteWebhook", signal, async () => {
        try {
          await api.ProjectHooks.remove(op.repository, op.webhookId);
        } catch (err) {
          if (statusOf(err) !== 404) throw err;
        }
        return {};
      }),
  };

  return {
    run: dispatch(handlers),
    gitToken: async () => token,
  };
}
