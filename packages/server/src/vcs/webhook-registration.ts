import { DroverError, messageOf, routes, type WorkspaceVcs } from "@drover/protocol";
import { sql } from "kysely";
import { vcsStatusOf, type VcsClient, type VcsEndpoint } from "@drover/vcs";
import type { StoreContext } from "../store/context.js";
import { getVcsConnection, vcsWebhookSecret } from "../store/vcs-connections.js";
import { connectionClient } from "./relay.js";
import {
  getWorkspaceVcs,
  linkWorkspaceVcs,
  repositoryWebhookId,
  setVcsWebhookId,
  unlinkWorkspaceVcs,
  type LinkWorkspaceVcsInput,
} from "../store/workspace-vcs.js";

/*
 * Linking registers the repository's webhook through the VCS API, one per repository and
 * connection, shared by the workspaces linked to it. When the credentials may not manage
 * webhooks (403/404) the link still stands and its answer says exactly what to register by hand.
 * Unlinking removes the webhook once no workspace uses it.
 */

export interface WebhookContext {
  ctx: StoreContext;
  log: { warn(fields: object, message: string): void };
  publicUrl(): string;
  client(endpoint: VcsEndpoint): VcsClient;
  /** How long a VCS agent's task may take, for connections reached through a VCS agent pool. */
  agentTaskMs: number;
}

const events = { github: ["push", "pull_request"], gitlab: ["push", "merge_requests"] } as const;

/** Where a connection's deliveries go. */
export function webhookUrl(publicUrl: string, connection: string): string {
  const path = routes.receiveVcsWebhook.path.replace(":connection", encodeURIComponent(connection));
  return `${publicUrl.replace(/\/+$/, "")}${path}`;
}

/**
 * The link or unlink in progress in this process: they take turns, one at a time (they are a
 * user's rare changes, and each holds a database connection on PostgreSQL while it runs).
 */
let linking: Promise<unknown> = Promise.resolve();

/** How long a link waits for another server process's link of the same repository to end. */
const acrossServersWaitMs = 120_000;

/**
 * Links a workspace and registers the repository's webhook, unless another link of the repository
 * has one. Links of one repository are made one at a time, so workspaces linked at once share one
 * webhook instead of each creating its own (GitHub refuses the second; GitLab keeps both and
 * delivers every event twice): in this process, and on PostgreSQL across server processes.
 */
export async function linkWithWebhook(
  w: WebhookContext,
  workspace: string,
  input: LinkWorkspaceVcsInput,
): Promise<WorkspaceVcs> {
  // Named by id: the input may name the connection either way.
  const { id } = await getVcsConnection(w.ctx, input.connection);
  const before = await getWorkspaceVcs(w.ctx, workspace).catch(() => null);
  const leaves =
    before !== null &&
    (before.connectionId !== id || before.repository.toLowerCase() !== input.repository.toLowerCase());
  // The move and the drop of the old repository's webhook go in that repository's turn, before
  // the new one's (never both held at once). A link of the old repository made on another server
  // then comes before (and keeps the webhook) or after the webhook is gone (and registers its
  // own); between the two, the repository would look unused while its webhook still exists.
  if (leaves && before.webhookId !== null)
    await inTurn(w.ctx, before.connectionId, before.repository, async (ctx) => {
      const moved = await linkWorkspaceVcs(ctx, workspace, input);
      await setVcsWebhookId(ctx, moved.workspaceId, null);
      await dropWebhookIfUnused({ ...w, ctx }, before);
    });
  return inTurn(w.ctx, id, input.repository, (ctx) => link({ ...w, ctx }, workspace, input));
}

/** Runs `work` in the turn of a connection's (by id) repository: one at a time here, and across servers. */
async function inTurn<T>(
  ctx: StoreContext,
  connection: string,
  repository: string,
  work: (ctx: StoreContext) => Promise<T>,
): Promise<T> {
  const key = JSON.stringify([connection, repository.toLowerCase()]);
  const turn = linking.catch(() => undefined).then(() => acrossServers(ctx, key, work));
  linking = turn;
  return turn;
}

/**
 * Runs `work` holding PostgreSQL's advisory lock named by `key`, so that other server processes
 * on the database wait their turn (SQLite has one server process). The lock belongs to one pooled
 * connection, held until `work` ends (a link's few calls to the VCS, each with its deadline), and
 * `work` reads and writes through it. A lock another process holds is asked for again after a
 * pause, holding no connection meanwhile.
 */
async function acrossServers<T>(ctx: StoreContext, key: string, work: (ctx: StoreContext) => Promise<T>): Promise<T> {
  if (ctx.dialect !== "postgres") return work(ctx);
  const deadline = Date.now() + acrossServersWaitMs;
  for (let attempt = 0; ; attempt++) {
    const done = await ctx.db.connection().execute(async (conn) => {
      const { rows } = await sql<{ locked: boolean }>`
        select pg_try_advisory_lock(hashtextextended(${key}, 0)) as locked`.execute(conn);
      if (rows[0]?.locked !== true) return undefined;
      try {
        return { value: await work({ ...ctx, db: conn }) };
      } finally {
        // A failed unlock must not hide the work's own outcome; the lock ends with its connection anyway.
        await sql`select pg_advisory_unlock(hashtextextended(${key}, 0))`.execute(conn).catch(() => undefined);
      }
    });
    if (done !== undefined) return done.value;
    if (Date.now() > deadline)
      // Busy rather than wrong: the same request succeeds once the other link has ended.
      throw new DroverError(
        "too_many_requests",
        `another server has been changing the links of ${JSON.parse(key)[1]} for ${acrossServersWaitMs / 1000} s; try again`,
      );
    await new Promise((resolve) => setTimeout(resolve, Math.min(1_000, 25 * 2 ** attempt)));
  }
}

async function link(w: WebhookContext, workspace: string, input: LinkWorkspaceVcsInput): Promise<WorkspaceVcs> {
  const { ctx } = w;
  const before = await getWorkspaceVcs(ctx, workspace).catch(() => null);
  const link = await linkWorkspaceVcs(ctx, workspace, input);
  const moved = before !== null && (before.connectionId !== link.connectionId || before.repository !== link.repository);
  // The old repository's webhook is no longer this link's (linkWithWebhook drops it if unused).
  if (moved && before.webhookId !== null) await setVcsWebhookId(ctx, link.workspaceId, null);
  const conn = await getVcsConnection(ctx, link.connectionId);
  const url = webhookUrl(w.publicUrl(), conn.name);
  const shape = { url, contentType: "json" as const, events: [...events[conn.provider]] };
  const existing = await repositoryWebhookId(ctx, link.connectionId, link.repository);
  if (existing !== null) {
    await setVcsWebhookId(ctx, link.workspaceId, existing);
    return { ...link, webhookId: existing, webhook: { registered: true, ...shape } };
  }
  const secret = await vcsWebhookSecret(ctx, link.connectionId);
  if (conn.viaPool !== null) {
    // A VCS behind a firewall delivers to its VCS agents' listener, whose address only the user knows.
    const listener = `http://<vcs-agent-address>:<DROVER_AGENT_VCS_WEBHOOK_PORT>/hooks/${conn.name}`;
    const reason = `the connection is reached through VCS agent pool ${conn.viaPool}: register its agents' webhook listener`;
    return { ...link, webhookId: null, webhook: { registered: false, ...shape, url: listener, secret, reason } };
  }
  try {
    const client = await connectionClient(ctx, link.connectionId, w);
    const { webhookId } = await client.run({ op: "createWebhook", repository: link.repository, url, secret });
    await setVcsWebhookId(ctx, link.workspaceId, webhookId);
    return { ...link, webhookId, webhook: { registered: true, ...shape } };
  } catch (err) {
    const status = vcsStatusOf(err);
    w.log.warn(
      { workspace, repository: link.repository, reason: messageOf(err) },
      "registering the repository's webhook failed; the link answers what to register by hand",
    );
    const reason =
      status === 403 || status === 404
        ? `the connection's credentials may not manage webhooks of ${link.repository} (${status})`
        : messageOf(err);
    return { ...link, webhookId: null, webhook: { registered: false, ...shape, secret, reason } };
  }
}

export async function unlinkWithWebhook(w: WebhookContext, workspace: string): Promise<void> {
  const current = await getWorkspaceVcs(w.ctx, workspace);
  // The link and its webhook go in one turn of the repository: a link made meanwhile either
  // comes before (and keeps the webhook it took) or after the webhook is gone (and registers one).
  await inTurn(w.ctx, current.connectionId, current.repository, async (ctx) => {
    const link = await unlinkWorkspaceVcs(ctx, workspace);
    if (link.webhookId !== null) await dropWebhookIfUnused({ ...w, ctx }, link);
  });
}

/** Deletes a repository's webhook when no link uses it any more; a failure is logged, not raised. */
async function dropWebhookIfUnused(w: WebhookContext, link: WorkspaceVcs): Promise<void> {
  if (link.webhookId === null) return;
  if ((await repositoryWebhookId(w.ctx, link.connectionId, link.repository)) === link.webhookId) return;
  try {
    const client = await connectionClient(w.ctx, link.connectionId, w);
    await client.run({ op: "deleteWebhook", repository: link.repository, webhookId: link.webhookId });
  } catch (err) {
    w.log.warn(
      { repository: link.repository, webhookId: link.webhookId, reason: messageOf(err) },
      "deleting the repository's webhook failed; delete it in the VCS by hand",
    );
  }
}
