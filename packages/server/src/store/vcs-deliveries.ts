import { DroverError, newId, type VcsDelivery, type VcsDeliveryOutcome } from "@drover/protocol";
import type { Selectable } from "kysely";
import type { VcsDeliveriesTable } from "../db/schema.js";
import { isUniqueViolation } from "../db/storage-errors.js";
import { iso, type StoreContext } from "./context.js";
import { getVcsConnection } from "./vcs-connections.js";

/*
 * Webhook deliveries. A delivery is stored once per (connection, provider delivery id): a replay
 * finds the row and starts nothing. Its work is claimed by moving it from `received` to
 * `processing`, so of the processes that could pick it up exactly one does it; work that fails or
 * is cut short by a stop goes back to `received`, for the next start. A claim lapses unless its
 * server renews it: the work of a server that died goes back to `received` then.
 */

export interface RecordVcsDeliveryInput {
  connectionId: string;
  deliveryId: string;
  event: string;
  summary: string | null;
  /** The event as the processor acts on it (JSON). */
  work: string;
}

/** Stores a delivery; `duplicate` when this connection stored the same delivery id before. */
export async function recordVcsDelivery(
  ctx: StoreContext,
  input: RecordVcsDeliveryInput,
): Promise<{ id: string; duplicate: boolean }> {
  const existing = () =>
    ctx.db
      .selectFrom("vcs_deliveries")
      .select("id")
      .where("connection_id", "=", input.connectionId)
      .where("delivery_id", "=", input.deliveryId)
      .executeTakeFirst();
  const before = await existing();
  if (before) return { id: before.id, duplicate: true };
  const id = newId("vdl");
  try {
    await ctx.db
      .insertInto("vcs_deliveries")
      .values({
        id,
        connection_id: input.connectionId,
        delivery_id: input.deliveryId,
        event: input.event,
        received_at: ctx.now(),
        status: "received",
        claimed_until: null,
        summary: input.summary,
        work: input.work,
      })
      .execute();
  } catch (err) {
    // The same delivery stored by another request meanwhile.
    const raced = isUniqueViolation(err) ? await existing() : undefined;
    if (raced) return { id: raced.id, duplicate: true };
    throw err;
  }
  return { id, duplicate: false };
}

/**
 * Takes a received delivery's work until `ttlMs` from now; false when another process (or an
 * earlier call) took it.
 */
export async function claimVcsDelivery(ctx: StoreContext, id: string, ttlMs: number): Promise<boolean> {
  const moved = await ctx.db
    .updateTable("vcs_deliveries")
    .set({ status: "processing", claimed_until: ctx.now() + ttlMs })
    .where("id", "=", id)
    .where("status", "=", "received")
    .executeTakeFirst();
  return Number(moved.numUpdatedRows) === 1;
}

/** Extends the claim of a delivery being worked on to `ttlMs` from now. */
export async function renewVcsDeliveryClaim(ctx: StoreContext, id: string, ttlMs: number): Promise<void> {
  await ctx.db
    .updateTable("vcs_deliveries")
    .set({ claimed_until: ctx.now() + ttlMs })
    .where("id", "=", id)
    .where("status", "=", "processing")
    .execute();
}

/**
 * Gives a taken delivery back, when acting on it failed or the server stopped first: the next
 * server start acts on it again (a commit already run is recognised then, and starts nothing).
 */
export async function releaseVcsDelivery(ctx: StoreContext, id: string): Promise<void> {
  await ctx.db
    .updateTable("vcs_deliveries")
    .set({ status: "received", claimed_until: null })
    .where("id", "=", id)
    .where("status", "=", "processing")
    .execute();
}

/**
 * Gives back the deliveries whose claim lapsed (their server died while working on them);
 * returns their ids. A claim from before claim times existed counts as lapsed.
 */
export async function reclaimLapsedVcsDeliveries(ctx: StoreContext): Promise<string[]> {
  const given = await ctx.db
    .updateTable("vcs_deliveries")
    .set({ status: "received", claimed_until: null })
    .where("status", "=", "processing")
    .where((eb) => eb.or([eb("claimed_until", "is", null), eb("claimed_until", "<", ctx.now())]))
    .returning(["id", "received_at"])
    .execute();
  return given.sort((x, y) => x.received_at - y.received_at || x.id.localeCompare(y.id)).map((r) => r.id);
}

/** A delivery's stored work, for the processor. */
export async function vcsDeliveryWork(
  ctx: StoreContext,
  id: string,
): Promise<{ connectionId: string; work: string } | undefined> {
  const row = await ctx.db
    .selectFrom("vcs_deliveries")
    .select(["connection_id", "work"])
    .where("id", "=", id)
    .executeTakeFirst();
  return row && { connectionId: row.connection_id, work: row.work };
}

/** Deliveries received and not yet taken (left by a server that stopped), oldest first. */
export async function unclaimedVcsDeliveries(ctx: StoreContext): Promise<Array<{ id: string; connectionId: string }>> {
  const rows = await ctx.db
    .selectFrom("vcs_deliveries")
    .select(["id", "connection_id"])
    .where("status", "=", "received")
    .orderBy("received_at")
    .orderBy("id")
    .execute();
  return rows.map((r) => ({ id: r.id, connectionId: r.connection_id }));
}

/** What a delivery did for one workspace, as the processor records it. */
export type OutcomeInput = Omit<VcsDeliveryOutcome, "workspace"> & { workspaceName: string };

/** Records (or replaces) the outcome of a delivery for each workspace given. */
export async function recordVcsDeliveryOutcomes(
  ctx: StoreContext,
  deliveryId: string,
  outcomes: OutcomeInput[],
): Promise<void> {
  for (const o of outcomes) {
    const fields = { outcome: o.outcome, run_id: o.runId, detail: o.detail?.slice(0, 2000) ?? null };
    await ctx.db
      .insertInto("vcs_delivery_outcomes")
      .values({ delivery_id: deliveryId, workspace_id: o.workspaceId, workspace_name: o.workspaceName, ...fields })
      .onConflict((oc) => oc.columns(["delivery_id", "workspace_id"]).doUpdateSet(fields))
      .execute();
  }
}

/** Marks a delivery's work done. */
export async function finishVcsDelivery(ctx: StoreContext, id: string, summary?: string): Promise<void> {
  await ctx.db
    .updateTable("vcs_deliveries")
    .set({ status: "processed", claimed_until: null, ...(summary === undefined ? {} : { summary }) })
    .where("id", "=", id)
    .execute();
  ctx.events.publish("vcs-delivery-processed", id);
}

/**
 * How long a delivery is kept: long past any redelivery a VCS offers (GitHub's is 3 days), so a
 * replay still starts nothing, and short enough that the table does not grow for ever.
 */
export const vcsDeliveryRetentionMs = 30 * 24 * 60 * 60 * 1000;

/** Deletes deliveries received longer than `retentionMs` ago, with their outcomes; returns how many. */
export async function pruneVcsDeliveries(ctx: StoreContext, retentionMs = vcsDeliveryRetentionMs): Promise<number> {
  const cutoff = ctx.now() - retentionMs;
  let pruned = 0;
  // Per connection: the (connection_id, received_at) index finds the old rows without a scan.
  for (const { id } of await ctx.db.selectFrom("vcs_connections").select("id").execute()) {
    const gone = await ctx.db
      .deleteFrom("vcs_deliveries")
      .where("connection_id", "=", id)
      .where("received_at", "<", cutoff)
      .executeTakeFirst();
    pruned += Number(gone.numDeletedRows);
  }
  return pruned;
}

/** The deliveries whose runs were discarded by a newer commit say so. */
export async function markVcsRunsSuperseded(ctx: StoreContext, runIds: string[], detail: string): Promise<void> {
  if (runIds.length === 0) return;
  await ctx.db
    .updateTable("vcs_delivery_outcomes")
    .set({ outcome: "superseded", detail })
    .where("run_id", "in", runIds)
    .execute();
}

/** A connection's deliveries, newest first, with their outcomes per workspace. */
export async function listVcsDeliveries(ctx: StoreContext, connection: string, limit = 50): Promise<VcsDelivery[]> {
  const conn = await getVcsConnection(ctx, connection);
  const rows = await ctx.db
    .selectFrom("vcs_deliveries")
    .selectAll()
    .where("connection_id", "=", conn.id)
    .orderBy("received_at", "desc")
    .orderBy("id", "desc")
    .limit(limit)
    .execute();
  return withOutcomes(ctx, conn.name, rows);
}

/** One delivery of a connection (by Drover's id for it); not_found when the connection has no such delivery. */
export async function getVcsDelivery(ctx: StoreContext, connection: string, id: string): Promise<VcsDelivery> {
  const conn = await getVcsConnection(ctx, connection);
  const rows = await ctx.db
    .selectFrom("vcs_deliveries")
    .selectAll()
    .where("connection_id", "=", conn.id)
    .where("id", "=", id)
    .execute();
  const [delivery] = await withOutcomes(ctx, conn.name, rows);
  if (!delivery) throw new DroverError("not_found", `connection ${conn.name} has no delivery ${JSON.stringify(id)}`);
  return delivery;
}

async function withOutcomes(
  ctx: StoreContext,
  connectionName: string,
  rows: Array<Selectable<VcsDeliveriesTable>>,
): Promise<VcsDelivery[]> {
  const outcomes =
    rows.length === 0
      ? []
      : await ctx.db
          .selectFrom("vcs_delivery_outcomes")
          .selectAll()
          .where(
            "delivery_id",
            "in",
            rows.map((r) => r.id),
          )
          .orderBy("workspace_name")
          .execute();
  return rows.map((r) => ({
    id: r.id,
    connection: connectionName,
    deliveryId: r.delivery_id,
    event: r.event,
    receivedAt: iso(r.received_at),
    status: r.status,
    summary: r.summary,
    outcomes: outcomes
      .filter((o) => o.delivery_id === r.id)
      .map((o) => ({
        workspaceId: o.workspace_id,
        workspace: o.workspace_name,
        outcome: o.outcome as VcsDeliveryOutcome["outcome"],
        runId: o.run_id,
        detail: o.detail,
      })),
  }));
}
