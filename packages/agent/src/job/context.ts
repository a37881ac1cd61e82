import type { JobAssignment, JobVariable, Output, PlanSummary } from "@drover/protocol";
import type { Logger } from "pino";
import type { JobClient } from "../session/client.js";
import type { AgentConfig } from "../config.js";
import type { EngineBinary } from "./engine.js";
import type { KeptPlanDirs } from "./kept-plans.js";
import type { LogStream } from "./log-stream.js";
import type { RunFiles, Runner } from "../runners/runner.js";
import type { RunUser } from "../runners/run-user.js";
import type { ProviderCache, ProviderLease } from "../providers/cache.js";
import type { ModuleCache, ModuleLease } from "../modules/cache.js";
import type { EngineCache, EngineLease } from "../engines/cache.js";
import type { RunTracer } from "@drover/runtime";
import type { Steps } from "./steps.js";

export { StepFailed } from "./steps.js";

/** The run must end now: canceled by the user, stopped by the agent, or its lease lost. */
export class Interrupted extends Error {}

/** The job-token calls a job makes (a JobClient; a recording fake in tests). */
export type JobApi = Pick<
  JobClient,
  | "start"
  | "heartbeat"
  | "configuration"
  | "variables"
  | "appendLog"
  | "uploadPlan"
  | "uploadPlanJson"
  | "uploadProviderSchemas"
  | "downloadPlan"
  | "state"
  | "uploadOutputs"
  | "finish"
>;

/** Where a job's calls go: an AgentClient, or a fake in tests. */
export interface JobServer {
  readonly baseUrl: string;
  job(jobId: string, token: string): JobApi;
}

/**
 * The settings one job run uses, and no more: the local agent passes its own; a Kubernetes
 * worker passes what its pod has.
 */
type SharedSettings = "name" | "dataDir" | "cacheDir" | "stopAction" | "taskCaCertPath" | "hooksDir" | "hookTimeoutMs";
export type JobSettings = Pick<AgentConfig, SharedSettings> & {
  /** The user terraform and hooks run as, who is given the run's files; the agent's own when unset. */
  runAs?: RunUser | undefined;
  /**
   * The run user is this job's alone while it runs (a job slot's DROVER_AGENT_RUN_AS_USER uid):
   * the job's end kills every process of that user, not only those carrying its process tag.
   */
  ownsRunUser?: boolean;
  /** The pool token, redacted from everything the run sends; a pod worker holds none. */
  token: string | undefined;
  /** Spans of the job's stages (none without an OTLP endpoint). */
  tracer?: RunTracer;
  /** Told the log bytes the server acknowledged (the process's log-bytes counter). */
  onLogBytes?: (n: number) => void;
  /** Told each error the job retries past (the process's errors counter). */
  onError?: (kind: "log_upload") => void;
  /** Lines for the run's log after its header (a node worker's version skew with its controller). */
  notes?: string[];
};

/** The agent's caches a job may use; each unset one is not used. */
export interface JobCaches {
  providerCache?: ProviderCache | undefined;
  moduleCache?: ModuleCache | undefined;
  engines?: EngineCache | undefined;
}

/** Calls `work` under the stage's retry policy. */
export type Retry = <T>(work: (signal: AbortSignal) => Promise<T>) => Promise<T>;

/**
 * What the stages of one job share: fixed inputs, and what earlier stages found (each field
 * is set by the stage named beside it and read by later ones).
 */
export interface JobContext extends JobCaches {
  readonly assignment: JobAssignment;
  readonly settings: JobSettings;
  readonly runner: Runner;
  readonly files: RunFiles;
  readonly job: JobApi;
  /** The server URL terraform's http backend reaches the state at. */
  readonly serverUrl: string;
  readonly log: LogStream;
  readonly logger: Logger;
  readonly steps: Steps;
  readonly keptPlans?: KeptPlanDirs | undefined;
  /** Aborted when the job's work must end: ends every retry and server call of a stage. */
  readonly signal: AbortSignal;
  readonly runDir: string;
  readonly configDir: string;
  readonly planPath: string;
  /** fetch: this agent's kept plan directory of the run stands in for extract and init. */
  reused: boolean;
  /** fetch: the configuration archive, still on its way while the engine is found. */
  configuration?: Promise<Buffer> | undefined;
  /** fetch */
  variables: JobVariable[];
  /** fetch: values hidden from everything this job sends. */
  secrets: string[];
  /** engine */
  binary?: EngineBinary;
  /** engine: the working directory as the steps reach it. */
  workDir: string;
  /** extract: where the agent writes into the working directory. */
  writeDir: string;
  /** caches: the environment terraform and hooks see. */
  env: NodeJS.ProcessEnv;
  /** plan: terraform's verdict, reported with the outcome. */
  planSummary?: PlanSummary | undefined;
  /** outputs */
  outputs?: Output[] | undefined;
  engineLease?: EngineLease | undefined;
  moduleLease?: ModuleLease | undefined;
  providerLease?: ProviderLease | undefined;
}
