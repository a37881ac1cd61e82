import { messageOf, routes, type WorkspaceVcs } from "@drover/protocol";
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

/** The link in progress per connection and repository: links of one repository take turns. */
const linking = new Map<string, Promise<unknown>>();

/**
 * Links a workspace and registers the repository's webhook, unless another link of the repository
 * has one. Links of one repository are made one at a time, so workspaces linked at once share one
 * webhook instead of each creating its own (GitHub refuses the second; GitLab keeps both and
 * delivers every event twice).
 */
export async function linkWithWebhook(
  w: WebhookContext,
  workspace: string,
  input: LinkWorkspaceVcsInput,
): Promise<WorkspaceVcs> {
  const key = `${input.connection}\0${input.repository.toLowerCase()}`;
  const turn = (linking.get(key) ?? Promise.resolve()).catch(() => undefined).then(() => link(w, workspace, input));
  linking.set(key, turn);
  try {
    return await turn;
  } finally {
    if (linking.get(key) === turn) linking.delete(key);
  }
}

async function link(w: WebhookContext, workspace: string, input: LinkWorkspaceVcsInput): Promise<WorkspaceVcs> {
  const { ctx } = w;
  const before = await getWorkspaceVcs(ctx, workspace).catch(() => null);
  const link = await linkWorkspaceVcs(ctx, workspace, input);
  const moved = before !== null && (before.connectionId !== link.connectionId || before.repository !== link.repository);
  if (moved && before.webhookId !== null) {
    await setVcsWebhookId(ctx, link.workspaceId, null);
    await dropWebhookIfUnused(w, before);
  }
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
  const link = await unlinkWorkspaceVcs(w.ctx, workspace);
  if (link.webhookId !== null) await dropWebhookIfUnused(w, link);
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
