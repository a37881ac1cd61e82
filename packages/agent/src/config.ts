import { parseRunUser, type RunUser } from "./run-user.js";
import { DroverError, parsePoolToken } from "@drover/protocol";
import { existsSync, readFileSync } from "node:fs";
import { hostname } from "node:os";

/** What the agent does with running jobs on SIGTERM (SPEC §5). */
export type StopAction = "graceful" | "drain" | "force";
export type LogFormat = "json" | "plain" | "dev";

/** The agent's compiled configuration; durations in milliseconds. */
export interface AgentConfig {
  url: string;
  token: string;
  name: string;
  driver: "local" | "kubernetes";
  concurrency: number;
  single: boolean;
  dataDir: string;
  cacheDir: string;
  providerCacheEnabled: boolean;
  providerCacheSizeLimitMb: number;
  moduleCacheEnabled: boolean;
  moduleCacheSizeLimitMb: number;
  binaryCacheSizeLimitMb: number;
  stopAction: StopAction;
  gracePeriodMs: number;
  logFormat: LogFormat;
  debug: boolean;
  /** 0 disables the health server. */
  healthPort: number;
  otlpEndpoint: string | undefined;
  otlpMetricsEnabled: boolean;
  otlpTracesEnabled: boolean;
  /** Extra trust roots (PEM) for the agent's own HTTPS. */
  caCertPem: string | undefined;
  /** CA bundle file given to runs as SSL_CERT_FILE. */
  taskCaCertPath: string | undefined;
  hooksDir: string | undefined;
  hookTimeoutMs: number;
  pollWaitMs: number;
  /** How long a plan's initialized directory waits for its apply on this agent; 0 turns reuse off. */
  planReuseMs: number;
  kubernetesTaskTemplate: string | undefined;
  /** Local driver: the user terraform and hooks run as (DROVER_AGENT_RUN_AS_USER); the agent's own when unset. */
  runAs?: RunUser | undefined;
}

/** Flags of `drover agent run`; each overrides its environment variable. */
export type AgentFlags = Partial<Record<string, string | boolean | undefined>>;

const minimumGraceSeconds: Record<StopAction, number> = { graceful: 30, drain: 120, force: 10 };

function fail(message: string): never {
  throw new DroverError("bad_request", message);
}

function bool(name: string, raw: string | boolean | undefined, fallback: boolean): boolean {
  if (raw === undefined || raw === "") return fallback;
  if (typeof raw === "boolean") return raw;
  if (/^(1|true|yes|on)$/i.test(raw)) return true;
  if (/^(0|false|no|off)$/i.test(raw)) return false;
  return fail(`${name} must be true or false, got ${JSON.stringify(raw)}`);
}

/** A whole-number setting within [min, max]; unset is `fallback`; anything else throws one clear line. */
export function int(name: string, raw: string | boolean | undefined, fallback: number, min: number, max: number): number {
  if (raw === undefined || raw === "" || typeof raw === "boolean") return fallback;
  const n = Number(raw);
  if (!Number.isInteger(n) || n < min || n > max) fail(`${name} must be a whole number from ${min} to ${max}, got ${JSON.stringify(raw)}`);
  return n;
}

/** One of `allowed`; unset is `fallback`; anything else throws one clear line. */
export function oneOf<T extends string>(name: string, raw: string | boolean | undefined, allowed: readonly T[], fallback: T): T {
  if (raw === undefined || raw === "" || typeof raw === "boolean") return fallback;
  if (!(allowed as readonly string[]).includes(raw)) fail(`${name} must be one of ${allowed.join(", ")}, got ${JSON.stringify(raw)}`);
  return raw as T;
}

/** A PEM bundle given as a file path or as base64 of the PEM text. */
function readPem(name: string, raw: string): string {
  if (existsSync(raw)) {
    try {
      return readFileSync(raw, "utf8");
    } catch (err) {
      fail(`${name}: cannot read ${raw}: ${err instanceof Error ? err.message : String(err)}`);
    }
  }
  const decoded = Buffer.from(raw, "base64").toString("utf8");
  if (decoded.includes("-----BEGIN CERTIFICATE-----")) return decoded;
  return fail(`${name} must be the path of a PEM file or a base64-encoded PEM bundle`);
}

/**
 * Reads the agent's settings from the environment and flags, validates them, and compiles
 * them. The only place the agent reads process.env. Any bad value throws one clear line.
 */
export function loadAgentConfig(env: NodeJS.ProcessEnv, flags: AgentFlags = {}): AgentConfig {
  const get = (flag: string, variable: string): string | boolean | undefined => flags[flag] ?? env[variable];
  const str = (flag: string, variable: string): string | undefined => {
    const v = get(flag, variable);
    return typeof v === "string" && v !== "" ? v : undefined;
  };

  let token = str("token", "DROVER_TOKEN");
  const tokenFile = str("tokenFile", "DROVER_TOKEN_FILE");
  if (!token && tokenFile) {
    try {
      token = readFileSync(tokenFile, "utf8").trim();
    } catch (err) {
      fail(`DROVER_TOKEN_FILE ${tokenFile} cannot be read: ${err instanceof Error ? err.message : String(err)}`);
    }
  }
  const driver = oneOf("DROVER_AGENT_DRIVER", get("driver", "DROVER_AGENT_DRIVER"), ["local", "kubernetes"] as const, "local");
  if (!token) fail("no pool token: set DROVER_TOKEN or DROVER_TOKEN_FILE (create one with `drover token create --pool <pool>`)");
  let claimsUrl: string | undefined;
  try {
    claimsUrl = parsePoolToken(token).url;
  } catch (err) {
    fail(`DROVER_TOKEN is not a valid pool token: ${err instanceof Error ? err.message : String(err)}`);
  }
  const url = (str("url", "DROVER_URL") ?? claimsUrl ?? "").replace(/\/+$/, "");
  let parsed: URL;
  try {
    parsed = new URL(url);
  } catch {
    return fail(`DROVER_URL is not a URL: ${JSON.stringify(url)}`);
  }
  if (parsed.protocol !== "http:" && parsed.protocol !== "https:") fail(`DROVER_URL must be http:// or https://, got ${JSON.stringify(url)}`);

  const stopAction = oneOf("DROVER_AGENT_WORKER_ON_STOP_ACTION", get("stopAction", "DROVER_AGENT_WORKER_ON_STOP_ACTION"), ["graceful", "drain", "force"] as const, "graceful");
  const graceSeconds = int("DROVER_AGENT_GRACE_PERIOD_SECONDS", get("gracePeriodSeconds", "DROVER_AGENT_GRACE_PERIOD_SECONDS"), 120, 1, 86_400);
  if (graceSeconds < minimumGraceSeconds[stopAction]) {
    fail(`DROVER_AGENT_GRACE_PERIOD_SECONDS ${graceSeconds} is too short for the ${stopAction} stop action: it needs at least ${minimumGraceSeconds[stopAction]}`);
  }
  const concurrencyMax = driver === "local" ? 5 : 1000;
  const caRaw = str("caCert", "DROVER_CA_CERT");
  const taskCa = str("containerTaskCaCert", "DROVER_CONTAINER_TASK_CA_CERT");
  if (taskCa && !existsSync(taskCa)) fail(`DROVER_CONTAINER_TASK_CA_CERT ${taskCa} does not exist`);
  const runAsRaw = str("runAsUser", "DROVER_AGENT_RUN_AS_USER");
  let runAs: RunUser | undefined;
  if (runAsRaw !== undefined) {
    if (driver !== "local") fail("DROVER_AGENT_RUN_AS_USER applies to the local driver only; Kubernetes runs use the runner container's user");
    const parsedRunAs = parseRunUser(runAsRaw, process.getuid?.());
    if (typeof parsedRunAs === "string") fail(parsedRunAs);
    else runAs = parsedRunAs;
  }
  const hooksDir = str("hooksDir", "DROVER_AGENT_HOOKS_DIR");
  if (hooksDir && !existsSync(hooksDir)) fail(`DROVER_AGENT_HOOKS_DIR ${hooksDir} does not exist`);

  return {
    url,
    token,
    name: str("name", "DROVER_AGENT_NAME") ?? hostname(),
    driver,
    concurrency: int("DROVER_AGENT_CONCURRENCY", get("concurrency", "DROVER_AGENT_CONCURRENCY"), driver === "local" ? 1 : 10, 1, concurrencyMax),
    single: bool("DROVER_AGENT_SINGLE", get("single", "DROVER_AGENT_SINGLE"), false),
    dataDir: str("dataDir", "DROVER_AGENT_DATA_DIR") ?? "/var/lib/drover/data",
    cacheDir: str("cacheDir", "DROVER_AGENT_CACHE_DIR") ?? "/var/lib/drover/cache",
    providerCacheEnabled: bool("DROVER_AGENT_PROVIDER_CACHE_ENABLED", env.DROVER_AGENT_PROVIDER_CACHE_ENABLED, true),
    providerCacheSizeLimitMb: int("DROVER_AGENT_PROVIDER_CACHE_SIZE_LIMIT_MB", env.DROVER_AGENT_PROVIDER_CACHE_SIZE_LIMIT_MB, 20_480, 1, 10_000_000),
    moduleCacheEnabled: bool("DROVER_AGENT_MODULE_CACHE_ENABLED", env.DROVER_AGENT_MODULE_CACHE_ENABLED, false),
    moduleCacheSizeLimitMb: int("DROVER_AGENT_MODULE_CACHE_SIZE_LIMIT_MB", env.DROVER_AGENT_MODULE_CACHE_SIZE_LIMIT_MB, 20_480, 1, 10_000_000),
    binaryCacheSizeLimitMb: int("DROVER_AGENT_BINARY_CACHE_SIZE_LIMIT_MB", env.DROVER_AGENT_BINARY_CACHE_SIZE_LIMIT_MB, 5_120, 1, 10_000_000),
    stopAction,
    gracePeriodMs: graceSeconds * 1000,
    logFormat: oneOf("DROVER_AGENT_LOG_FORMAT", get("logFormat", "DROVER_AGENT_LOG_FORMAT"), ["json", "plain", "dev"] as const, "json"),
    debug: bool("DROVER_AGENT_DEBUG", get("debug", "DROVER_AGENT_DEBUG"), false),
    healthPort: int("DROVER_AGENT_HEALTH_PORT", get("healthPort", "DROVER_AGENT_HEALTH_PORT"), 8080, 0, 65_535),
    otlpEndpoint: str("otlpEndpoint", "DROVER_AGENT_OTLP_ENDPOINT"),
    otlpMetricsEnabled: bool("DROVER_AGENT_OTLP_METRICS_ENABLED", env.DROVER_AGENT_OTLP_METRICS_ENABLED, false),
    otlpTracesEnabled: bool("DROVER_AGENT_OTLP_TRACES_ENABLED", env.DROVER_AGENT_OTLP_TRACES_ENABLED, false),
    caCertPem: caRaw ? readPem("DROVER_CA_CERT", caRaw) : undefined,
    taskCaCertPath: taskCa,
    hooksDir,
    hookTimeoutMs: int("DROVER_AGENT_HOOK_TIMEOUT_SECONDS", env.DROVER_AGENT_HOOK_TIMEOUT_SECONDS, 600, 1, 86_400) * 1000,
    pollWaitMs: int("DROVER_AGENT_POLL_WAIT_MS", env.DROVER_AGENT_POLL_WAIT_MS, 50_000, 0, 50_000),
    planReuseMs: int("DROVER_AGENT_PLAN_REUSE_SECONDS", env.DROVER_AGENT_PLAN_REUSE_SECONDS, 600, 0, 86_400) * 1000,
    kubernetesTaskTemplate: str("taskTemplate", "DROVER_AGENT_KUBERNETES_TASK_TEMPLATE"),
    runAs,
  };
}

/** Timeouts of each stop action, derived from the grace period G (SPEC §5). */
export interface StopPlan {
  /** How long running jobs may go on before terraform is signalled. */
  continueMs: number;
  /** The signal sent when that time is up. */
  firstSignal: "SIGTERM" | "SIGKILL";
  /** After the first signal, how long until SIGKILL. */
  killAfterMs: number;
  /** From the stop signal to the agent's exit, whatever the server does. */
  budgetMs: number;
}

/** Time kept at the end of a stop budget for deregistering and exiting. */
export const stopReserveMs = 1_500;

export function stopPlan(action: StopAction, gracePeriodMs: number): StopPlan {
  const g = gracePeriodMs;
  switch (action) {
    case "graceful":
      return { continueMs: 0, firstSignal: "SIGTERM", killAfterMs: Math.max(0, g - 10_000), budgetMs: g };
    case "drain":
      return { continueMs: Math.max(0, g - 70_000), firstSignal: "SIGTERM", killAfterMs: 60_000, budgetMs: g };
    case "force":
      return { continueMs: 0, firstSignal: "SIGKILL", killAfterMs: 0, budgetMs: Math.min(g, 10_000) };
  }
}
