import { DroverError, defaultArchiveLimits, type ArchiveLimits } from "@drover/protocol";
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
  /** How long a running job may ignore a cancel before the server force-cancels it. */
  forceCancelAfterMs: number;
  archiveLimits: ArchiveLimits;
  logLevel: string;
  tls: { certFile: string; keyFile: string } | undefined;
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
}

function positiveInt(name: string, raw: string | number | undefined, fallback: number, min = 1): number {
  if (raw === undefined || raw === "") return fallback;
  const n = typeof raw === "number" ? raw : Number(raw);
  if (!Number.isInteger(n) || n < min) throw new DroverError("bad_request", `${name} must be a whole number ≥ ${min}, got ${JSON.stringify(raw)}`);
  return n;
}

/**
 * Reads DROVER_* variables and flags into a ServerConfig; the only place the server reads the
 * environment. Invalid values throw one clear line.
 */
export function loadServerConfig(input: { env: NodeJS.ProcessEnv; flags?: ServerFlags }): ServerConfig {
  const env = input.env;
  const flags = input.flags ?? {};
  const dataDir = resolve(flags.dataDir ?? env.DROVER_DATA_DIR ?? ".drover");
  const host = flags.host ?? env.DROVER_HOST ?? "127.0.0.1";
  const port = positiveInt("DROVER_PORT", flags.port ?? env.DROVER_PORT, 8800, 0);
  if (port > 65535) throw new DroverError("bad_request", `DROVER_PORT must be at most 65535, got ${port}`);
  const databaseUrl = flags.databaseUrl ?? env.DROVER_DATABASE_URL;
  let database: DatabaseLocation;
  if (!databaseUrl || databaseUrl.startsWith("sqlite:")) {
    const path = databaseUrl ? databaseUrl.slice("sqlite:".length).replace(/^\/\//, "") : join(dataDir, "drover.db");
    database = { kind: "sqlite", path: path === ":memory:" ? path : resolve(path) };
  } else if (/^postgres(ql)?:\/\//.test(databaseUrl)) {
    database = {
      kind: "postgres",
      url: databaseUrl,
      connectTimeoutMs: positiveInt("DROVER_DATABASE_CONNECT_TIMEOUT_SECONDS", env.DROVER_DATABASE_CONNECT_TIMEOUT_SECONDS, 10) * 1000,
      statementTimeoutMs: positiveInt("DROVER_DATABASE_STATEMENT_TIMEOUT_SECONDS", env.DROVER_DATABASE_STATEMENT_TIMEOUT_SECONDS, 60) * 1000,
    };
  } else {
    throw new DroverError("bad_request", "DROVER_DATABASE_URL must be postgres://… or sqlite:<path>");
  }
  const tlsCert = env.DROVER_TLS_CERT_FILE;
  const tlsKey = env.DROVER_TLS_KEY_FILE;
  if (Boolean(tlsCert) !== Boolean(tlsKey)) throw new DroverError("bad_request", "set both DROVER_TLS_CERT_FILE and DROVER_TLS_KEY_FILE, or neither");
  const scheme = tlsCert ? "https" : "http";
  const reachableHost = host === "0.0.0.0" || host === "::" ? "127.0.0.1" : host;
  const publicUrl = (flags.publicUrl ?? env.DROVER_PUBLIC_URL ?? `${scheme}://${reachableHost.includes(":") ? `[${reachableHost}]` : reachableHost}:${port}`).replace(/\/+$/, "");
  try {
    new URL(publicUrl);
  } catch {
    throw new DroverError("bad_request", `DROVER_PUBLIC_URL is not a URL: ${JSON.stringify(publicUrl)}`);
  }
  const maxArchiveMb = positiveInt("DROVER_MAX_CONFIGURATION_MB", env.DROVER_MAX_CONFIGURATION_MB, defaultArchiveLimits.maxCompressedBytes / (1024 * 1024));
  const adminToken = flags.adminToken ?? env.DROVER_ADMIN_TOKEN ?? undefined;
  if (adminToken !== undefined && (adminToken.length < minAdminTokenLength || new Set(adminToken).size < 8 || /\s/.test(adminToken))) {
    throw new DroverError("bad_request", `DROVER_ADMIN_TOKEN is too weak: use at least ${minAdminTokenLength} random characters without spaces (for example \`openssl rand -base64 32\`)`);
  }
  return {
    host,
    port,
    publicUrl,
    dataDir,
    database,
    adminToken,
    leaseTtlMs: positiveInt("DROVER_LEASE_TTL_SECONDS", env.DROVER_LEASE_TTL_SECONDS, 30) * 1000,
    agentTtlMs: positiveInt("DROVER_AGENT_TTL_SECONDS", env.DROVER_AGENT_TTL_SECONDS, 60) * 1000,
    heartbeatIntervalMs: positiveInt("DROVER_AGENT_HEARTBEAT_SECONDS", env.DROVER_AGENT_HEARTBEAT_SECONDS, 10) * 1000,
    sweepIntervalMs: positiveInt("DROVER_SWEEP_INTERVAL_MS", env.DROVER_SWEEP_INTERVAL_MS, 1000, 10),
    forceCancelAfterMs: positiveInt("DROVER_FORCE_CANCEL_AFTER_SECONDS", env.DROVER_FORCE_CANCEL_AFTER_SECONDS, 120) * 1000,
    archiveLimits: { ...defaultArchiveLimits, maxCompressedBytes: maxArchiveMb * 1024 * 1024 },
    logLevel: flags.logLevel ?? env.DROVER_LOG_LEVEL ?? "info",
    tls: tlsCert && tlsKey ? { certFile: tlsCert, keyFile: tlsKey } : undefined,
  };
}
