import type { Kysely } from "kysely";
import type { Database } from "../db/schema.js";
import type { Dialect } from "../db/connect.js";
import type { EventBus } from "../events.js";
import type { AgentPresence } from "./presence.js";

/** What every store module works with. `now` is injected so tests control time. */
export interface StoreContext {
  db: Kysely<Database>;
  dialect: Dialect;
  events: EventBus;
  now(): number;
  settings: StoreSettings;
  /** When set, agents' signs of life are coalesced here instead of written one by one. */
  presence?: AgentPresence;
}

/** Timing settings of the queue and agents, all in milliseconds. */
export interface StoreSettings {
  /** How long a job assignment lives without a heartbeat. */
  leaseTtlMs: number;
  /** How long an agent may stay silent before it is declared offline. */
  agentTtlMs: number;
  /** How often agents are told to heartbeat. */
  heartbeatIntervalMs: number;
}

export const defaultStoreSettings: StoreSettings = {
  leaseTtlMs: 30_000,
  agentTtlMs: 60_000,
  heartbeatIntervalMs: 10_000,
};

/** A query handle: the database itself or an open transaction. */
export type Queryable = Kysely<Database>;

export const iso = (ms: number): string => new Date(ms).toISOString();
export const isoOrNull = (ms: number | null): string | null => (ms === null ? null : new Date(ms).toISOString());
