import type { ArchiveLimits } from "@drover/protocol";
import type { StoreContext } from "../store/context.js";

/** What every route module needs: the store, limits, and the server-wide shutdown signal. */
export interface HttpContext {
  store: StoreContext;
  archiveLimits: ArchiveLimits;
  /** The URL embedded in new pool tokens: how agents reach this server. */
  publicUrl(): string;
  shutdown: AbortSignal;
  /** Called on every agent-protocol request, for /healthz's lastActivity. */
  markActivity(): void;
}
