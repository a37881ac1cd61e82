import type { Transaction } from "kysely";
import type { Database } from "../db/schema.js";
import type { Topic } from "../events.js";
import type { StoreContext } from "./context.js";

/** Events to publish once the transaction that caused them has committed. */
export type Effects = Array<[Topic, string]>;

/**
 * PostgreSQL's deadlock_detected and serialization_failure: the server rolled the transaction
 * back whole, and running it again is the remedy its manual gives. Store writes lock a run and
 * its job in either order (a cancel from the run, a job's finish from the job), so two of them
 * can meet; one is chosen to fail, and must not reach the user as a 500.
 */
const retryableCodes = new Set(["40P01", "40001"]);

/** Tries of a transaction PostgreSQL rolled back for a deadlock: a third meeting in a row would be a bug, not a race. */
const maxTries = 3;

/**
 * Runs `work` in a transaction and publishes the events it collected only after commit, so
 * a woken reader always sees the change (and a rolled-back change wakes nobody). `work` runs
 * again when PostgreSQL broke a deadlock by rolling it back, so it must touch nothing but `trx`
 * and `effects`.
 */
export async function inTransaction<T>(
  ctx: StoreContext,
  work: (trx: Transaction<Database>, effects: Effects) => Promise<T>,
): Promise<T> {
  for (let tries = 1; ; tries++) {
    const effects: Effects = [];
    try {
      const result = await ctx.db.transaction().execute((trx) => work(trx, effects));
      for (const [topic, key] of effects) ctx.events.publish(topic, key);
      return result;
    } catch (err) {
      if (tries >= maxTries || !isRolledBackForConflict(err)) throw err;
    }
  }
}

function isRolledBackForConflict(err: unknown): boolean {
  return retryableCodes.has(String((err as { code?: unknown } | null)?.code ?? ""));
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
