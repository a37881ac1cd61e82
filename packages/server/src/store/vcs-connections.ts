import { defaultVcsApiUrl, DroverError, newId, type VcsConnection, type VcsProvider } from "@drover/protocol";
import type { VcsEndpoint } from "@drover/vcs";
import type { Selectable } from "kysely";
import type { VcsConnectionsTable } from "../db/schema.js";
import { newWebhookSecret } from "../db/migrations-vcs.js";
import { isUniqueViolation } from "../db/storage-errors.js";
import { iso, type StoreContext } from "./context.js";

/*
 * VCS connections. The token is write-only like a sensitive variable: only the fetch reads it
 * (vcsCredential) and the VCS client (vcsEndpoint), and nothing returned by the API carries it.
 */

/** A connection as the store knows it; the API adds the webhook URL, which depends on the server's address. */
export type StoredVcsConnection = Omit<VcsConnection, "webhookUrl">;

const toConnection = (r: Selectable<VcsConnectionsTable>): StoredVcsConnection => ({
  id: r.id,
  name: r.name,
  provider: r.provider,
  url: r.url,
  apiUrl: r.api_url ?? defaultVcsApiUrl(r.provider, r.url),
  authKind: r.auth_kind,
  app: r.auth_kind === "github-app" ? { appId: r.app_id ?? "", installationId: Number(r.installation_id ?? 0) } : null,
  createdAt: iso(r.created_at),
});

export interface CreateVcsConnectionInput {
  name: string;
  provider: VcsProvider;
  url: string;
  apiUrl?: string | undefined;
  token?: string | undefined;
  githubApp?: { appId: string; installationId: number; privateKey: string } | undefined;
}

/** Creates a connection; a taken name is `already_exists`. */
export async function createVcsConnection(
  ctx: StoreContext,
  input: CreateVcsConnectionInput,
): Promise<StoredVcsConnection> {
  const taken = () =>
    new DroverError("already_exists", `a VCS connection named ${JSON.stringify(input.name)} already exists`);
  const existing = await ctx.db
    .selectFrom("vcs_connections")
    .select("id")
    .where("name", "=", input.name)
    .executeTakeFirst();
  if (existing) throw taken();
  const row = {
    id: newId("vcs"),
    name: input.name,
    provider: input.provider,
    url: input.url,
    api_url: input.apiUrl ?? defaultVcsApiUrl(input.provider, input.url),
    auth_kind: input.githubApp ? ("github-app" as const) : ("token" as const),
    token: input.token ?? "",
    app_id: input.githubApp?.appId ?? null,
    installation_id: input.githubApp?.installationId ?? null,
    private_key: input.githubApp?.privateKey ?? null,
    webhook_secret: newWebhookSecret(),
    created_at: ctx.now(),
  };
  try {
    await ctx.db.insertInto("vcs_connections").values(row).execute();
  } catch (err) {
    if (isUniqueViolation(err)) throw taken();
    throw err;
  }
  return toConnection(row);
}

export async function listVcsConnections(ctx: StoreContext): Promise<StoredVcsConnection[]> {
  const rows = await ctx.db.selectFrom("vcs_connections").selectAll().orderBy("name").execute();
  return rows.map(toConnection);
}

async function connectionRow(ctx: StoreContext, idOrName: string): Promise<Selectable<VcsConnectionsTable>> {
  const row = await ctx.db
    .selectFrom("vcs_connections")
    .selectAll()
    .where((eb) => eb.or([eb("id", "=", idOrName), eb("name", "=", idOrName)]))
    .executeTakeFirst();
  if (!row) throw new DroverError("not_found", `no VCS connection ${JSON.stringify(idOrName)}`);
  return row;
}

/** Finds a connection by id or name. */
export async function getVcsConnection(ctx: StoreContext, idOrName: string): Promise<StoredVcsConnection> {
  return toConnection(await connectionRow(ctx, idOrName));
}

/** What the fetch needs to reach a connection's repositories: its base URL and secret. */
export interface VcsCredential {
  provider: VcsProvider;
  url: string;
  token: string;
}

/** The connection's secret, for the fetch only. */
export async function vcsCredential(ctx: StoreContext, connectionId: string): Promise<VcsCredential> {
  const row = await connectionRow(ctx, connectionId);
  return { provider: row.provider, url: row.url, token: row.token };
}

/** How the VCS client reaches and authenticates to a connection's API (its secrets included: server-side only). */
export async function vcsEndpoint(ctx: StoreContext, connectionId: string): Promise<VcsEndpoint> {
  const row = await connectionRow(ctx, connectionId);
  return {
    provider: row.provider,
    url: row.url,
    apiUrl: row.api_url ?? defaultVcsApiUrl(row.provider, row.url),
    auth:
      row.auth_kind === "github-app"
        ? {
            kind: "github-app",
            appId: row.app_id ?? "",
            installationId: Number(row.installation_id ?? 0),
            privateKey: row.private_key ?? "",
          }
        : { kind: "token", token: row.token },
  };
}

/** The connection's webhook secret, for checking deliveries and registering webhooks only. */
export async function vcsWebhookSecret(ctx: StoreContext, idOrName: string): Promise<string> {
  return (await connectionRow(ctx, idOrName)).webhook_secret;
}

/** Deletes a connection; while workspaces are linked through it, `conflict` names them. */
export async function deleteVcsConnection(ctx: StoreContext, idOrName: string): Promise<void> {
  const row = await connectionRow(ctx, idOrName);
  // One statement: a link made meanwhile keeps the connection rather than dangling.
  const deleted = await ctx.db
    .deleteFrom("vcs_connections")
    .where("id", "=", row.id)
    .where((eb) =>
      eb.not(eb.exists(eb.selectFrom("workspace_vcs").select("workspace_id").where("connection_id", "=", row.id))),
    )
    .executeTakeFirst();
  if (Number(deleted.numDeletedRows) === 1) return;
  const linked = await ctx.db
    .selectFrom("workspace_vcs")
    .innerJoin("workspaces", "workspaces.id", "workspace_vcs.workspace_id")
    .select("workspaces.name")
    .where("workspace_vcs.connection_id", "=", row.id)
    .orderBy("workspaces.name")
    .execute();
  if (linked.length === 0) throw new DroverError("not_found", `no VCS connection ${JSON.stringify(idOrName)}`);
  throw new DroverError(
    "conflict",
    `VCS connection ${row.name} is used by workspace${linked.length === 1 ? "" : "s"} ${linked.map((l) => l.name).join(", ")}`,
    { hint: "Unlink them first: drover workspace unlink <workspace>." },
  );
}
