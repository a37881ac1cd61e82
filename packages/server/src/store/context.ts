import type { Kysely } from "kysely";
import type { Database, Dialect } from "../db/schema.js";
import type { EventBus } from "../events.js";
import type { SessionCache } from "./sessions.js";

/** What every store module works with. `now` is injected so tests control time. */
export interface StoreContext {
  db: Kysely<Database>;
  dialect: Dialect;
  events: EventBus;
  now(): number;
  settings: StoreSettings;
  /** When set, agents' signs of life are coalesced here instead of written one by one. */
  presence?: PresenceRecorder;
  /** When set, valid agent sessions are kept here and re-read off the request path (store/sessions.ts). */
  sessions?: SessionCache;
}

/** Where agents' signs of life are coalesced (store/presence.ts's AgentPresence). */
export interface PresenceRecorder {
  /** Notes that an agent was seen, with its job count when it reported one. */
  record(agentId: string, runningJobs: number | null): void;
  /** Writes what was noted so far. */
  flush(): Promise<void>;
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
