import { createHmac, randomUUID } from "node:crypto";
import { readFileSync } from "node:fs";
import { createRequire } from "node:module";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";
import { routes, type VcsDelivery } from "@drover/protocol";
import { routeCall } from "./typed-api.js";

/*
 * Webhook deliveries as GitHub and GitLab send them, built from their published examples (GitHub:
 * the @octokit/webhooks-examples package; GitLab: its documentation's payload examples, stored in
 * test/fixtures/gitlab-webhooks with their source). Only the repository, branch, commit ids and
 * changed files are set to the test repository's; every other field stays as published.
 */

type Json = Record<string, any>;
const clone = <T>(v: T): T => JSON.parse(JSON.stringify(v)) as T;

interface Definition {
  name: string;
  examples: Json[];
}
const githubExamples = createRequire(import.meta.url)("@octokit/webhooks-examples") as Definition[];

function githubExample(name: string, pick: (e: Json) => boolean): Json {
  const example = githubExamples.find((d) => d.name === name)?.examples.find(pick);
  if (!example) throw new Error(`no published ${name} example`);
  return clone(example);
}

const gitlabFixture = (file: string): Json =>
  (
    JSON.parse(
      readFileSync(
        join(dirname(fileURLToPath(import.meta.url)), "..", "..", "fixtures", "gitlab-webhooks", file),
        "utf8",
      ),
    ) as { body: Json }
  ).body;

/** A commit of the test repository as a payload lists it. */
export interface PushedCommit {
  id: string;
  added: string[];
  modified: string[];
  removed: string[];
}

/** GitHub's push event (the published branch push), for `repository` `owner/name`. */
export function githubPush(repository: string, branch: string, before: string, after: string, commits: PushedCommit[]) {
  const e = githubExample("push", (x) => String(x.ref).startsWith("refs/heads/") && x.commits.length > 0);
  const [owner, name] = repository.split("/");
  e.ref = `refs/heads/${branch}`;
  e.before = before;
  e.after = after;
  e.created = /^0+$/.test(before);
  e.repository.full_name = repository;
  e.repository.name = name;
  e.repository.owner.login = owner;
  e.repository.owner.name = owner;
  const template = e.commits[0] as Json;
  e.commits = commits.map((c) => ({ ...clone(template), ...c, tree_id: template.tree_id }));
  e.head_commit = e.commits[e.commits.length - 1];
  return e;
}

/** GitHub's pull_request event of `action` (opened, synchronize, ...). */
export function githubPullRequest(
  action: string,
  repository: string,
  pr: { number: number; base: string; baseSha: string; head: string; headSha: string; url: string },
) {
  const e = githubExample("pull_request", (x) => x.action === action);
  const [owner, name] = repository.split("/");
  e.number = pr.number;
  e.repository.full_name = repository;
  e.repository.name = name;
  e.repository.owner.login = owner;
  const p = e.pull_request as Json;
  p.number = pr.number;
  p.html_url = pr.url;
  p.base.ref = pr.base;
  p.base.sha = pr.baseSha;
  p.base.repo.full_name = repository;
  p.head.ref = pr.head;
  p.head.sha = pr.headSha;
  p.head.repo.full_name = repository;
  if (action === "synchronize") e.after = pr.headSha;
  return e;
}

/** GitLab's Push Hook, for `project` (group/…/project). */
export function gitlabPush(project: string, branch: string, before: string, after: string, commits: PushedCommit[]) {
  const e = gitlabFixture("push-hook.json");
  e.ref = `refs/heads/${branch}`;
  e.before = before;
  e.after = after;
  e.checkout_sha = after;
  e.project.path_with_namespace = project;
  const template = e.commits[0] as Json;
  e.commits = commits.map((c) => ({ ...clone(template), ...c }));
  e.total_commits_count = commits.length;
  return e;
}

/** GitLab's Merge Request Hook of `action` (open, reopen, update); an update with new commits carries oldrev. */
export function gitlabMergeRequest(
  action: string,
  project: string,
  mr: { iid: number; target: string; source: string; lastCommit: string; url: string; oldrev?: string },
) {
  const e = gitlabFixture("merge-request-hook.json");
  e.project.path_with_namespace = project;
  const a = e.object_attributes as Json;
  a.action = action;
  a.iid = mr.iid;
  a.url = mr.url;
  a.target_branch = mr.target;
  a.source_branch = mr.source;
  a.target.path_with_namespace = project;
  a.source.path_with_namespace = project;
  a.last_commit.id = mr.lastCommit;
  if (mr.oldrev !== undefined) a.oldrev = mr.oldrev;
  return e;
}

export interface Delivery {
  provider: "github" | "gitlab";
  event: string;
  body: Json | Buffer;
  /** The connection's webhook secret; undefined sends no proof. */
  secret: string | undefined;
  deliveryId?: string;
  /** Sign with this instead of `secret` (a wrong secret). */
  signWith?: string;
  /** Sign these bytes instead of the body sent (a body changed in transit). */
  signedBody?: Buffer;
}

/** POSTs a delivery to a connection's webhook route as the provider would; returns the status and the parsed body. */
export async function deliver(
  baseUrl: string,
  connection: string,
  d: Delivery,
): Promise<{ status: number; body: any; deliveryId: string }> {
  const raw = Buffer.isBuffer(d.body) ? d.body : Buffer.from(JSON.stringify(d.body));
  const deliveryId = d.deliveryId ?? randomUUID();
  const headers: Record<string, string> = { "content-type": "application/json" };
  const key = d.signWith ?? d.secret;
  if (d.provider === "github") {
    headers["x-github-event"] = d.event;
    headers["x-github-delivery"] = deliveryId;
    if (key !== undefined)
      headers["x-hub-signature-256"] = `sha256=${createHmac("sha256", key)
        .update(d.signedBody ?? raw)
        .digest("hex")}`;
  } else {
    // As GitLab 17.4 and later send them: Idempotency-Key is kept by a retry, the UUIDs are not.
    headers["x-gitlab-event"] = d.event;
    headers["idempotency-key"] = deliveryId;
    headers["x-gitlab-event-uuid"] = randomUUID();
    headers["x-gitlab-webhook-uuid"] = randomUUID();
    if (key !== undefined) headers["x-gitlab-token"] = key;
  }
  const res = await routeCall(baseUrl, routes.receiveVcsWebhook, { params: { connection }, headers, body: raw });
  return { status: res.status, body: res.body, deliveryId };
}

/**
 * The delivery a webhook's answer named (`sent`: what `deliver` returned), once the server has acted
 * on it: waited for on the server's long-poll, never by polling the list. Fails after ~2 minutes.
 */
export async function processedDelivery(
  server: { url: string; adminToken: string },
  connection: string,
  sent: { body: { delivery: string } },
  diagnose: () => string = () => "",
): Promise<VcsDelivery> {
  const delivery = sent.body.delivery;
  let seen = "unread";
  for (let waits = 0; waits < 4; waits++) {
    const res = await routeCall(server.url, routes.getVcsDelivery, {
      token: server.adminToken,
      params: { connection, delivery },
      query: { wait: 30_000 },
    });
    if (res.status !== 200) throw new Error(`delivery ${delivery}: ${res.status} ${JSON.stringify(res.body)}`);
    const d = res.body as VcsDelivery;
    if (d.status === "processed") return d;
    seen = d.status;
  }
  throw new Error(`delivery ${delivery} still ${seen} after 120 s\n${diagnose()}`);
}
