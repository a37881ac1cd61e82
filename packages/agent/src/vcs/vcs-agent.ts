import { DroverError, messageOf, oneLineError, routes, type VcsTask, type VcsTaskEnvelope } from "@drover/protocol";
import { prepareVcsWorkDir, vcsClient, type GitDeadlines, type VcsClient } from "@drover/vcs";
import { join } from "node:path";
import type { Server } from "node:http";
import type { Logger } from "pino";
import { startTelemetryIfSet, type Telemetry } from "@drover/runtime";
import { closeHealthServer, startHealthServer } from "../health.js";
import { MetricSet } from "../metrics.js";
import { AgentClient, withRetry } from "../session/client.js";
import { PoolSession, TokenRefusedError } from "../session/pool-session.js";
import type { AgentVcsConnection, VcsAgentConfig } from "./config.js";
import { DeliverySpool } from "./delivery-spool.js";
import { checkedTask, runTask, type TaskEnd } from "./tasks.js";
import { startWebhookListener, type Delivery } from "./webhooks.js";

/*
 * `drover agent vcs`: the run agents' pool session with a `vcs` pool's token, long-polling for
 * VCS tasks instead of jobs. It only ever calls out to the server; the VCS is reached from here,
 * with credentials only this process holds. Each task's lease is renewed while it runs, so a
 * task outlives no agent: when this process dies, another agent of the pool takes it.
 */

export interface VcsAgentOptions {
  /** The provider API client of a connection (tests give their own); by default @drover/vcs's client. */
  clientFor?: (connection: string, endpoint: AgentVcsConnection) => VcsClient;
  deadlines?: GitDeadlines;
  handleSignals?: boolean;
}

export class VcsAgent {
  readonly client: AgentClient;
  readonly session: PoolSession<VcsTaskEnvelope>;
  private running = new Map<string, AbortController>();
  private leaseTtlMs = 30_000;
  private readonly idle = new Set<() => void>();
  /** One API client per connection, kept: a GitHub App's installation token is minted once an hour, not per task. */
  private readonly clients = new Map<string, VcsClient>();
  /** What /metrics serves and the OTLP export reads. */
  private readonly metrics = new MetricSet()
    .define("drover_vcs_agent_tasks_total", "counter", "VCS tasks this agent ended, by outcome", {
      labels: ["outcome"],
    })
    .define("drover_vcs_agent_running_tasks", "gauge", "VCS tasks this agent runs now", {
      read: () => this.running.size,
    });
  private telemetry: Telemetry | undefined;
  private telemetryStarted = false;
  webhookUrl: string | undefined;
  /** Where fetches make their directories: `<data dir>/vcs-work`, emptied when the agent starts. */
  readonly workDir: string;
  /** Webhook deliveries waiting for the server: `<data dir>/vcs-deliveries`, kept across restarts. */
  readonly spool: DeliverySpool;

  constructor(
    readonly config: VcsAgentConfig,
    private readonly log: Logger,
    private readonly options: VcsAgentOptions = {},
  ) {
    const a = config.agent;
    this.workDir = join(a.dataDir, "vcs-work");
    this.client = new AgentClient(a.url, a.caCertPem);
    this.spool = new DeliverySpool({
      dir: join(a.dataDir, "vcs-deliveries"),
      forward: (delivery, signal) => this.forward(delivery, signal),
      log,
    });
    this.session = new PoolSession<VcsTaskEnvelope>({
      client: this.client,
      poolToken: a.token,
      tokenSource: a.tokenSource,
      name: a.name,
      driver: "local",
      capacity: config.concurrency,
      pollWaitMs: a.pollWaitMs,
      log,
      registeredLog: "VCS agent registered",
      room: () => (this.running.size < config.concurrency ? "free" : "full"),
      load: () => ({ runningJobs: this.running.size }),
      take: async (session, waitMs, signal) => {
        const answer = await this.client.call(routes.pollVcsTask, {
          token: session,
          query: { wait: waitMs },
          signal,
          timeoutMs: waitMs + this.client.timeouts.longPollSlackMs,
        });
        this.leaseTtlMs = answer.leaseTtlMs;
        return answer.task;
      },
      onJob: (task) => void this.handle(task),
      onRegistered: (reg) => {
        // Deliveries kept while the server could not be reached go now.
        this.spool.kick();
        void this.startTelemetry(reg.poolName);
      },
    });
  }

  /** Registers, serves webhooks and health, takes tasks until stopped; resolves with the exit code. */
  async run(): Promise<number> {
    let health: Server | undefined;
    let hooks: Server | undefined;
    try {
      const left = await prepareVcsWorkDir(this.workDir).catch((err: unknown) => {
        throw new DroverError(
          "invalid_setting",
          `the VCS agent fetches in ${this.workDir}, which it cannot use: ${messageOf(err)}`,
          { hint: "Give it a writable data dir of its own with --data-dir (DROVER_AGENT_DATA_DIR)." },
        );
      });
      if (left.length > 0) this.log.info({ removed: left }, "removed the fetch directories an earlier VCS agent left");
      // Deliveries are taken before the server is reached: they wait on disk until it is. The
      // spool runs without a listener too, to forward what an earlier process on this data dir kept.
      await this.spool.start().catch((err: unknown) => {
        throw new DroverError(
          "invalid_setting",
          `the VCS agent keeps webhook deliveries in ${join(this.config.agent.dataDir, "vcs-deliveries")}, which it cannot use: ${messageOf(err)}`,
          { hint: "Give it a writable data dir of its own with --data-dir (DROVER_AGENT_DATA_DIR)." },
        );
      });
      if (this.config.webhookPort > 0) {
        hooks = await startWebhookListener({
          port: this.config.webhookPort,
          address: this.config.webhookAddress,
          connections: this.config.connections,
          log: this.log,
          accept: (delivery) => this.spool.accept(delivery),
        });
        const addr = hooks.address();
        this.webhookUrl = typeof addr === "object" && addr ? `http://${addr.address}:${addr.port}` : undefined;
        this.log.info({ port: typeof addr === "object" && addr ? addr.port : undefined }, "webhook listener ready");
      }
      if (!(await this.session.start())) return 0;
      const a = this.config.agent;
      if (a.healthPort > 0) health = await startHealthServer(a.healthPort, this.healthSource(), a.healthAddress);
      await this.session.poll();
      await this.drain();
      await this.session.deregister(AbortSignal.timeout(5_000)).catch(() => undefined);
      return 0;
    } catch (err) {
      this.log.error(oneLineError(err));
      return err instanceof TokenRefusedError || (err instanceof DroverError && err.code === "invalid_setting") ? 2 : 1;
    } finally {
      await this.session.stop();
      for (const c of this.running.values()) c.abort();
      await this.spool.stop();
      await closeHealthServer(hooks);
      await closeHealthServer(health);
      await this.telemetry?.shutdown().catch(() => undefined);
    }
  }

  /** Stops taking tasks; running ones get the grace period to finish, then are abandoned to another agent. */
  async stop(): Promise<void> {
    await this.session.stop();
  }

  private async drain(): Promise<void> {
    if (this.running.size === 0) return;
    const timer = setTimeout(() => {
      for (const c of this.running.values()) c.abort();
    }, this.config.agent.gracePeriodMs);
    await new Promise<void>((resolve) => {
      const check = () => {
        if (this.running.size > 0) return;
        this.idle.delete(check);
        resolve();
      };
      this.idle.add(check);
      check();
    });
    clearTimeout(timer);
  }

  private clientOf(connection: string, endpoint: AgentVcsConnection): VcsClient {
    let client = this.clients.get(connection);
    if (!client) this.clients.set(connection, (client = vcsClient(endpoint)));
    return client;
  }

  private healthSource() {
    return {
      health: () => ({
        live: this.session.fatalError === undefined,
        ready: this.session.registered,
        details: { runningTasks: this.running.size },
      }),
      metrics: () => this.metrics.render(),
    };
  }

  /** Starts the OTLP export of this agent's metrics, once, when DROVER_AGENT_OTLP_ENDPOINT is set. */
  private async startTelemetry(pool: string): Promise<void> {
    const a = this.config.agent;
    if (!a.otlp || this.telemetryStarted) return;
    this.telemetryStarted = true;
    try {
      this.telemetry = await startTelemetryIfSet({
        ...a.otlp,
        resource: { "service.name": "drover-vcs-agent", "drover.pool": pool, "drover.agent": a.name },
        registry: this.metrics.registry,
      });
    } catch (err) {
      this.log.warn({ err: messageOf(err) }, "OpenTelemetry export could not start; running without it");
    }
  }

  private async forward(delivery: Delivery, signal: AbortSignal): Promise<void> {
    const token = this.session.sessionToken;
    if (token === undefined) throw new Error("not registered with the server yet");
    await this.client.call(routes.forwardVcsWebhook, {
      token,
      body: { ...delivery, body: delivery.body.toString("base64") },
      signal,
    });
  }

  private async handle(raw: VcsTaskEnvelope): Promise<void> {
    const token = this.session.sessionToken;
    if (token === undefined) return;
    const abort = new AbortController();
    this.running.set(raw.id, abort);
    const checked = checkedTask(raw);
    const where = { task: raw.id, attempt: raw.attempt };
    const renew = setInterval(
      () => {
        this.client
          .call(routes.renewVcsTask, { token, params: { id: raw.id }, body: { attempt: raw.attempt } })
          .catch((err: unknown) => {
            if (err instanceof DroverError && (err.code === "stale_attempt" || err.code === "not_found")) {
              this.log.warn({ ...where, err: err.message }, "the task is no longer this agent's; stopping it");
              abort.abort();
            }
          });
      },
      Math.max(100, this.leaseTtlMs / 3),
    );
    try {
      let end: TaskEnd;
      if ("refused" in checked) {
        this.metrics.inc("drover_vcs_agent_tasks_total", { outcome: "refused" });
        this.log.warn({ ...where, reason: checked.refused }, "refused a VCS task");
        end = { error: checked.refused, code: "bad_request" };
      } else {
        const task = checked.task;
        this.log.info({ ...where, ...describe(task) }, "VCS task taken");
        end = await runTask(task, {
          connections: this.config.connections,
          clientFor: this.options.clientFor ?? ((connection, endpoint) => this.clientOf(connection, endpoint)),
          deadlines: this.options.deadlines,
          workDir: this.workDir,
          signal: abort.signal,
          upload: (t, archive, signal) =>
            withRetry(
              () =>
                this.client.call(routes.uploadVcsArchive, {
                  token,
                  params: { id: t.id },
                  query: { attempt: t.attempt },
                  body: archive,
                  signal,
                  timeoutMs: this.client.sendingMs(archive),
                }),
              signal,
            ),
        });
        this.metrics.inc("drover_vcs_agent_tasks_total", { outcome: "error" in end ? "failed" : "succeeded" });
        this.log.info({ ...where, ...("error" in end ? { error: end.error } : {}) }, "VCS task ended");
      }
      if (abort.signal.aborted) return;
      const body = "error" in end ? { attempt: raw.attempt, ...end } : { attempt: raw.attempt, result: end.result };
      await withRetry(
        () => this.client.call(routes.completeVcsTask, { token, params: { id: raw.id }, body }),
        this.session.signal.aborted ? AbortSignal.timeout(5_000) : this.session.signal,
      );
    } catch (err) {
      this.log.warn({ ...where, err: messageOf(err) }, "reporting a VCS task failed; its lease will run out");
    } finally {
      clearInterval(renew);
      this.running.delete(raw.id);
      this.session.roomFreed();
      for (const f of [...this.idle]) f();
    }
  }
}

/** What a log line says of a task: never a credential, and no more of it than names it. */
function describe(task: VcsTask): Record<string, unknown> {
  if (task.kind === "fetch")
    return { kind: "fetch", connection: task.connection, repository: task.fetch.repository, sha: task.fetch.sha };
  return { kind: task.operation.op, connection: task.connection, repository: task.operation.repository };
}

/** Starts a VCS agent; SIGTERM and SIGINT stop it. */
export function runVcsAgent(
  config: VcsAgentConfig,
  log: Logger,
  options: VcsAgentOptions = {},
): { agent: VcsAgent; done: Promise<number> } {
  const agent = new VcsAgent(config, log, options);
  if (options.handleSignals !== false) {
    const onSignal = (sig: string) => {
      log.info({ signal: sig }, "stop signal received");
      void agent.stop();
    };
    process.on("SIGTERM", onSignal);
    process.on("SIGINT", onSignal);
  }
  return { agent, done: agent.run() };
}
