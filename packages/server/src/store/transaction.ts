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
export async function inTransaction<T>(ctx: StoreContext, work: (trx: Transaction<Database>, effects: Effects) => Promise<T>): Promise<T> {
  const effects: Effects = [];
  const result = await ctx.db.transaction().execute((trx) => work(trx, effects));
  for (const [topic, key] of effects) ctx.events.publish(topic, key);
  return result;
}
