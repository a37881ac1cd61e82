import { createHash } from "node:crypto";
import { DroverError, newId, type ConfigurationVersion } from "@drover/protocol";
import { configurationFiles, configurationFileSuffixes, inspectArchive, type ArchiveLimits } from "@drover/runtime";
import { sourceChunks, sourceSize, storedBody, writeChunks, type BodySource, type StoredBody } from "./bodies.js";
import type { StoreContext } from "./context.js";
import { iso } from "./context.js";
import { transactionKeepingCause } from "./transaction.js";
import { getWorkspace } from "./workspaces.js";

/** An archive whose every entry was checked, with the sha256 of its bytes. */
export interface InspectedArchive {
  files: string[];
  sha256: string;
}

/**
 * Checks every entry of an archive held in memory. A push that many workspaces link checks its
 * commit's archive once and stores it for each of them.
 */
export async function inspectConfiguration(archive: Buffer, limits: ArchiveLimits): Promise<InspectedArchive> {
  const summary = await inspectArchive(archive, limits);
  return { files: summary.files, sha256: createHash("sha256").update(archive).digest("hex") };
}

/** How createConfigurationVersion stores an archive. */
export interface ConfigurationVersionOptions {
  /** The id it gets (a TFE configuration version made before its archive); unset: a new one. */
  id?: string;
  /** The archive's checks, already run by inspectConfiguration on these very bytes. */
  inspected?: InspectedArchive;
}

/**
 * Stores an uploaded tar.gz after checking every entry. A rejected archive leaves
 * nothing behind: the check runs before the one transaction that stores it.
 */
export async function createConfigurationVersion(
  ctx: StoreContext,
  workspace: string,
  archive: BodySource,
  limits: ArchiveLimits,
  options: ConfigurationVersionOptions = {},
): Promise<ConfigurationVersion> {
  const ws = await getWorkspace(ctx, workspace);
  const inspected =
    options.inspected ??
    (Buffer.isBuffer(archive) ? await inspectConfiguration(archive, limits) : await inspectStream(archive, limits));
  // An upload without configuration would plan to destroy everything the workspace manages.
  if (configurationFiles(inspected.files, ws.workingDirectory).length === 0)
    throw new DroverError(
      "invalid_archive",
      `the configuration holds no ${configurationFileSuffixes.join(", ")} file in ${ws.workingDirectory ? `its working directory ${JSON.stringify(ws.workingDirectory)}` : "its root"}: nothing to plan`,
    );
  const { id } = options;
  const row = {
    id: id ?? newId("cv"),
    workspace_id: ws.id,
    size: sourceSize(archive),
    sha256: inspected.sha256,
    created_at: ctx.now(),
  };
  await transactionKeepingCause(ctx, async (trx) => {
    await trx.insertInto("configuration_versions").values(row).execute();
    await writeChunks(trx, "configuration_version_chunks", row.id, archive);
    if (id !== undefined)
      await trx.updateTable("tfe_configuration_versions").set({ status: "uploaded" }).where("id", "=", id).execute();
  });
  return { id: row.id, workspaceId: ws.id, size: row.size, sha256: row.sha256, createdAt: iso(row.created_at) };
}

/** Checks an archive spooled to disk, hashing it as the check reads it to its end. */
async function inspectStream(archive: BodySource, limits: ArchiveLimits): Promise<InspectedArchive> {
  const hash = createHash("sha256");
  const summary = await inspectArchive(
    (async function* () {
      for await (const piece of sourceChunks(archive)) {
        hash.update(piece);
        yield piece;
      }
    })(),
    limits,
  );
  return { files: summary.files, sha256: hash.digest("hex") };
}

export async function getConfigurationVersion(ctx: StoreContext, id: string): Promise<ConfigurationVersion> {
  const row = await ctx.db
    .selectFrom("configuration_versions")
    .select(["id", "workspace_id", "size", "sha256", "created_at"])
    .where("id", "=", id)
    .executeTakeFirst();
  if (!row) throw new DroverError("not_found", `no configuration version ${JSON.stringify(id)}`);
  return {
    id: row.id,
    workspaceId: row.workspace_id,
    size: row.size,
    sha256: row.sha256,
    createdAt: iso(row.created_at),
  };
}

export async function listConfigurationVersions(ctx: StoreContext, workspace: string): Promise<ConfigurationVersion[]> {
  const ws = await getWorkspace(ctx, workspace);
  const rows = await ctx.db
    .selectFrom("configuration_versions")
    .select(["id", "workspace_id", "size", "sha256", "created_at"])
    .where("workspace_id", "=", ws.id)
    .orderBy("created_at", "desc")
    .execute();
  return rows.map((row) => ({
    id: row.id,
    workspaceId: row.workspace_id,
    size: row.size,
    sha256: row.sha256,
    createdAt: iso(row.created_at),
  }));
}

/** The archive bytes of a configuration version. */
export async function readConfigurationArchive(ctx: StoreContext, id: string): Promise<StoredBody> {
  const row = await ctx.db
    .selectFrom("configuration_versions")
    .select(["id", "size"])
    .where("id", "=", id)
    .executeTakeFirst();
  if (!row) throw new DroverError("not_found", `no configuration version ${JSON.stringify(id)}`);
  return storedBody(ctx.db, "configuration_version_chunks", row.id, row.size);
}
