import { DroverError, versionSatisfies } from "@drover/protocol";
import { defaultArchiveLimits, secretForms, sensitiveValues } from "@drover/runtime";
import { existsSync, readFileSync, realpathSync } from "node:fs";
import { join, relative, resolve } from "node:path";
import type { JobContext } from "../context.js";
import { extractConfiguration } from "../extract.js";
import { giveRemoteStateToken } from "../remote-state-token.js";
import type { PlanDirKey } from "../kept-plans.js";
import { tfvarsFiles } from "../tfvars.js";
import type { Stage } from "../pipeline.js";
import { EngineError } from "../../engines/errors.js";
import { lockFileName } from "../../providers/config-scan.js";
import { agentTag, processTagVariable } from "../../runners/orphans.js";
import { chownTree } from "../../runners/run-user.js";

/** What a job's directory holds, for reusing a plan's directory in its apply. */
export function planDirKey(c: Pick<JobContext, "assignment">): PlanDirKey {
  const a = c.assignment;
  return {
    runId: a.runId,
    configurationVersionId: a.configurationVersionId,
    engine: a.workspace.engine,
    engineVersion: a.workspace.engineVersion,
    workingDirectory: a.workspace.workingDirectory,
  };
}

/** The hook's file in DROVER_AGENT_HOOKS_DIR, when there is one. */
export function hookPath(c: Pick<JobContext, "settings">, name: string): string | undefined {
  if (!c.settings.hooksDir) return undefined;
  const path = join(c.settings.hooksDir, name);
  return existsSync(path) ? path : undefined;
}

/** This job's value of the process tag every process it starts carries. */
export function processTag(c: Pick<JobContext, "settings" | "assignment">): string {
  return `${agentTag(c.settings.dataDir)}:${c.assignment.jobId}-${c.assignment.attempt}`;
}

/**
 * The run directory (or this agent's kept plan directory of the run), the variables and the
 * secrets among them; the configuration and, for an apply, the plan file start their way.
 */
export const fetch: Stage = {
  name: "fetch",
  retries: "server calls",
  async run(c, retry) {
    const a = c.assignment;
    // A pre-init hook may prepare more than the directory, so it gets its init every time.
    c.reused = a.phase === "apply" && !hookPath(c, "pre-init") && c.keptPlans?.take(planDirKey(c), c.runDir) === true;
    if (!c.reused) c.files.prepare(c.runDir, c.configDir);
    // The configuration travels while the variables are read and the engine is found; if one of
    // those fails, the job's end aborts it. Transfers retry themselves, within their budget.
    c.configuration = c.reused ? undefined : c.job.configuration(c.signal);
    c.configuration?.catch(() => undefined);
    // A kept plan directory holds the very plan file this agent uploaded: no need to fetch it back.
    const plan = a.phase === "apply" && !c.reused ? c.job.downloadPlan(c.signal) : undefined;
    plan?.catch(() => undefined);
    c.variables = await retry((signal) => c.job.variables(signal));
    c.secrets = secretForms([
      ...c.variables.filter((v) => v.sensitive).flatMap(sensitiveValues),
      a.jobToken,
      ...(c.settings.token === undefined ? [] : [c.settings.token]),
    ]);
    c.log.setSecrets(c.secrets);
    if (plan) c.files.write(c.planPath, await plan);
    return { "drover.reused": c.reused };
  },
};

/**
 * The engine binary: from the agent's cache (a runner container gets it mounted read-only),
 * else the runner's own, which must be a version the workspace asks for.
 */
export const engine: Stage = {
  name: "engine",
  retries: "nothing",
  async run(c) {
    const a = c.assignment;
    if (c.engines) {
      const lease = await c.engines.acquire(
        a.workspace.engine,
        a.workspace.engineVersion,
        c.signal,
        c.runner.ownEngines,
      );
      c.engineLease = lease;
      c.binary =
        lease.downloaded && c.runner.useEngine
          ? { path: c.runner.useEngine(lease.path), version: lease.version }
          : lease;
    } else
      c.binary = await c.runner.engine(a.workspace.engine, a.workspace.engineVersion, c.settings.cacheDir, c.signal);
    const binary = c.binary;
    if (
      !c.engineLease &&
      a.workspace.engineVersion !== null &&
      !versionSatisfies(binary.version, a.workspace.engineVersion)
    ) {
      throw new EngineError(
        "engine_unavailable",
        `the runner's ${a.workspace.engine} is ${binary.version}, but the workspace asks for ${a.workspace.engineVersion}; nothing was run: use a runner image with that version, or change the workspace's engineVersion`,
      );
    }
    c.workDir = resolve(c.configDir, a.workspace.workingDirectory || ".");
    c.writeDir = c.workDir;
    if (relative(c.configDir, c.workDir).startsWith(".."))
      throw new DroverError("bad_request", "the workspace's working directory is outside the configuration");
    c.log.line(
      `[drover] ${a.phase}${a.isDestroy ? " (destroy)" : ""} of run ${a.runId} on agent ${c.settings.name}\n` +
        `[drover] ${a.workspace.engine} ${binary.version} (${binary.path}); workspace ${a.workspace.name}; working directory ${a.workspace.workingDirectory || "."}`,
    );
    for (const note of [...(c.settings.notes ?? []), ...(c.engineLease?.notes ?? [])]) c.log.line(`[drover] ${note}`);
    if (c.reused)
      c.log.line(
        "[drover] reusing this run's initialized plan directory on this agent: configuration download, init and plan download skipped",
      );
  },
};

/**
 * The configuration unpacked (its working directory checked to stay inside, links included),
 * with the workspace's terraform variables and the http backend override written beside it.
 */
export const extract: Stage = {
  name: "extract",
  retries: "server calls",
  when: (c) => !c.reused,
  async run(c) {
    const a = c.assignment;
    const archive = await (c.configuration ?? c.job.configuration(c.signal));
    const limits = {
      ...defaultArchiveLimits,
      maxCompressedBytes: a.maxConfigurationBytes ?? defaultArchiveLimits.maxCompressedBytes,
    };
    await c.files.withDir(c.configDir, (dir) => extractConfiguration(archive, dir, limits));
    if (!existsSync(c.workDir))
      throw new DroverError(
        "not_found",
        `the working directory ${a.workspace.workingDirectory} is not in the configuration`,
      );
    const realConfig = realpathSync(c.configDir);
    const realWork = realpathSync(c.workDir);
    if (realWork !== realConfig && !realWork.startsWith(realConfig + "/")) {
      throw new DroverError(
        "invalid_archive",
        `the working directory ${a.workspace.workingDirectory} leads outside the configuration through a link`,
      );
    }
    // Locally the agent writes through the real path (the archive's links were checked above);
    // a runner's files refuse every link.
    if (!c.runner.files) c.writeDir = realWork;
    for (const file of tfvarsFiles(c.variables)) c.files.write(join(c.writeDir, file.name), file.content);
    // terraform merges *_override.tf files into the configuration: this selects the http
    // backend, which the TF_HTTP_* variables configure.
    c.files.write(join(c.writeDir, "drover_backend_override.tf"), 'terraform {\n  backend "http" {}\n}\n');
  },
};

/**
 * The environment of the steps, the module and provider caches prepared for the configuration,
 * and the run's files given to the run user.
 */
export const caches: Stage = {
  name: "caches",
  retries: "nothing",
  async run(c) {
    c.env = environment(c);
    // Modules first: the providers their modules require are prepared with the root module's.
    if (c.moduleCache) {
      c.moduleLease = await c.moduleCache.prepare(c.writeDir, c.signal, c.files);
      for (const note of c.moduleLease.notes) c.log.line(`[drover] module cache: ${note}`);
      if (c.moduleLease.installed.length > 0)
        c.log.line(`[drover] modules from the agent's cache: ${c.moduleLease.installed.join(", ")}`);
    }
    await useProviderCache(c);
    if (c.settings.runAs) {
      // Runs are another user (DROVER_AGENT_RUN_AS_USER): the run directory is theirs, and so
      // is HOME, since the agent's is not readable to them.
      chownTree(c.runDir, c.settings.runAs);
      c.env.HOME = c.runDir;
    }
  },
};

/** The proxy settings, in both the spellings tools read. */
const proxyVariable = /^(https?_proxy|no_proxy)$/i;

/** The environment terraform and hooks see: never the agent's own tokens. */
function environment(c: JobContext): NodeJS.ProcessEnv {
  const a = c.assignment;
  const env: NodeJS.ProcessEnv = {};
  const proxiesOnly = c.runner.agentEnvironment === "proxies";
  for (const [k, v] of Object.entries(process.env))
    if (!k.startsWith("DROVER_") && (!proxiesOnly || proxyVariable.test(k))) env[k] = v;
  const stateUrl = c.serverUrl + a.statePath;
  Object.assign(env, {
    TF_IN_AUTOMATION: "1",
    TF_INPUT: "0",
    CHECKPOINT_DISABLE: "1",
    TF_HTTP_ADDRESS: stateUrl,
    TF_HTTP_LOCK_ADDRESS: stateUrl,
    TF_HTTP_UNLOCK_ADDRESS: stateUrl,
    TF_HTTP_USERNAME: "drover",
    TF_HTTP_PASSWORD: a.jobToken,
    DROVER_RUN_ID: a.runId,
    DROVER_WORKSPACE_NAME: a.workspace.name,
    DROVER_WORKSPACE_ID: a.workspace.id,
    DROVER_RUN_PHASE: a.phase,
    DROVER_RUN_IS_DESTROY: String(a.isDestroy),
    [processTagVariable]: processTag(c),
  });
  if (c.settings.taskCaCertPath) env.SSL_CERT_FILE = c.settings.taskCaCertPath;
  const workspaceEnv = c.variables.filter((v) => v.kind === "env");
  // The job token is already among the secrets the log is redacted of (stage "inputs").
  if (a.tfeHostname !== undefined)
    giveRemoteStateToken(
      env,
      a.tfeHostname,
      a.jobToken,
      workspaceEnv.map((v) => v.key),
    );
  for (const v of workspaceEnv) env[v.key] = v.value;
  return env;
}

/**
 * Prepares the providers the configuration names in the agent's cache and points the run's
 * own CLI configuration at it (the agent's CLI configuration, if any, plus the cache's
 * provider_installation). The run reads the cache and never writes it.
 */
async function useProviderCache(c: JobContext): Promise<void> {
  if (!c.providerCache) return;
  if (c.variables.some((v) => v.kind === "env" && v.key === "TF_CLI_CONFIG_FILE")) {
    // The agent never reads a file a workspace names: it may be one only the agent can read.
    c.log.line("[drover] provider cache not used: the workspace sets TF_CLI_CONFIG_FILE");
    return;
  }
  // Not the workspace's (returned above): the agent's own, passed on by environment().
  const baseFile = c.env.TF_CLI_CONFIG_FILE;
  const base = baseFile && existsSync(baseFile) ? readFileSync(baseFile, "utf8") : "";
  if (/\bprovider_installation\b/.test(base)) {
    c.log.line("[drover] provider cache not used: the agent's TF_CLI_CONFIG_FILE has its own provider_installation");
    return;
  }
  const lease = await c.providerCache.prepare(c.workDir, c.signal, c.moduleLease?.dirs);
  c.providerLease = lease;
  for (const note of lease.notes) c.log.line(`[drover] provider cache: ${note}`);
  if (lease.prepared.length > 0) c.log.line(`[drover] providers from the agent's cache: ${lease.prepared.join(", ")}`);
  if (lease.lockFile !== undefined) c.files.write(join(c.workDir, lockFileName), lease.lockFile);
  const configPath = join(c.runDir, "drover-cli.tfrc");
  c.files.write(configPath, `${base}\n${lease.installation}`);
  c.env.TF_CLI_CONFIG_FILE = configPath;
}
