import { parseRunUsers, type RunUser } from "./runners/run-user.js";
import {
  cacheSettings,
  otlpSettings,
  stopAndTrustSettings,
  type CacheSettings,
  type OtlpSettings,
} from "./shared-settings.js";
import {
  InvalidSettingError,
  minimumGraceSeconds,
  parsePoolToken,
  SettingsSource,
  settingParsers,
  settings,
  settingsReadBy,
  type FlagValues,
  type LogFormat,
  type SettingName,
  type StopAction,
  messageOf,
} from "@drover/protocol";
import { readFileSync } from "node:fs";
import { hostname } from "node:os";

export type { LogFormat, StopAction };

/**
 * What every process holding a pool session reads (the run agent, the controller, the VCS agent);
 * durations in milliseconds.
 */
export interface SessionConfig {
  url: string;
  token: string;
  /** Where the token came from (a flag, a variable or a file), named when the server refuses it. */
  tokenSource: string;
  name: string;
  dataDir: string;
  gracePeriodMs: number;
  logFormat: LogFormat;
  debug: boolean;
  /** 0 disables the health server. */
  healthPort: number;
  /** Address of the health port; undefined: every interface of both families. */
  healthAddress: string | undefined;
  /** OTLP export (DROVER_AGENT_OTLP_*); undefined without an endpoint. */
  otlp: OtlpSettings | undefined;
  /** Extra trust roots (PEM) for the agent's own HTTPS. */
  caCertPem: string | undefined;
  pollWaitMs: number;
}

/** The run agent's (and controller's) compiled configuration; durations in milliseconds. */
export interface AgentConfig extends SessionConfig, CacheSettings {
  driver: "local" | "kubernetes" | "docker";
  concurrency: number;
  single: boolean;
  stopAction: StopAction;
  /** The pod this process runs in, inside Kubernetes (a telemetry resource attribute). */
  kubernetesPod: string | undefined;
  /** File the agent keeps its running-job count in, for the pod-annotator sidecar (DROVER_AGENT_STATUS_FILE). */
  statusFile: string | undefined;
  /** CA bundle file given to runs as SSL_CERT_FILE. */
  taskCaCertPath: string | undefined;
  hooksDir: string | undefined;
  hookTimeoutMs: number;
  /** How long a plan's initialized directory waits for its apply on this agent; 0 turns reuse off. */
  planReuseMs: number;
  kubernetesTaskTemplate: string | undefined;
  /** Docker driver settings; unset for the other drivers. */
  docker?: DockerSettings | undefined;
  /**
   * Local driver: the users terraform and hooks run as, one per job slot (DROVER_AGENT_RUN_AS_USER);
   * the agent's own when unset.
   */
  runUsers?: readonly RunUser[] | undefined;
}

/** How the docker driver starts each job's container (DROVER_AGENT_DOCKER_*). */
export interface DockerSettings {
  /** Path of the Docker Engine API's unix socket. */
  socketPath: string;
  /** Runner image each job's container starts from, unless its workspace names an allowed one. */
  image: string;
  /** Images (exact, or prefixes ending in `*`) a workspace's `runnerImage` may name; empty: none. */
  allowedImages: string[];
  /** The container's user, never root; files the agent writes for the run are given to it. */
  user: RunUser;
  /** Memory limit of each job's container in bytes; 0: none. */
  memoryBytes: number;
  /** CPU limit of each job's container in billionths of a CPU; 0: none. */
  nanoCpus: number;
  /** Network each job's container joins (`bridge`, `host` or a network's name). */
  network: string; /** Disk a job's directories may take on the host, in bytes, before its container is killed; 0: no bound. */
  diskBytes: number;
}

/** Flags of `drover agent run`; each overrides its environment variable. */
export type AgentFlags = FlagValues;

/**
 * Reads the agent's settings from the environment and flags (a flag beats its variable, which
 * beats a file), validates them, and compiles them. Any bad value throws one clear line.
 */
export function loadAgentConfig(env: NodeJS.ProcessEnv, flags: AgentFlags = {}): AgentConfig {
  const src = new SettingsSource(env, flags);
  const driver = src.get("DROVER_AGENT_DRIVER");
  const session = loadSessionConfig(src);
  const { stopAction } = stopAndTrustSettings(src);
  checkGracePeriod(stopAction, session.gracePeriodMs / 1000);
  const maxConcurrency = driver === "local" ? 5 : driver === "docker" ? 50 : 1000;
  const concurrency = src.getOr(
    "DROVER_AGENT_CONCURRENCY",
    driver === "local" ? 1 : 10,
    settingParsers.intIn(1, maxConcurrency),
  );
  const runAsRaw = src.get("DROVER_AGENT_RUN_AS_USER");
  let runUsers: RunUser[] | undefined;
  if (runAsRaw !== undefined) {
    if (driver !== "local")
      throw new InvalidSettingError(
        "DROVER_AGENT_RUN_AS_USER",
        "DROVER_AGENT_RUN_AS_USER applies to the local driver only; Kubernetes and docker runs use the runner container's user (DROVER_AGENT_DOCKER_USER)",
      );
    const parsed = parseRunUsers(runAsRaw, process.getuid?.(), concurrency);
    if (typeof parsed === "string") throw new InvalidSettingError("DROVER_AGENT_RUN_AS_USER", parsed);
    runUsers = parsed;
  }

  refuseUnhonoured(src, driver);

  return {
    ...session,
    driver,
    concurrency,
    single: src.get("DROVER_AGENT_SINGLE"),
    ...cacheSettings(src),
    stopAction,
    kubernetesPod: env.KUBERNETES_SERVICE_HOST ? hostname() : undefined,
    statusFile: src.get("DROVER_AGENT_STATUS_FILE"),
    taskCaCertPath: src.get("DROVER_CONTAINER_TASK_CA_CERT"),
    hooksDir: src.get("DROVER_AGENT_HOOKS_DIR"),
    hookTimeoutMs: src.get("DROVER_AGENT_HOOK_TIMEOUT_SECONDS") * 1000,
    planReuseMs: src.get("DROVER_AGENT_PLAN_REUSE_SECONDS") * 1000,
    kubernetesTaskTemplate: src.get("DROVER_AGENT_KUBERNETES_TASK_TEMPLATE"),
    runUsers,
    docker: driver === "docker" ? dockerSettings(src) : undefined,
  };
}

/**
 * Reads the settings of a pool session: the pool token (`--token` beats `--token-file` beats
 * DROVER_TOKEN beats DROVER_TOKEN_FILE), the server, the agent's name and data dir, logging,
 * health, OTLP, trust, grace period and poll wait. Any bad value throws one clear line.
 */
export function loadSessionConfig(src: SettingsSource): SessionConfig {
  const tokenFrom = src.origin("DROVER_TOKEN");
  const fileFrom = src.origin("DROVER_TOKEN_FILE");
  let token =
    tokenFrom === "flag" || (tokenFrom === "env" && fileFrom !== "flag") ? src.get("DROVER_TOKEN") : undefined;
  const tokenFile = token === undefined ? src.get("DROVER_TOKEN_FILE") : undefined;
  // Errors name what the user gave: `--token-file <path>` is not `DROVER_TOKEN`.
  const flag = (origin: string | undefined, name: string) => (origin === "flag" ? `--${name}` : undefined);
  const tokenSource =
    tokenFile !== undefined
      ? `${flag(fileFrom, "token-file") ?? "DROVER_TOKEN_FILE"} ${tokenFile}`
      : (flag(tokenFrom, "token") ?? "DROVER_TOKEN");
  if (tokenFile !== undefined) {
    try {
      token = readFileSync(tokenFile, "utf8").trim();
    } catch (err) {
      throw new InvalidSettingError("DROVER_TOKEN_FILE", `${tokenSource} cannot be read: ${messageOf(err)}`, {
        hint: "Give the path of a file holding the pool token.",
      });
    }
  }
  const lines = token?.split(/\r?\n/).filter((l) => l.trim() !== "").length ?? 0;
  if (tokenFile !== undefined && lines > 1)
    throw new InvalidSettingError("DROVER_TOKEN_FILE", `${tokenSource} has ${lines} lines; expected one drv_p_ token`, {
      hint: "Write the token alone: `drover token create --pool <pool> > <file>` does.",
    });
  if (!token)
    throw new InvalidSettingError(
      "DROVER_TOKEN",
      "no pool token: set DROVER_TOKEN or DROVER_TOKEN_FILE (create one with `drover token create --pool <pool>`)",
    );
  let claimsUrl: string | undefined;
  try {
    claimsUrl = parsePoolToken(token).url;
  } catch (err) {
    throw new InvalidSettingError("DROVER_TOKEN", `${tokenSource} is not a valid pool token: ${messageOf(err)}`, {
      hint: "Create one with `drover token create --pool <pool>`.",
    });
  }
  const { gracePeriodMs, caCertPem } = stopAndTrustSettings(src);
  return {
    url: src.get("DROVER_URL") ?? settingParsers.httpUrl(claimsUrl ?? "", "DROVER_URL"),
    token,
    tokenSource,
    name: src.get("DROVER_AGENT_NAME") ?? hostname(),
    dataDir: src.get("DROVER_AGENT_DATA_DIR"),
    gracePeriodMs,
    logFormat: src.get("DROVER_AGENT_LOG_FORMAT"),
    debug: src.get("DROVER_AGENT_DEBUG"),
    healthPort: src.getOr("DROVER_AGENT_HEALTH_PORT", 8080),
    healthAddress: src.get("DROVER_AGENT_HEALTH_ADDRESS"),
    otlp: otlpSettings(src),
    caCertPem,
    pollWaitMs: src.get("DROVER_AGENT_POLL_WAIT_MS"),
  };
}

/**
 * The user of runs' containers under a root agent. Any host process of the same uid may read a
 * run's /proc environ (its job token and secrets), so it is one no host account has: 65532,
 * the unprivileged uid distroless images reserve, above the ranges `useradd` hands out and
 * clear of `nobody` (65534), which host daemons do run as. It stays below 65536 so that the
 * default user-namespace maps (rootless podman, userns-remap) still hold it.
 */
export const defaultContainerUser = "65532:65532";

/** The docker driver's settings (DROVER_AGENT_DOCKER_*); any bad value throws one clear line. */
function dockerSettings(src: SettingsSource): DockerSettings {
  const agentUid = process.getuid?.() ?? 0;
  const agentGid = process.getgid?.() ?? 0;
  const userRaw =
    src.get("DROVER_AGENT_DOCKER_USER") ?? (agentUid === 0 ? defaultContainerUser : `${agentUid}:${agentGid}`);
  const m = /^(\d+)(?::(\d+))?$/.exec(userRaw);
  if (!m)
    throw new InvalidSettingError(
      "DROVER_AGENT_DOCKER_USER",
      `DROVER_AGENT_DOCKER_USER must be a numeric uid or uid:gid, got ${JSON.stringify(userRaw)}`,
    );
  const user = { uid: Number(m[1]), gid: Number(m[2] ?? m[1]) };
  if (user.uid === 0 || user.gid === 0)
    throw new InvalidSettingError(
      "DROVER_AGENT_DOCKER_USER",
      "DROVER_AGENT_DOCKER_USER must not be root (uid or gid 0): runs' containers run as an unprivileged user",
    );
  if (agentUid !== 0 && (user.uid !== agentUid || user.gid !== agentGid)) {
    throw new InvalidSettingError(
      "DROVER_AGENT_DOCKER_USER",
      `DROVER_AGENT_DOCKER_USER ${userRaw} differs from the agent's own user ${agentUid}:${agentGid}; only an agent running as root can give run directories to another user, so unset it or run the agent as root`,
    );
  }
  const memoryMb = src.get("DROVER_AGENT_DOCKER_MEMORY_MB");
  if (memoryMb > 0 && memoryMb < 16)
    throw new InvalidSettingError(
      "DROVER_AGENT_DOCKER_MEMORY_MB",
      `DROVER_AGENT_DOCKER_MEMORY_MB must be 0 (no limit) or at least 16, got ${memoryMb}`,
    );
  return {
    socketPath: src.get("DROVER_AGENT_DOCKER_HOST").replace(/^unix:\/\//, ""),
    image: src.get("DROVER_AGENT_DOCKER_IMAGE"),
    allowedImages: src.get("DROVER_AGENT_DOCKER_ALLOWED_IMAGES") ?? [],
    user,
    memoryBytes: memoryMb * 1024 * 1024,
    nanoCpus: Math.round(src.get("DROVER_AGENT_DOCKER_CPUS") * 1e9),
    network: src.get("DROVER_AGENT_DOCKER_NETWORK"),
    diskBytes: src.get("DROVER_AGENT_DOCKER_DISK_MB") * 1024 * 1024,
  };
}

/** A grace period shorter than the stop action needs is a config error. */
export function checkGracePeriod(stopAction: StopAction, graceSeconds: number): void {
  if (graceSeconds < minimumGraceSeconds[stopAction]) {
    throw new InvalidSettingError(
      "DROVER_AGENT_GRACE_PERIOD_SECONDS",
      `DROVER_AGENT_GRACE_PERIOD_SECONDS ${graceSeconds} is too short for the ${stopAction} stop action: it needs at least ${minimumGraceSeconds[stopAction]}`,
      {
        hint: `Raise it (and the pod's terminationGracePeriodSeconds) to ${minimumGraceSeconds[stopAction]} or more, or choose another stop action.`,
      },
    );
  }
}

/** Timeouts of each stop action, derived from the grace period G. */
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

/** Settings only some drivers can honour, the drivers, and why the others cannot. */
const driverOnlySettings: [SettingName, AgentConfig["driver"][], string][] = [
  [
    "DROVER_AGENT_HOOKS_DIR",
    ["local", "docker"],
    "a Kubernetes run's pod starts from the runner image, where no hooks run",
  ],
  ["DROVER_AGENT_HOOK_TIMEOUT_SECONDS", ["local", "docker"], "a Kubernetes run's pod runs no hooks"],
  [
    "DROVER_AGENT_PLAN_REUSE_SECONDS",
    ["local"],
    "each phase of a docker or Kubernetes run starts in a new container, which keeps nothing of the plan's",
  ],
];

/** Refuses a setting this agent would ignore (the VCS agent's own, another driver's): a setting does what it says, or is refused. */
function refuseUnhonoured(src: SettingsSource, driver: AgentConfig["driver"]): void {
  for (const name of settingsReadBy("vcs-agent")) {
    if (settings[name].readers.length > 1 || src.origin(name) === undefined) continue;
    throw new InvalidSettingError(
      name,
      `${name} is read by the VCS agent (\`drover agent vcs\`) only; this agent does not use it`,
    );
  }
  for (const [name, drivers, why] of driverOnlySettings) {
    if (drivers.includes(driver) || src.origin(name) === undefined) continue;
    const which = drivers.length === 1 ? `the ${drivers[0]} driver only` : `the ${drivers.join(" and ")} drivers`;
    throw new InvalidSettingError(name, `${name} applies to ${which}; ${why}`);
  }
}
