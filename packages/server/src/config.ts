import { InvalidSettingError, SettingsSource, type LogFormat } from "@drover/protocol";
import {
  defaultArchiveLimits,
  defaultLogFormat,
  otlpSettings,
  type ArchiveLimits,
  type OtlpSettings,
} from "@drover/runtime";
import { resolve, join } from "node:path";
import type { DatabaseLocation } from "./db/connect.js";
import { minAdminTokenLength } from "./store/user-tokens.js";

/** The server's compiled configuration; every duration in milliseconds. */
export interface ServerConfig {
  host: string;
  port: number;
  /** How agents and CLIs reach this server; embedded in pool tokens. */
  publicUrl: string;
  dataDir: string;
  database: DatabaseLocation;
  /** An operator-chosen admin token (DROVER_ADMIN_TOKEN). */
  adminToken: string | undefined;
  leaseTtlMs: number;
  agentTtlMs: number;
  heartbeatIntervalMs: number;
  sweepIntervalMs: number;
  /** How often linked repositories are polled for new commits; 0: never (DROVER_VCS_POLL_SECONDS). */
  vcsPollMs: number;
  /** How long the server waits for a VCS agent's task (DROVER_VCS_AGENT_TASK_SECONDS). */
  vcsAgentTaskMs: number;
  /** How long a running job may ignore a cancel before the server force-cancels it. */
  forceCancelAfterMs: number;
  /** How long retired job tokens are kept before the sweeper deletes them (DROVER_JOB_TOKEN_RETENTION_SECONDS). */
  jobTokenRetentionMs: number;
  archiveLimits: ArchiveLimits;
  /** How long a TFE capability URL works (DROVER_CAPABILITY_URL_SECONDS). */
  capabilityUrlMs: number;
  /** Largest plan JSON upload (DROVER_MAX_PLAN_JSON_MB). */
  maxPlanJsonBytes: number;
  /** Most log bytes stored per job; the rest is dropped (DROVER_MAX_JOB_LOG_MB). */
  maxJobLogBytes: number;
  /** Whether anonymous `/metrics` shows pool names (DROVER_METRICS_PUBLIC_NAMES). */
  metricsPublicNames: boolean;
  /** How long a browser session lasts (DROVER_WEB_SESSION_HOURS). */
  webSessionMs: number;
  /** How long the database-derived gauges are reused (DROVER_METRICS_CACHE_SECONDS). */
  metricsCacheMs: number;
  logLevel: string;
  logFormat: LogFormat;
  tls: { certFile: string; keyFile: string } | undefined;
  /** What terraform's `cloud` block sees: the one organization, the pool of workspaces it creates. */
  tfe: TfeSettings;
  /** Diagnostics: check every JSON answer against the route table (DROVER_DIAGNOSTICS_VALIDATE_RESPONSES). */
  validateResponses: boolean;
  /** OTLP export; undefined without an endpoint. */
  otlp: OtlpSettings | undefined;
}

/** The organization terraform's `cloud` block names, and the pool its new workspaces use. */
export interface TfeSettings {
  organization: string;
  pool: string;
}

/** Flags of `drover server`; each overrides the environment variable of the same meaning. */
export interface ServerFlags {
  dataDir?: string | undefined;
  host?: string | undefined;
  port?: string | number | undefined;
  databaseUrl?: string | undefined;
  publicUrl?: string | undefined;
  adminToken?: string | undefined;
  logLevel?: string | undefined;
  logFormat?: string | undefined;
  tlsCert?: string | undefined;
  tlsKey?: string | undefined;
}

/**
 * Reads DROVER_* variables and flags into a ServerConfig (a flag beats its variable). Invalid
 * values throw one clear line.
 */
export function loadServerConfig(input: {
  env: NodeJS.ProcessEnv;
  flags?: ServerFlags;
  /** Whether the log goes to a terminal (default: whether standard output is one). */
  stdoutIsTty?: boolean;
}): ServerConfig {
  const flags = input.flags ?? {};
  const src = new SettingsSource(input.env, {
    ...flags,
    port: flags.port === undefined ? undefined : String(flags.port),
  });
  const dataDir = resolve(src.get("DROVER_DATA_DIR"));
  const host = src.get("DROVER_HOST");
  const port = src.get("DROVER_PORT");
  const databaseUrl = src.get("DROVER_DATABASE_URL");
  let database: DatabaseLocation;
  if (!databaseUrl || databaseUrl.startsWith("sqlite:")) {
    const path = databaseUrl ? databaseUrl.slice("sqlite:".length).replace(/^\/\//, "") : join(dataDir, "drover.db");
    database = { kind: "sqlite", path: path === ":memory:" ? path : resolve(path) };
  } else if (/^postgres(ql)?:\/\//.test(databaseUrl)) {
    database = {
      kind: "postgres",
      url: databaseUrl,
      connectTimeoutMs: src.get("DROVER_DATABASE_CONNECT_TIMEOUT_SECONDS") * 1000,
      statementTimeoutMs: src.get("DROVER_DATABASE_STATEMENT_TIMEOUT_SECONDS") * 1000,
    };
  } else {
    throw new InvalidSettingError("DROVER_DATABASE_URL", "DROVER_DATABASE_URL must be postgres://… or sqlite:<path>");
  }
  const tlsCert = src.get("DROVER_TLS_CERT_FILE");
  const tlsKey = src.get("DROVER_TLS_KEY_FILE");
  if (Boolean(tlsCert) !== Boolean(tlsKey))
    throw new InvalidSettingError(
      "DROVER_TLS_CERT_FILE",
      "set both DROVER_TLS_CERT_FILE and DROVER_TLS_KEY_FILE, or neither",
    );
  const scheme = tlsCert ? "https" : "http";
  const reachableHost = host === "0.0.0.0" || host === "::" ? "127.0.0.1" : host;
  const publicUrl = (
    src.get("DROVER_PUBLIC_URL") ??
    `${scheme}://${reachableHost.includes(":") ? `[${reachableHost}]` : reachableHost}:${port}`
  ).replace(/\/+$/, "");
  try {
    new URL(publicUrl);
  } catch {
    throw new InvalidSettingError("DROVER_PUBLIC_URL", `DROVER_PUBLIC_URL is not a URL: ${JSON.stringify(publicUrl)}`);
  }
  const maxArchiveMb = src.getOr(
    "DROVER_MAX_CONFIGURATION_MB",
    defaultArchiveLimits.maxCompressedBytes / (1024 * 1024),
  );
  const adminToken = flags.adminToken ?? src.get("DROVER_ADMIN_TOKEN");
  if (
    adminToken !== undefined &&
    (adminToken.length < minAdminTokenLength || new Set(adminToken).size < 8 || /\s/.test(adminToken))
  ) {
    throw new InvalidSettingError(
      "DROVER_ADMIN_TOKEN",
      `DROVER_ADMIN_TOKEN is too weak: use at least ${minAdminTokenLength} random characters without spaces (for example \`openssl rand -base64 32\`)`,
    );
  }
  return {
    host,
    port,
    publicUrl,
    dataDir,
    database,
    adminToken,
    leaseTtlMs: Math.round(src.get("DROVER_LEASE_TTL_SECONDS") * 1000),
    agentTtlMs: Math.round(src.get("DROVER_AGENT_TTL_SECONDS") * 1000),
    heartbeatIntervalMs: Math.round(src.get("DROVER_AGENT_HEARTBEAT_SECONDS") * 1000),
    sweepIntervalMs: src.get("DROVER_SWEEP_INTERVAL_MS"),
    vcsPollMs: Math.round(src.get("DROVER_VCS_POLL_SECONDS") * 1000),
    vcsAgentTaskMs: Math.round(src.get("DROVER_VCS_AGENT_TASK_SECONDS") * 1000),
    forceCancelAfterMs: src.get("DROVER_FORCE_CANCEL_AFTER_SECONDS") * 1000,
    jobTokenRetentionMs: src.get("DROVER_JOB_TOKEN_RETENTION_SECONDS") * 1000,
    archiveLimits: { ...defaultArchiveLimits, maxCompressedBytes: maxArchiveMb * 1024 * 1024 },
    capabilityUrlMs: src.get("DROVER_CAPABILITY_URL_SECONDS") * 1000,
    maxPlanJsonBytes: src.get("DROVER_MAX_PLAN_JSON_MB") * 1024 * 1024,
    maxJobLogBytes: src.get("DROVER_MAX_JOB_LOG_MB") * 1024 * 1024,
    metricsPublicNames: src.get("DROVER_METRICS_PUBLIC_NAMES"),
    webSessionMs: src.get("DROVER_WEB_SESSION_HOURS") * 60 * 60 * 1000,
    metricsCacheMs: src.get("DROVER_METRICS_CACHE_SECONDS") * 1000,
    logLevel: src.get("DROVER_LOG_LEVEL"),
    logFormat: src.get("DROVER_LOG_FORMAT") ?? defaultLogFormat(input.stdoutIsTty ?? process.stdout.isTTY),
    tls: tlsCert && tlsKey ? { certFile: tlsCert, keyFile: tlsKey } : undefined,
    tfe: { organization: src.get("DROVER_TFE_ORGANIZATION"), pool: src.get("DROVER_TFE_POOL") },
    validateResponses: src.get("DROVER_DIAGNOSTICS_VALIDATE_RESPONSES"),
    otlp: otlpSettings(src, "server"),
  };
}
