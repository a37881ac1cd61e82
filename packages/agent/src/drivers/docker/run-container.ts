import { DroverError, messageOf, type JobAssignment } from "@drover/protocol";
import type { Logger } from "pino";
import { createRequire } from "node:module";
import type { AgentConfig } from "../../config.js";
import type { JobSettings } from "../../job/job.js";
import { ContainerJob } from "../../runners/container.js";
import { agentTag } from "../../runners/orphans.js";
import type { Runner } from "../../runners/runner.js";
import type { DockerEngine } from "./engine-api.js";
import { reapDockerOrphans } from "./orphans.js";
import type { ContainerRemovals } from "./removals.js";

/**
 * The exec-loop script shipped with this package; the docker driver mounts it into every run
 * container. Resolved through the package's exports, not relative to this file, so that the
 * agent bundle (decision 0037), which lives in the CLI's dist, finds it too.
 */
const execLoopPath = createRequire(import.meta.url).resolve("@drover/agent/exec-loop.sh");

/** One job's container: the runner its JobRun drives, the configuration that JobRun uses, and its cleanup. */
export interface RunContainer {
  runner: Runner;
  config: AgentConfig & Pick<JobSettings, "runAs">;
  close(): Promise<void>;
}

/**
 * Before any work: the Engine answers, and containers an earlier process of this agent left
 * are removed and their runs ended.
 */
export async function prepareDocker(engine: DockerEngine, config: AgentConfig, log: Logger): Promise<void> {
  await engine.version(AbortSignal.timeout(30_000));
  await reapDockerOrphans(engine, config.dataDir, agentTag(config.dataDir), config.caCertPem, log);
}

/**
 * The docker driver's runner for one job (its own container) and the configuration its JobRun
 * uses: the run directory lives in the job's directory, providers are not shared between runs'
 * containers, and an agent running as root gives the run's files to the container's user.
 */
export function runContainer(options: {
  engine: DockerEngine;
  config: AgentConfig;
  assignment: JobAssignment;
  log: Logger;
  removals: ContainerRemovals;
}): RunContainer {
  const { engine, config, assignment, removals } = options;
  const docker = config.docker!;
  try {
    const job = new ContainerJob({
      engine,
      settings: docker,
      assignment,
      dataDir: config.dataDir,
      serverUrl: config.url,
      agentName: config.name,
      agentTag: agentTag(config.dataDir),
      execLoopPath,
      taskCaCertPath: config.taskCaCertPath,
      hooksDir: config.hooksDir,
      log: options.log.child({ job: assignment.jobId }),
      removals,
    });
    const runAs = process.getuid?.() === 0 ? docker.user : undefined;
    return {
      runner: job,
      config: { ...config, dataDir: job.runBase, planReuseMs: 0, runAs },
      close: () => job.close(),
    };
  } catch (err) {
    // The job still ends, errored with the reason, through the usual path.
    const why = `the run's container could not be prepared: ${messageOf(err)}`;
    const failing: Runner = {
      engine: () => Promise.reject(new DroverError("internal", why)),
      start: () => ({ signal: () => {}, done: Promise.resolve({ code: null, signal: null, failure: why }) }),
      capture: () => Promise.reject(new DroverError("internal", why)),
    };
    return { runner: failing, config: { ...config, planReuseMs: 0 }, close: async () => {} };
  }
}
