import { store, type StoreContext } from "@drover/server";

/** Archive limits loose enough for the tests' small configurations. */
export const testArchiveLimits = { maxCompressedBytes: 1e6, maxUnpackedBytes: 1e7, maxEntries: 100 };

/**
 * A terraform workspace named `name` on pool `poolId`, its settings at their defaults but
 * `autoApply`, with one configuration version of `archive` (a tar.gz): what a run is created from.
 */
export async function workspaceWithConfiguration(
  ctx: StoreContext,
  name: string,
  poolId: string,
  archive: Buffer,
  autoApply = false,
) {
  const ws = await store.createWorkspace(ctx, {
    name,
    pool: poolId,
    engine: "terraform",
    engineVersion: null,
    workingDirectory: "",
    autoApply,
  });
  const cv = await store.createConfigurationVersion(ctx, ws.id, archive, testArchiveLimits);
  return { ws, cv };
}
