import type { Transaction } from "kysely";
import type { Database } from "../db/schema.js";
import type { Topic } from "../events.js";
import type { StoreContext } from "./context.js";

/** Events to publish once the transaction that caused them has committed. */
export type Effects = Array<[Topic, string]>;

/**
 * Runs `work` in a transaction and publishes the events it collected only after commit, so
 * a woken reader always sees the change (and a rolled-back change wakes nobody).
 */
export async function inTransaction<T>(
  ctx: StoreContext,
  work: (trx: Transaction<Database>, effects: Effects) => Promise<T>,
): Promise<T> {
  const effects: Effects = [];
  const result = await ctx.db.transaction().execute((trx) => work(trx, effects));
  for (const [topic, key] of effects) ctx.events.publish(topic, key);
  return result;
}

/**
 * A transaction whose own failure is what the caller sees, even when the rollback fails too:
 * SQLite rolls back by itself when a write or the commit hits SQLITE_FULL or an I/O error, after
 * which a rollback throws "no transaction is active" and would hide the coded storage error.
 */
export async function transactionKeepingCause<T>(
  ctx: StoreContext,
  work: (trx: Transaction<Database>) => Promise<T>,
): Promise<T> {
  const trx = await ctx.db.startTransaction().execute();
  try {
    const result = await work(trx);
    await trx.commit().execute();
    return result;
  } catch (err) {
    // The rollback releases the connection whether or not it succeeds.
    await trx
      .rollback()
      .execute()
      .catch(() => undefined);
    throw err;
  }
}
