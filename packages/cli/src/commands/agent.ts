import { oneLineError } from "@drover/protocol";
// Each command loads the agent when it runs (import()): the user commands beside them do not need it.
import type { AgentFlags } from "@drover/agent";
import { routes } from "@drover/protocol";
import { apiFor, emit, table, withCommon, type CommonOptions } from "../command-kit.js";
import { settingsOrExit } from "../settings-errors.js";
import type { Command } from "commander";
import { runsUntilSignalled } from "../stdio.js";

/** `drover agent run|controller|vcs|worker|node-worker` (config errors: one line, exit code 2) and `agent list`. */
export function registerAgentCommands(program: Command): void {
  const agent = program.command("agent").description("Run a Drover agent, or list the agents of a pool");
  withCommon(agent.command("list").description("List agents: status, driver, version, running jobs"))
    .option("--pool <pool>", "only this pool's agents (name or id)")
    .action(async (opts: CommonOptions & { pool?: string }) => {
      const api = apiFor(opts);
      const [{ items }, pools] = await Promise.all([
        api.call(routes.listAgents, { query: opts.pool === undefined ? {} : { pool: opts.pool } }),
        api.call(routes.listPools, {}),
      ]);
      const poolName = new Map(pools.items.map((p) => [p.id, p.name]));
      emit(opts, items, (agents) =>
        table(
          ["NAME", "POOL", "STATUS", "DRIVER", "VERSION", "RUNNING", "LAST SEEN"],
          agents.map((a) => [
            a.name,
            poolName.get(a.poolId) ?? a.poolId,
            a.status,
            a.driver,
            a.version,
            `${a.runningJobs}/${a.capacity}`,
            a.lastSeenAt,
          ]),
        ),
      );
    });
  agent
    .command("run")
    .description(
      "Register with a pool token, take jobs and run them as local processes (or each in its own container: --driver docker)",
    )
    .option("--url <url>", "server URL (DROVER_URL; default: the one in the token)")
    .option("--token <token>", "pool token (DROVER_TOKEN; visible in the process list: prefer --token-file)")
    .option("--token-file <path>", "file holding the pool token (DROVER_TOKEN_FILE)")
    .option("--name <name>", "agent name, unique in the pool (DROVER_AGENT_NAME; default: hostname)")
    .option("--driver <driver>", "local or docker (DROVER_AGENT_DRIVER; default local)")
    .option(
      "--concurrency <n>",
      "jobs at once, at most 5 locally, 50 with docker (DROVER_AGENT_CONCURRENCY; default 1)",
    )
    .option("--single", "take one job, finish it, deregister and exit (DROVER_AGENT_SINGLE)")
    .option("--data-dir <dir>", "per-run work directories (DROVER_AGENT_DATA_DIR)")
    .option("--cache-dir <dir>", "binaries, providers, modules (DROVER_AGENT_CACHE_DIR)")
    .option("--health-port <port>", "port of /healthz, /readyz, /metrics; 0 disables (DROVER_AGENT_HEALTH_PORT)")
    .option("--hooks-dir <dir>", "pre-init, pre-plan, post-plan, pre-apply, post-apply hooks (DROVER_AGENT_HOOKS_DIR)")
    .option("--stop-action <action>", "graceful, drain or force (DROVER_AGENT_WORKER_ON_STOP_ACTION)")
    .option("--grace-period-seconds <n>", "stop timeouts derive from it (DROVER_AGENT_GRACE_PERIOD_SECONDS)")
    .option("--log-format <format>", "json, plain or dev (DROVER_AGENT_LOG_FORMAT)")
    .option("--docker-host <socket>", "docker driver: unix:///path of the Engine API socket (DROVER_AGENT_DOCKER_HOST)")
    .option("--docker-image <image>", "docker driver: runner image of each job's container (DROVER_AGENT_DOCKER_IMAGE)")
    .action(async (opts: AgentFlags) => {
      runsUntilSignalled();
      const { createLogger, loadAgentConfig, runAgent } = await import("@drover/agent");
      const config = settingsOrExit("agent run", () => loadAgentConfig(process.env, opts));
      if (config.driver === "kubernetes") {
        process.stderr.write("drover agent run: DROVER_AGENT_DRIVER=kubernetes is run by `drover agent controller`\n");
        process.exit(2);
      }
      const log = createLogger(config.logFormat, config.debug);
      const { done } = await runAgent(config, log);
      const code = await done;
      process.exit(code);
    });
  agent
    .command("controller")
    .description("Kubernetes job mode: claim jobs and launch one Kubernetes Job per run phase")
    .option("--token <token>", "pool token (DROVER_TOKEN; prefer --token-file)")
    .option("--token-file <path>", "file holding the pool token (DROVER_TOKEN_FILE)")
    .option("--url <url>", "server URL (DROVER_URL)")
    .option("--name <name>", "controller name (DROVER_AGENT_NAME)")
    .option("--concurrency <n>", "Jobs in flight (DROVER_AGENT_CONCURRENCY; default 10)")
    .action(async (opts: AgentFlags) => {
      runsUntilSignalled();
      const { createLogger, loadAgentConfig } = await import("@drover/agent");
      const { loadControllerSettings, runController } = await import("@drover/agent/kubernetes");
      const config = settingsOrExit("agent controller", () =>
        loadAgentConfig({ ...process.env, DROVER_AGENT_DRIVER: "kubernetes" }, opts),
      );
      const settings = settingsOrExit("agent controller", () => loadControllerSettings(process.env));
      const log = createLogger(config.logFormat, config.debug);
      try {
        process.exit(await runController(config, settings, log));
      } catch (err) {
        log.error(oneLineError(err));
        process.exit(1);
      }
    });
  agent
    .command("vcs")
    .description(
      "VCS agent: register with a vcs pool's token and relay the connections of " +
        "DROVER_AGENT_VCS_CONNECTIONS_FILE (operations, fetches, webhooks) for the server",
    )
    .option("--url <url>", "server URL (DROVER_URL; default: the one in the token)")
    .option("--token <token>", "pool token of a vcs pool (DROVER_TOKEN; prefer --token-file)")
    .option("--token-file <path>", "file holding the pool token (DROVER_TOKEN_FILE)")
    .option("--name <name>", "agent name, unique in the pool (DROVER_AGENT_NAME; default: hostname)")
    .option(
      "--data-dir <dir>",
      "fetches in its vcs-work folder (emptied at start), keeps webhook deliveries in vcs-deliveries (DROVER_AGENT_DATA_DIR)",
    )
    .option("--health-port <port>", "port of /healthz, /readyz, /metrics; 0 disables (DROVER_AGENT_HEALTH_PORT)")
    .option("--log-format <format>", "json, plain or dev (DROVER_AGENT_LOG_FORMAT)")
    .action(async (opts: AgentFlags) => {
      runsUntilSignalled();
      const { createLogger } = await import("@drover/agent");
      const { loadVcsAgentConfig, runVcsAgent } = await import("@drover/agent/vcs");
      const config = settingsOrExit("agent vcs", () => loadVcsAgentConfig(process.env, opts));
      const log = createLogger(config.agent.logFormat, config.agent.debug);
      process.exit(await runVcsAgent(config, log).done);
    });
  agent
    .command("worker")
    .description("Inside a task pod: run the pod's job, driving the runner container through the exec-loop")
    .action(async () => {
      runsUntilSignalled();
      const { createLogger } = await import("@drover/agent");
      // Its own entry: a run pod's worker talks to the server only, and the Kubernetes client the
      // controller needs would cost each run pod a second of CPU to load.
      const { loadWorkerSettings, runWorker } = await import("@drover/agent/worker");
      const settings = settingsOrExit("agent worker", () => loadWorkerSettings(process.env));
      process.exit(await runWorker(settings, createLogger("json", false)));
    });
  agent
    .command("pod-annotator")
    .description(
      "Sidecar of an agent pod: marks the pod busy (pod-deletion-cost, safe-to-evict=false) while its agent runs a job, so scale-in picks idle agents",
    )
    .action(async () => {
      runsUntilSignalled();
      const { createLogger } = await import("@drover/agent");
      const { loadPodAnnotatorSettings, runPodAnnotator } = await import("@drover/agent/pod-annotator");
      const settings = settingsOrExit("agent pod-annotator", () => loadPodAnnotatorSettings(process.env));
      const log = createLogger(settings.logFormat, false);
      const stop = new AbortController();
      for (const sig of ["SIGTERM", "SIGINT"] as const) process.on(sig, () => stop.abort());
      process.exit(await runPodAnnotator(settings, log, stop.signal));
    });
  agent
    .command("node-worker")
    .description("agent-k8s: one per node (DaemonSet); supervises the run pods the controller puts on this node")
    .action(async () => {
      runsUntilSignalled();
      const { createLogger } = await import("@drover/agent");
      const { loadNodeWorkerSettings, runNodeWorker } = await import("@drover/agent/kubernetes");
      const settings = settingsOrExit("agent node-worker", () => loadNodeWorkerSettings(process.env));
      const log = createLogger(settings.logFormat, false);
      process.exit(await runNodeWorker(settings, log));
    });
}
