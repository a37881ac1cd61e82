import { createHash } from "node:crypto";
import { DroverError, inspectArchive, newId, type ArchiveLimits, type ConfigurationVersion } from "@drover/protocol";
import type { StoreContext } from "./context.js";
import { iso } from "./context.js";
import { getWorkspace } from "./workspaces.js";

/**
 * Stores an uploaded tar.gz after checking every entry (SPEC §9). A rejected archive leaves
 * nothing behind: the check runs before the single insert.
 */
export async function createConfigurationVersion(ctx: StoreContext, workspace: string, archive: Buffer, limits: ArchiveLimits): Promise<ConfigurationVersion> {
  const ws = await getWorkspace(ctx, workspace);
  await inspectArchive(archive, limits);
  const row = {
    id: newId("cv"),
    workspace_id: ws.id,
    size: archive.length,
    sha256: createHash("sha256").update(archive).digest("hex"),
    archive,
    created_at: ctx.now(),
  };
  await ctx.db.insertInto("configuration_versions").values(row).execute();
  return { id: row.id, workspaceId: ws.id, size: row.size, sha256: row.sha256, createdAt: iso(row.created_at) };
}

export async function getConfigurationVersion(ctx: StoreContext, id: string): Promise<ConfigurationVersion> {
  const row = await ctx.db.selectFrom("configuration_versions").select(["id", "workspace_id", "size", "sha256", "created_at"]).where("id", "=", id).executeTakeFirst();
  if (!row) throw new DroverError("not_found", `no configuration version ${JSON.stringify(id)}`);
  return { id: row.id, workspaceId: row.workspace_id, size: row.size, sha256: row.sha256, createdAt: iso(row.created_at) };
}

export async function listConfigurationVersions(ctx: StoreContext, workspace: string): Promise<ConfigurationVersion[]> {
  const ws = await getWorkspace(ctx, workspace);
  const rows = await ctx.db
    .selectFrom("configuration_versions")
    .select(["id", "workspace_id", "size", "sha256", "created_at"])
    .where("workspace_id", "=", ws.id)
    .orderBy("created_at", "desc")
    .execute();
  return rows.map((row) => ({ id: row.id, workspaceId: row.workspace_id, size: row.size, sha256: row.sha256, createdAt: iso(row.created_at) }));
}

/** The archive bytes of a configuration version. */
export async function readConfigurationArchive(ctx: StoreContext, id: string): Promise<Buffer> {
  const row = await ctx.db.selectFrom("configuration_versions").select("archive").where("id", "=", id).executeTakeFirst();
  if (!row) throw new DroverError("not_found", `no configuration version ${JSON.stringify(id)}`);
  return Buffer.from(row.archive);
}
