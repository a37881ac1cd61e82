import type { VcsClient, VcsEndpoint } from "@drover/vcs";
import type { ArchiveLimits, RunTracer } from "@drover/runtime";
import type { DatabaseHealth } from "../db/health.js";
import type { StoreContext } from "../store/context.js";
import type { ServerMetrics } from "../metrics.js";
import type { TfeSettings } from "../config.js";

/** What queues a stored webhook delivery's work (vcs/webhooks.ts). */
export interface WebhookQueue {
  /** Queues a stored delivery's work behind its connection's earlier deliveries. */
  enqueue(deliveryId: string, connectionId: string): void;
}

/** What every route module needs: the store, limits, and the server-wide shutdown signal. */
export interface HttpContext {
  store: StoreContext;
  /** SQLite: the directory of the database file, named in storage errors (full, read-only). */
  storageDir?: string;
  /** Whether the database is reachable (/readyz, fail-fast 503s). */
  health: DatabaseHealth;
  archiveLimits: ArchiveLimits;
  /** How long a TFE capability URL (upload, log) works. */
  capabilityUrlMs: number;
  /** Largest plan JSON an agent may upload. */
  maxPlanJsonBytes: number;
  /** Most log bytes stored per job; the rest is dropped and the log says so. */
  maxJobLogBytes: number;
  /** Whether `/metrics` shows pool names to a caller without a token. */
  metricsPublicNames: boolean;
  /** How long a browser session lasts from sign-in. */
  webSessionMs: number;
  /** Where large request bodies are spooled while a request lasts (http/bodies.ts). */
  uploadDir: string;
  /** terraform's `cloud` block: its one organization and the pool of the workspaces it creates. */
  tfe: TfeSettings;
  /** The URL embedded in new pool tokens: how agents reach this server. */
  publicUrl(): string;
  shutdown: AbortSignal;
  /** Called on every agent-protocol request, for /healthz's lastActivity. */
  markActivity(): void;
  /** Spans of each job's trace (the no-op tracer without an OTLP endpoint). */
  tracer: RunTracer;
  /** How often the live event stream sends a keep-alive and re-checks the session (tests shorten it). */
  liveKeepAliveMs?: number;
  /** Takes the work of each stored webhook delivery (none: deliveries are stored and left for a later start). */
  vcsWebhooks?: WebhookQueue;
  /** Makes the client of a VCS connection's API (default: vcsClient, straight to the VCS). */
  vcsClient?: (endpoint: VcsEndpoint) => VcsClient;
  /** How long a VCS agent's task may take (connections reached through a VCS agent pool). */
  vcsAgentTaskMs?: number;
  /** The server's Prometheus series (set by buildApp). */
  metrics?: ServerMetrics;
}
