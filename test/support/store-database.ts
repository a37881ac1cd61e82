import { after, before } from "node:test";
import { localEventBus, openDatabase, type Db, type StoreContext } from "@drover/server";
import { createTestDatabase, type BackendName, type TestDatabase } from "./databases.js";

/** The store settings the store tests share: lease 30 s, agent TTL 60 s, heartbeat every 10 s. */
export const storeTestSettings = { leaseTtlMs: 30_000, agentTtlMs: 60_000, heartbeatIntervalMs: 10_000 };

/**
 * Within a describe: a fresh `backend` database opened before its tests (handed to `opened`
 * with a store context on it that reads the clock `now` and has its own local event bus), then
 * closed and dropped after them.
 */
export function useStoreDatabase(
  backend: BackendName,
  now: () => number,
  opened: (db: Db, ctx: StoreContext) => void,
): void {
  let database: TestDatabase | undefined;
  let db: Db | undefined;
  before(async () => {
    database = await createTestDatabase(backend);
    db = await openDatabase(database.location);
    opened(db, { db: db.kysely, dialect: db.dialect, events: localEventBus(), now, settings: storeTestSettings });
  });
  after(async () => {
    await db?.close();
    await database?.drop();
  });
}
