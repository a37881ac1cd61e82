import { branchProblem, repositoryProblem, type VcsProvider } from "@drover/protocol";

/*
 * A webhook delivery as the processor acts on it, once checked against the connection's secret
 * (@drover/vcs's webhook-delivery.ts): reduced from the provider's payload to the few fields that
 * start runs. Anything else in the payload is ignored; every field kept is checked like user
 * input, since it ends up in git calls.
 */

/** A push to a branch; `files` are the changed paths when the payload lists all of them. */
export interface PushEvent {
  kind: "push";
  repository: string;
  branch: string;
  before: string | null;
  after: string;
  files: string[] | null;
}

/** A pull (merge) request opened, reopened or given new commits. */
export interface PullRequestEvent {
  kind: "pull_request";
  repository: string;
  /** The branch it would merge into: the linked branch. */
  baseBranch: string;
  /** The tip of the base branch the provider compared with, when the payload says. */
  baseSha: string | null;
  headBranch: string;
  headSha: string;
  number: number;
  url: string;
}

export interface IgnoredEvent {
  kind: "ignored";
  repository: string | null;
  reason: string;
}

export type WebhookEvent = PushEvent | PullRequestEvent | IgnoredEvent;

type Json = Record<string, unknown>;
const obj = (v: unknown): Json => (typeof v === "object" && v !== null && !Array.isArray(v) ? (v as Json) : {});
const str = (v: unknown): string | undefined => (typeof v === "string" ? v : undefined);
const sha = (v: unknown): string | undefined => {
  const s = str(v);
  return s !== undefined && /^[0-9a-f]{40}$/.test(s) ? s : undefined;
};
const zero = "0".repeat(40);

/** The event a delivery's body describes, with its name as the deliveries list shows it. */
export function parseEvent(
  provider: VcsProvider,
  event: string,
  body: Buffer,
): { event: string; parsed: WebhookEvent } {
  let payload: Json;
  try {
    payload = obj(JSON.parse(body.toString("utf8")));
  } catch {
    return { event, parsed: { kind: "ignored", repository: null, reason: "the body is not JSON" } };
  }
  return provider === "github" ? github(event, payload) : gitlab(event, payload);
}

function ignored(event: string, repository: string | null, reason: string) {
  return { event, parsed: { kind: "ignored" as const, repository, reason } };
}

function checkedRepository(provider: VcsProvider, repo: string | undefined): string | null {
  return repo !== undefined && repositoryProblem(provider, repo) === null ? repo : null;
}

/**
 * GitHub reports at most this many changed files of one commit, and none at all for a commit too
 * large to list in time: a commit listing none, or this many, may have changed others.
 */
const commitFileLimit = 3000;

/** A push's changed files from its commits, or null when the payload cannot list all of them. */
function pushedFiles(commits: unknown, complete: boolean): string[] | null {
  if (!complete || !Array.isArray(commits) || commits.length === 0) return null;
  const files = new Set<string>();
  for (const c of commits) {
    let listed = 0;
    for (const key of ["added", "modified", "removed"]) {
      const list = obj(c)[key];
      if (!Array.isArray(list)) return null;
      listed += list.length;
      for (const f of list) if (typeof f === "string") files.add(f);
    }
    if (listed === 0 || listed >= commitFileLimit) return null;
  }
  return [...files];
}

function push(
  event: string,
  repository: string | null,
  p: Json,
  complete: boolean,
): { event: string; parsed: WebhookEvent } {
  if (repository === null) return ignored(event, null, "the payload names no repository Drover can use");
  const ref = str(p.ref) ?? "";
  if (!ref.startsWith("refs/heads/")) return ignored(event, repository, `a push to ${ref || "no ref"}, not a branch`);
  const branch = ref.slice("refs/heads/".length);
  if (branchProblem(branch) !== null) return ignored(event, repository, "the pushed branch name is not valid");
  const after = sha(p.after);
  if (after === undefined || after === zero) return ignored(event, repository, `branch ${branch} was deleted`);
  const before = sha(p.before);
  const created = before === undefined || before === zero;
  return {
    event,
    parsed: {
      kind: "push",
      repository,
      branch,
      before: created ? null : before,
      after,
      files: created ? null : pushedFiles(p.commits, complete),
    },
  };
}

function github(event: string, p: Json): { event: string; parsed: WebhookEvent } {
  const repository = checkedRepository("github", str(obj(p.repository).full_name));
  if (event === "push") {
    // GitHub lists at most 20 commits (and none when it cannot): then git compares the trees.
    const commits = Array.isArray(p.commits) ? p.commits : [];
    return push(event, repository, p, p.forced !== true && commits.length < 20);
  }
  if (event !== "pull_request") return ignored(event, repository, `a ${event} event starts no run`);
  const action = str(p.action) ?? "";
  const named = `pull_request.${action.replace(/[^a-z_]/g, "")}`;
  if (!["opened", "reopened", "synchronize"].includes(action))
    return ignored(
      named,
      repository,
      action === "closed"
        ? "a closed pull request starts no run (a merge is followed by its push)"
        : `pull request action ${action} starts no run`,
    );
  const pr = obj(p.pull_request);
  const base = obj(pr.base);
  const head = obj(pr.head);
  const baseRepository = checkedRepository("github", str(obj(base.repo).full_name)) ?? repository;
  // A deleted fork's pull request has no head repository: it is no less another repository's code.
  const fork = foreignHead(baseRepository, checkedRepository("github", str(obj(head.repo).full_name)));
  if (fork !== null) return ignored(named, baseRepository, fork);
  return pullRequest(named, {
    repository: baseRepository,
    baseBranch: str(base.ref),
    baseSha: sha(base.sha) ?? null,
    headBranch: str(head.ref),
    headSha: sha(head.sha),
    number: typeof pr.number === "number" ? pr.number : p.number,
    url: str(pr.html_url),
  });
}

function gitlab(event: string, p: Json): { event: string; parsed: WebhookEvent } {
  const project = obj(p.project);
  if (event === "Push Hook") {
    const repository = checkedRepository("gitlab", str(project.path_with_namespace));
    // GitLab lists the commits new to the branch: after a force push, not those it dropped, whose
    // changes are undone too. Nothing in the payload tells a force push, so git compares the trees.
    return push(event, repository, p, false);
  }
  const repository = checkedRepository("gitlab", str(project.path_with_namespace));
  if (event !== "Merge Request Hook") return ignored(event, repository, `a ${event} starts no run`);
  const mr = obj(p.object_attributes);
  const action = str(mr.action) ?? "";
  const named = `${event}.${action.replace(/[^a-z_]/g, "")}`;
  // An update without oldrev changed the title, labels or the like: no new code to plan.
  const newCode = action === "open" || action === "reopen" || (action === "update" && sha(mr.oldrev) !== undefined);
  if (!newCode)
    return ignored(
      named,
      repository,
      action === "merge"
        ? "a merged merge request starts no run (a merge is followed by its push)"
        : action === "update"
          ? "a merge request update without new commits starts no run"
          : `merge request action ${action || "(none)"} starts no run`,
    );
  const target = checkedRepository("gitlab", str(obj(mr.target).path_with_namespace)) ?? repository;
  const fork = foreignHead(target, checkedRepository("gitlab", str(obj(mr.source).path_with_namespace)));
  if (fork !== null) return ignored(named, target, fork);
  return pullRequest(named, {
    repository: target,
    baseBranch: str(mr.target_branch),
    baseSha: null,
    headBranch: str(mr.source_branch),
    headSha: sha(obj(mr.last_commit).id),
    number: mr.iid,
    url: str(mr.url),
  });
}

/**
 * Why a pull (merge) request from another repository (a fork) plans nothing, or null for one
 * from the linked repository itself: its plan would run that repository's code, written by anyone
 * who can fork, with the workspace's variables and credentials.
 */
function foreignHead(base: string | null, head: string | null): string | null {
  // No base: pullRequest refuses the payload. Repository paths are case-insensitive on both providers.
  if (base === null || (head !== null && head.toLowerCase() === base.toLowerCase())) return null;
  const from = head ?? "a deleted fork, or one not named";
  return `a pull request from another repository (${from}) starts no run: its code would run with the workspace's variables`;
}

function pullRequest(
  event: string,
  f: {
    repository: string | null;
    baseBranch: string | undefined;
    baseSha: string | null;
    headBranch: string | undefined;
    headSha: string | undefined;
    number: unknown;
    url: string | undefined;
  },
): { event: string; parsed: WebhookEvent } {
  if (f.repository === null) return ignored(event, null, "the payload names no repository Drover can use");
  const number = f.number;
  if (
    f.baseBranch === undefined ||
    branchProblem(f.baseBranch) !== null ||
    f.headSha === undefined ||
    typeof number !== "number" ||
    !Number.isSafeInteger(number) ||
    number <= 0
  )
    return ignored(event, f.repository, "the payload lacks the pull request's number, base branch or head commit");
  const url = f.url !== undefined && /^https?:\/\/[\x21-\x7e]{1,500}$/.test(f.url) ? f.url : "";
  const headBranch = f.headBranch !== undefined && branchProblem(f.headBranch) === null ? f.headBranch : `#${number}`;
  return {
    event,
    parsed: {
      kind: "pull_request",
      repository: f.repository,
      baseBranch: f.baseBranch,
      baseSha: f.baseSha,
      headBranch,
      headSha: f.headSha,
      number,
      url,
    },
  };
}
