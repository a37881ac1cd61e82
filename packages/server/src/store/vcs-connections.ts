import { defaultVcsApiUrl, DroverError, newId, type VcsConnection, type VcsProvider } from "@drover/protocol";
import type { VcsEndpoint } from "@drover/vcs";
import type { Selectable } from "kysely";
import type { VcsConnectionsTable } from "../db/schema.js";
import { newWebhookSecret } from "../db/migrations-vcs.js";
import { isUniqueViolation } from "../db/storage-errors.js";
import { iso, type StoreContext } from "./context.js";
import { getPool, requirePoolKind } from "./pools.js";

/*
 * VCS connections. The token is write-only like a sensitive variable: only the fetch reads it
 * and the VCS client (vcsEndpoint, vcsRoute), and nothing returned by the API carries it.
 */

/** A connection as the store knows it; the API adds the webhook URL, which depends on the server's address. */
export type StoredVcsConnection = Omit<VcsConnection, "webhookUrl">;

type Row = Selectable<VcsConnectionsTable> & { via_pool_name: string | null };

const toConnection = (r: Row): StoredVcsConnection => ({
  id: r.id,
  name: r.name,
  provider: r.provider,
  url: r.url,
  apiUrl: r.api_url ?? defaultVcsApiUrl(r.provider, r.url),
  authKind: r.auth_kind,
  app: r.auth_kind === "github-app" ? { appId: r.app_id ?? "", installationId: Number(r.installation_id ?? 0) } : null,
  viaPool: r.via_pool_name,
  createdAt: iso(r.created_at),
});

const withPool = (ctx: StoreContext) =>
  ctx.db
    .selectFrom("vcs_connections")
    .leftJoin("pools", "pools.id", "vcs_connections.via_pool_id")
    .selectAll("vcs_connections")
    .select("pools.name as via_pool_name");

export interface CreateVcsConnectionInput {
  name: string;
  provider: VcsProvider;
  url: string;
  apiUrl?: string | undefined;
  /** Absent with a GitHub App, or when only the VCS agents of `viaPool` hold it. */
  token?: string | undefined;
  githubApp?: { appId: string; installationId: number; privateKey: string } | undefined;
  /** A `vcs` pool (id or name) whose agents reach the VCS. */
  viaPool?: string | undefined;
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
  const pool = input.viaPool === undefined ? null : await getPool(ctx, input.viaPool);
  if (pool) requirePoolKind(pool, "vcs", "a connection through VCS agents");
  if (!pool && input.token === undefined && input.githubApp === undefined)
    throw new DroverError(
      "bad_request",
      "a token or a GitHub App is needed, unless the connection is reached through a VCS agent pool",
    );
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
    via_pool_id: pool?.id ?? null,
    webhook_secret: newWebhookSecret(),
    created_at: ctx.now(),
  };
  try {
    await ctx.db.insertInto("vcs_connections").values(row).execute();
  } catch (err) {
    if (isUniqueViolation(err)) throw taken();
    throw err;
  }
  return toConnection({ ...row, via_pool_name: pool?.name ?? null });
}

export async function listVcsConnections(ctx: StoreContext): Promise<StoredVcsConnection[]> {
  const rows = await withPool(ctx).orderBy("vcs_connections.name").execute();
  return rows.map(toConnection);
}

async function connectionRow(ctx: StoreContext, idOrName: string): Promise<Row> {
  const row = await withPool(ctx)
    .where((eb) => eb.or([eb("vcs_connections.id", "=", idOrName), eb("vcs_connections.name", "=", idOrName)]))
    .executeTakeFirst();
  if (!row) throw new DroverError("not_found", `no VCS connection ${JSON.stringify(idOrName)}`);
  return row;
}

/** Finds a connection by id or name. */
export async function getVcsConnection(ctx: StoreContext, idOrName: string): Promise<StoredVcsConnection> {
  return toConnection(await connectionRow(ctx, idOrName));
}

/** How the VCS client reaches and authenticates to a connection's API (its secrets included: server-side only). */
export async function vcsEndpoint(ctx: StoreContext, connectionId: string): Promise<VcsEndpoint> {
  return endpointOf(await connectionRow(ctx, connectionId));
}

function endpointOf(row: Selectable<VcsConnectionsTable>): VcsEndpoint {
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

/** How the server reaches a connection: itself with its credentials, or through a pool of VCS agents. */
export type VcsRoute =
  { via: "server"; endpoint: VcsEndpoint } | { via: "pool"; poolId: string; connectionId: string; connection: string };

export async function vcsRoute(ctx: StoreContext, connectionId: string): Promise<VcsRoute> {
  const row = await connectionRow(ctx, connectionId);
  if (row.via_pool_id !== null)
    return { via: "pool", poolId: row.via_pool_id, connectionId: row.id, connection: row.name };
  return { via: "server", endpoint: endpointOf(row) };
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
