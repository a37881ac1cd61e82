import { branchProblem, repositoryProblem, type VcsProvider } from "@drover/protocol";
import { createHash, createHmac, timingSafeEqual } from "node:crypto";
import type { IncomingHttpHeaders } from "node:http";

/*
 * A webhook delivery as the processor acts on it: checked against the connection's secret, then
 * reduced from the provider's payload to the few fields that start runs. Anything else in the
 * payload is ignored; every field kept is checked like user input, since it ends up in git calls.
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

/**
 * Whether the headers may carry the connection's proof, checked before the body is read: GitLab's
 * token whole, GitHub's signature in its form (its HMAC needs the body).
 */
export function headersMayProve(provider: VcsProvider, secret: string, headers: IncomingHttpHeaders): boolean {
  return provider === "github"
    ? signatureOf(headers) !== undefined
    : verifyDelivery(provider, secret, headers, Buffer.alloc(0));
}

function signatureOf(headers: IncomingHttpHeaders): Buffer | undefined {
  const match = /^sha256=([0-9a-f]{64})$/i.exec(headerOf(headers, "x-hub-signature-256") ?? "");
  return match ? Buffer.from(match[1]!, "hex") : undefined;
}

/** Whether the delivery carries the connection's proof: GitHub's HMAC of the raw body, or GitLab's token. */
export function verifyDelivery(
  provider: VcsProvider,
  secret: string,
  headers: IncomingHttpHeaders,
  body: Buffer,
): boolean {
  if (provider === "github") {
    const given = signatureOf(headers);
    return given !== undefined && timingSafeEqual(createHmac("sha256", secret).update(body).digest(), given);
  }
  const given = headerOf(headers, "x-gitlab-token");
  if (given === undefined) return false;
  // Digests of both: equal lengths, so the comparison takes the same time whatever was sent.
  const digest = (s: string) => createHash("sha256").update(s, "utf8").digest();
  return timingSafeEqual(digest(given), digest(secret));
}

function headerOf(headers: IncomingHttpHeaders, name: string): string | undefined {
  const v = headers[name];
  return Array.isArray(v) ? v[0] : v;
}

const printable = /^[\x21-\x7e]{1,200}$/;

/**
 * The provider's delivery id (a replay carries the same one) and event name. A GitLab without
 * an event UUID: the body's digest, so a replay of the same body is still one delivery.
 */
export function deliveryHeaders(
  provider: VcsProvider,
  headers: IncomingHttpHeaders,
  body: Buffer,
): { deliveryId: string; event: string } {
  const pick = (...names: string[]) => names.map((n) => headerOf(headers, n)).find((v) => v !== undefined);
  const id =
    provider === "github"
      ? pick("x-github-delivery")
      : pick("x-gitlab-event-uuid", "idempotency-key", "x-gitlab-webhook-uuid");
  const event = (provider === "github" ? pick("x-github-event") : pick("x-gitlab-event")) ?? "unknown";
  return {
    deliveryId:
      id !== undefined && printable.test(id) ? id : `sha256:${createHash("sha256").update(body).digest("hex")}`,
    event: event.replace(/[^\x20-\x7e]/g, "").slice(0, 100) || "unknown",
  };
}

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

/** A push's changed files from its commits, or null when the payload cannot list all of them. */
function pushedFiles(commits: unknown, complete: boolean): string[] | null {
  if (!complete || !Array.isArray(commits) || commits.length === 0) return null;
  const files = new Set<string>();
  for (const c of commits) {
    for (const key of ["added", "modified", "removed"]) {
      const list = obj(c)[key];
      if (!Array.isArray(list)) return null;
      for (const f of list) if (typeof f === "string") files.add(f);
    }
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
    const commits = Array.isArray(p.commits) ? p.commits : [];
    // GitLab lists the newest 20 commits; total_commits_count says how many there were.
    const complete = typeof p.total_commits_count === "number" && p.total_commits_count === commits.length;
    return push(event, repository, p, complete);
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
