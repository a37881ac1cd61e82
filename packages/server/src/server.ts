import { DroverError } from "@drover/protocol";
import { logDestination, startTelemetryIfSet } from "@drover/runtime";
import { hostname } from "node:os";
import { dirname, join } from "node:path";
import { pino, type Logger } from "pino";
import { openDatabase } from "./db/connect.js";
import { localEventBus, postgresEventBus } from "./events.js";
import { buildApp, type AppOptions } from "./http/app.js";
import { prepareUploadDir, uploadDirOf } from "./http/bodies.js";
import type { ServerConfig } from "./config.js";
import { createMetrics } from "./metrics.js";
import { startSweeper } from "./sweeper.js";
import { VcsPoller, type PollOutcome } from "./vcs/poller.js";
import { WebhookProcessor } from "./vcs/webhooks.js";
import { VcsReporter, type VcsReportTiming } from "./vcs/reporter.js";
import { vcsClient as directVcsClient, prepareVcsWorkDir, type VcsClient, type VcsEndpoint } from "@drover/vcs";
import { AgentPresence } from "./store/presence.js";
import { createSessionCache } from "./store/agents.js";
import type { StoreContext } from "./store/context.js";
import { countUserTokens, createUserToken, ensureBootstrapToken } from "./store/user-tokens.js";

/** A started server. */
export interface RunningServer {
  url: string;
  /** The admin token, when this start generated it or it came from the configuration. */
  adminToken: string | undefined;
  store: StoreContext;
  /** Looks at every linked repository once, now (what the poller does every DROVER_VCS_POLL_SECONDS). */
  pollVcs(): Promise<PollOutcome[]>;
  close(): Promise<void>;
}

/** How often coalesced agent heartbeats are written. */
const presenceFlushMs = 500;

/**
 * How long a checked agent session answers without the database (store/sessions.ts): the
 * longest another server process's revocation can go unseen here should its event be lost.
 * Kept sessions are re-read every third of it, off the request path.
 */
const sessionMaxAgeMs = 3_000;

/** How a server is started beyond its configuration. */
export interface StartOptions extends AppOptions {
  logger?: Logger;
  /** When VCS reports are looked for and retried (tests shorten it). */
  vcsReportTiming?: Partial<VcsReportTiming>;
  /** Makes the client of a VCS connection's API (default: straight to the VCS). */
  vcsClient?: (endpoint: VcsEndpoint) => VcsClient;
}

/** Opens the database (migrating it), starts the HTTP server and the lease sweeper. */
export async function startServer(config: ServerConfig, options: StartOptions = {}): Promise<RunningServer> {
  // Through process.stdout, not pino's own file-descriptor writer: the process's one guard of a
  // closed stdout covers it, and that writer's exit hook retries a failed write forever (EPIPE).
  const readable = logDestination(config.logFormat, process.stdout);
  const log =
    options.logger ??
    (readable
      ? pino({ level: config.logLevel, base: undefined, timestamp: false }, readable)
      : pino({ level: config.logLevel }, process.stdout));
  // A quarter of the lease TTL without one successful round trip eats into agents' margin to
  // renew; such a stall restarts the lease grace (see DatabaseHealth.noteSuccess).
  const db = await openDatabase(config.database, { logger: log, stallMs: config.leaseTtlMs / 4 });
  let events;
  try {
    events = db.postgres ? await postgresEventBus(db.postgres.pool, db.postgres.settings, log) : localEventBus();
  } catch (err) {
    await db.close();
    throw err;
  }
  const bus = events;
  db.health.onStall((gapMs) => log.warn({ gapMs }, "the database stalled; lease expiry waits one more lease TTL"));
  db.health.onChange((state) => {
    if (state === "unavailable")
      log.error({ reason: db.health.lastError }, "database unavailable; API calls answer 503 until it returns");
    else log.warn("database available again; lease expiry resumes after one lease TTL");
    // Long-polls end at once rather than sit on a dead database; after the return every waiter re-checks.
    bus.wakeAll();
  });
  const store: StoreContext = {
    db: db.kysely,
    dialect: db.dialect,
    events,
    now: () => Date.now(),
    settings: {
      leaseTtlMs: config.leaseTtlMs,
      agentTtlMs: config.agentTtlMs,
      heartbeatIntervalMs: config.heartbeatIntervalMs,
    },
  };
  const presence = new AgentPresence(store);
  store.presence = presence;
  presence.start(presenceFlushMs, (err) => {
    if (db.health.state === "available") log.error({ err }, "recording agents' heartbeats failed");
  });
  // Sessions unused for an agent TTL are forgotten: their agent is about to be declared lost.
  const sessions = createSessionCache(store, sessionMaxAgeMs, config.agentTtlMs);
  store.sessions = sessions;
  sessions.start(sessionMaxAgeMs / 3, (err) => {
    // Entries not refreshed age out: requests then read the database (and meet its error).
    if (db.health.state === "available") log.warn({ err }, "refreshing agent sessions failed");
  });

  // A start that fails from here on stops the timers and closes the database: a caller that
  // retries (or a test) must not be left with refreshes running against a closed pool.
  const stopStarted = async () => {
    await sessions.stop();
    await presence.stop().catch(() => undefined);
    await events.close();
    await db.close();
  };
  let adminToken = config.adminToken;
  const shutdown = new AbortController();
  const metrics = createMetrics(store, { cacheMs: config.metricsCacheMs });
  let telemetry: Awaited<ReturnType<typeof startTelemetryIfSet>>;
  try {
    if (adminToken) {
      const { revoked } = await ensureBootstrapToken(store, adminToken);
      if (revoked > 0) log.warn({ revoked }, "DROVER_ADMIN_TOKEN changed: the previous admin token is revoked");
    } else if ((await countUserTokens(store)) === 0) {
      adminToken = (await createUserToken(store, "admin (generated at first start)")).token;
      log.warn("generated the admin API token; it is shown once, on standard output");
      process.stdout.write(`\nDrover admin token (shown once, store it now):\n  ${adminToken}\n\n`);
    }
    telemetry = await startTelemetryIfSet(
      config.otlp && {
        ...config.otlp,
        resource: {
          "service.name": "drover-server",
          "k8s.pod.name": process.env.KUBERNETES_SERVICE_HOST ? hostname() : undefined,
        },
        registry: metrics.registry,
      },
    );
  } catch (err) {
    await stopStarted();
    throw err;
  }
  let publicUrl = config.publicUrl;
  const storageDir =
    config.database.kind === "sqlite" && config.database.path !== ":memory:"
      ? dirname(config.database.path)
      : undefined;
  const uploadDir = uploadDirOf(config.dataDir);
  const vcsWorkDir = join(config.dataDir, "vcs-work");
  try {
    await prepareUploadDir(uploadDir);
    const left = await prepareVcsWorkDir(vcsWorkDir);
    if (left.length > 0) log.info({ removed: left }, "removed the fetch directories an earlier server process left");
  } catch (err) {
    await telemetry.shutdown().catch(() => undefined);
    await stopStarted();
    throw err;
  }
  const vcsClient = options.vcsClient ?? ((endpoint: VcsEndpoint) => directVcsClient(endpoint));
  const validateResponses = options.validateResponses ?? config.validateResponses;
  if (validateResponses)
    log.warn(
      "diagnostics: every JSON answer is checked against the route table (DROVER_DIAGNOSTICS_VALIDATE_RESPONSES); one outside it is a 500",
    );
  const webhooks = new WebhookProcessor({
    ctx: store,
    log,
    limits: config.archiveLimits,
    client: vcsClient,
    agentTaskMs: config.vcsAgentTaskMs,
    workDir: vcsWorkDir,
    claimTtlMs: config.leaseTtlMs,
    health: db.health,
  });
  const app = buildApp(
    {
      store,
      vcsWebhooks: webhooks,
      health: db.health,
      ...(storageDir === undefined ? {} : { storageDir }),
      archiveLimits: config.archiveLimits,
      capabilityUrlMs: config.capabilityUrlMs,
      maxPlanJsonBytes: config.maxPlanJsonBytes,
      maxJobLogBytes: config.maxJobLogBytes,
      metricsPublicNames: config.metricsPublicNames,
      webSessionMs: config.webSessionMs,
      uploadDir,
      tfe: config.tfe,
      publicUrl: () => publicUrl,
      vcsClient,
      vcsAgentTaskMs: config.vcsAgentTaskMs,
      shutdown: shutdown.signal,
      markActivity: () => {},
      tracer: telemetry.tracer,
    },
    metrics,
    log,
    config.tls,
    { ...options, validateResponses },
  );
  const sweeper = startSweeper(
    store,
    log,
    config.sweepIntervalMs,
    db.health,
    config.forceCancelAfterMs,
    config.jobTokenRetentionMs,
  );
  const poller = new VcsPoller({
    ctx: store,
    log,
    intervalMs: config.vcsPollMs,
    health: db.health,
    limits: config.archiveLimits,
    agentTaskMs: config.vcsAgentTaskMs,
    workDir: vcsWorkDir,
    client: vcsClient,
  });
  poller.start();
  // Deliveries a stopped server stored but did not act on; a failure here leaves them for the next look.
  webhooks.start().catch((err: unknown) => log.warn({ err }, "resuming stored webhook deliveries failed"));
  const reporter = new VcsReporter({
    ctx: store,
    log,
    health: db.health,
    publicUrl: () => publicUrl,
    client: vcsClient,
    agentTaskMs: config.vcsAgentTaskMs,
    ...(options.vcsReportTiming ? { timing: options.vcsReportTiming } : {}),
  });
  reporter.start();
  try {
    // A fleet reconnecting at once (after a restart or a network blip) overflows the default
    // backlog of 511; dropped SYNs cost each agent a 1 s retransmit.
    await app.listen({ host: config.host, port: config.port, backlog: 4096 });
  } catch (err) {
    await sweeper.stop();
    await poller.stop();
    await webhooks.stop();
    await reporter.stop();
    await telemetry.shutdown().catch(() => undefined);
    await stopStarted();
    if ((err as NodeJS.ErrnoException).code === "EADDRINUSE")
      throw new DroverError("invalid_setting", `port ${config.port} on ${config.host} is in use`, {
        hint: "Choose another with --port (DROVER_PORT); with npm start: npm start -- --port <port>.",
        cause: err,
      });
    throw err;
  }
  const address = app.server.address();
  const port = typeof address === "object" && address ? address.port : config.port;
  // With port 0 (tests) the default public URL learns the port the OS picked.
  if (config.port === 0) publicUrl = publicUrl.replace(/:0$/, `:${port}`);
  const url = publicUrl;
  log.info({ url, database: db.dialect }, "drover server listening");

  let closing: Promise<void> | undefined;
  return {
    url,
    adminToken,
    store,
    pollVcs: () => poller.pollOnce(),
    close() {
      closing ??= (async () => {
        shutdown.abort();
        await sweeper.stop();
        await poller.stop();
        await reporter.stop();
        await app.close().catch((err: unknown) => log.warn({ err }, "closing HTTP server failed"));
        await webhooks.stop();
        await sessions.stop();
        await presence.stop().catch((err: unknown) => log.warn({ err }, "writing the last heartbeats failed"));
        // Before the database closes: the last metrics export reads it.
        await telemetry.shutdown().catch((err: unknown) => log.warn({ err }, "flushing telemetry failed"));
        await events.close();
        await db.close();
      })();
      return closing;
    },
  };
}
