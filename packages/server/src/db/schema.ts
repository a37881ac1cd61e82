import type {
  Driver,
  Engine,
  JobStatus,
  Phase,
  PoolKind,
  RunStatus,
  VariableKind,
  VcsProvider,
} from "@drover/protocol";
import type { Generated, Selectable } from "kysely";

/** Which database a connection speaks; the few queries that differ branch on it. */
export type Dialect = "sqlite" | "postgres";

/*
 * Table shapes as Kysely sees them. Times are epoch milliseconds (bigint in PostgreSQL,
 * integer in SQLite); booleans are 0/1 integers so one query text serves both databases.
 */

export interface PoolsTable {
  id: string;
  name: string;
  kind: Generated<PoolKind>;
  created_at: number;
}

export interface PoolTokensTable {
  id: string;
  pool_id: string;
  description: string;
  token_hash: string;
  created_at: number;
  last_used_at: number | null;
  revoked_at: number | null;
}

export interface UserTokensTable {
  id: string;
  description: string;
  token_hash: string;
  created_at: number;
  expires_at: number | null;
  revoked_at: number | null;
  /** 1 for a token installed from DROVER_ADMIN_TOKEN. */
  bootstrap: Generated<number>;
}

export interface AgentsTable {
  id: string;
  pool_id: string;
  pool_token_id: string;
  name: string;
  version: string;
  driver: Driver;
  capacity: number;
  running_jobs: number;
  session_hash: string;
  /** 'online' until deregistered, superseded or lost. */
  state: string;
  registered_at: number;
  last_seen_at: number;
}

export interface WorkspacesTable {
  id: string;
  name: string;
  pool_id: string;
  engine: Engine;
  engine_version: string | null;
  working_directory: string;
  runner_image: string | null;
  auto_apply: number;
  /** 1 when runs that do not say otherwise may auto-apply a plan that destroys everything (0063). */
  allow_destroy_all: number;
  /** JSON array of the workspace's tags (0068a). */
  tfe_tags: Generated<string>;
  /** `remote` or `local` (0068b). */
  execution_mode: Generated<string>;
  /** JSON array of the ids of workspaces whose runs may read this one's state, `"*"` for all (0071). */
  remote_state_consumers: Generated<string>;
  current_run_id: string | null;
  created_at: number;
}

export interface VariablesTable {
  workspace_id: string;
  kind: VariableKind;
  key: string;
  value: string;
  sensitive: number;
  /** 1 when the value is an HCL expression rather than a string (0063). */
  hcl: number;
  updated_at: number;
}

export interface ConfigurationVersionsTable {
  id: string;
  workspace_id: string;
  size: number;
  sha256: string;
  created_at: number;
}

/** What a run held by the destroy-all guard becomes (store/destroy-guard.ts): `wait` as planned, `fail`: errored. */
export type GuardOutcome = "wait" | "fail";

export interface RunsTable {
  id: string;
  workspace_id: string;
  configuration_version_id: string;
  status: RunStatus;
  plan_only: number;
  is_destroy: number;
  auto_apply: number;
  message: string;
  error_message: string | null;
  cancel_requested: number;
  plan_add: number | null;
  plan_change: number | null;
  plan_destroy: number | null;
  has_changes: number | null;
  plan_job_id: string | null;
  apply_job_id: string | null;
  outputs_json: string | null;
  /** The description of the user token that started the run (null before 0060). */
  created_by: string | null;
  /** 1 when its plan would leave the workspace managing nothing; null without a plan JSON. */
  destroys_all: number | null;
  /** 1 when the run may auto-apply a plan that destroys everything (--allow-destroy-all). */
  allow_destroy_all: number;
  /** What the run becomes when the destroy-all guard holds it (`wait` before 0073). */
  guard_outcome: GuardOutcome;
  /** Targets, replacements and refresh-only as JSON (store/run-options.ts); null: a full plan. */
  plan_options: string | null;
  /** 1 for a saved cloud plan (`terraform plan -out`): its plan job also keeps the providers' schemas (0075). */
  save_plan: number;
  /** Where the configuration came from when a linked repository's commit started the run (all null otherwise). */
  source_repository: string | null;
  source_branch: string | null;
  source_commit_sha: string | null;
  source_message: string | null;
  source_author: string | null;
  source_pull_request_number: number | null;
  source_pull_request_url: string | null;
  /** The engine of the client that started it (terraform or tofu through the TFE API); null: the workspace's. */
  engine: Engine | null;
  /** Variables terraform sent with the run (`-var`), as JSON `[{key, value}]` of HCL expressions; null: none. */
  run_variables: string | null;
  created_at: number;
  updated_at: number;
}

export interface JobsTable {
  id: string;
  run_id: string;
  workspace_id: string;
  pool_id: string;
  phase: Phase;
  status: JobStatus;
  attempt: number;
  agent_id: string | null;
  token_hash: string | null;
  lease_expires_at: number | null;
  cancel_requested: number;
  cancel_requested_at: number | null;
  message: string | null;
  log_size: number;
  /** 1 once the log reached DROVER_MAX_JOB_LOG_MB: later appends are acknowledged and dropped. */
  log_truncated: number;
  queued_at: number;
  created_at: number;
  started_at: number | null;
  /** The starter id of the start call that moved this attempt to running (decision 0028). */
  started_by: string | null;
  finished_at: number | null;
}

/** A job as the store reads it. */
export type JobRow = Selectable<JobsTable>;

export interface LogChunksTable {
  job_id: string;
  offset: number;
  end_offset: number;
  data: Buffer;
}

export interface PlansTable {
  run_id: string;
  /** Size of the plan file in plan_file_chunks; null until it is uploaded. */
  plan_file_size: number | null;
  /** Size of the redacted plan JSON in plan_json_chunks; null until it is uploaded. */
  plan_json_size: number | null;
  /** Size of `terraform providers schema -json` in provider_schema_chunks (saved cloud plans only); null without. */
  provider_schemas_size: number | null;
  created_at: number;
}

/** One piece of a stored body (store/bodies.ts); `owner_id` is the id of the row it belongs to. */
export interface ChunksTable {
  owner_id: string;
  seq: number;
  data: Buffer;
}

export interface StateVersionsTable {
  id: string;
  seq: Generated<number>;
  workspace_id: string;
  serial: number | null;
  lineage: string | null;
  md5: string;
  size: number;
  run_id: string | null;
  created_at: number;
  deleted_at: number | null;
}

export interface StateLocksTable {
  workspace_id: string;
  lock_id: string;
  info: string;
  job_id: string | null;
  created_at: number;
}

export interface JobTokensTable {
  token_hash: string;
  job_id: string;
  attempt: number;
  created_at: number;
  /** When the token stopped being the job's current one (the job was requeued or finished); null while current. */
  retired_at: number | null;
}

/** A browser's sign-in: a session cookie standing for the API token it was made with. */
export interface WebSessionsTable {
  id: string;
  user_token_id: string;
  token_hash: string;
  created_at: number;
  expires_at: number;
  revoked_at: number | null;
}

export interface VcsConnectionsTable {
  id: string;
  name: string;
  provider: VcsProvider;
  url: string;
  auth_kind: "token" | "github-app";
  /** Write-only: read by the fetch and the VCS client only, never returned by the API ("" for a GitHub App). */
  token: string;
  /** The REST API base (null only in rows a migration has not filled yet). */
  api_url: string | null;
  /** A GitHub App's id, installation and private key (write-only); null with a token. */
  app_id: string | null;
  installation_id: number | null;
  private_key: string | null;
  /** The pool of VCS agents the server reaches this connection through (null: directly). */
  via_pool_id: Generated<string | null>;
  /** The secret the VCS signs webhook deliveries with (GitHub) or sends as their token (GitLab); write-only. */
  webhook_secret: string;
  created_at: number;
}

/** A workspace linked to a repository branch (one link per workspace). */
export interface WorkspaceVcsTable {
  workspace_id: string;
  connection_id: string;
  repository: string;
  branch: string;
  /** JSON array of globs. */
  trigger_paths: string;
  last_commit_sha: string | null;
  last_error: string | null;
  /** The commit `last_error` is about; a refused archive is not fetched again for it. */
  last_error_sha: string | null;
  /** The provider's id of the webhook linking registered (null when the user registers it). */
  webhook_id: number | null;
  /** 1/0: the branch's new commits apply without (with) confirmation; null: the workspace's auto-apply. */
  apply_on_merge: Generated<number | null>;
  created_at: number;
}

/** A webhook delivery of a VCS connection; (connection_id, delivery_id) is unique: a replay is this row. */
export interface VcsDeliveriesTable {
  id: string;
  connection_id: string;
  /** The provider's id of the delivery (X-GitHub-Delivery, X-Gitlab-Event-UUID). */
  delivery_id: string;
  event: string;
  received_at: number;
  status: "received" | "processing" | "processed";
  /** While `processing`: when the claim lapses unless renewed (null for claims older than 0074). */
  claimed_until: number | null;
  /** What the delivery asked for, or why it was ignored. */
  summary: string | null;
  /** JSON: the event as the processor acts on it (vcs/webhook-events.ts). */
  work: string;
}

/** What a delivery did for one linked workspace. */
export interface VcsDeliveryOutcomesTable {
  delivery_id: string;
  workspace_id: string;
  workspace_name: string;
  outcome: string;
  run_id: string | null;
  detail: string | null;
}

/**
 * A report to a VCS still to deliver, or delivered: a run's commit status, or the one comment of
 * a workspace on a pull request. `version` grows with each change; `due_at` is null once the
 * version last written is delivered.
 */
export interface VcsReportsTable {
  id: string;
  key: string;
  kind: "status" | "comment";
  workspace_id: string;
  run_id: string;
  connection_id: string;
  repository: string;
  commit_sha: string;
  pull_request_number: number | null;
  comment_id: number | null;
  version: number;
  due_at: number | null;
  attempts: number;
  last_error: string | null;
  updated_at: number;
}

/** The server's own secret keys, made on first use (the capability URL key). */
export interface ServerKeysTable {
  name: string;
  key: Buffer;
  created_at: number;
}

/** Nonces of single-use capability URLs already used, kept until the URL expires. */
export interface CapabilityUsesTable {
  nonce: string;
  expires_at: number;
}

/** A configuration version created through the TFE API: made before its archive arrives. */
export interface TfeConfigurationVersionsTable {
  /** The id its configuration version gets once the archive is stored. */
  id: string;
  workspace_id: string;
  /** 1: runs of it only plan. */
  speculative: number;
  status: "pending" | "uploaded" | "errored";
  /** Why its upload was refused; null while it waits. */
  error_message: string | null;
  created_at: number;
}

/** A VCS operation or fetch leased to a VCS agent like a job: attempt, lease, take-over. */
export interface VcsTasksTable {
  id: string;
  pool_id: string;
  connection_id: string;
  kind: "operation" | "fetch";
  /** The task as the agent receives it (JSON, checked by the protocol's schemas). */
  payload: string;
  /** A fetch's workspace: the configuration version it uploads belongs to it. */
  workspace_id: string | null;
  status: "queued" | "leased" | "succeeded" | "failed";
  attempt: Generated<number>;
  agent_id: string | null;
  lease_expires_at: number | null;
  /** Past it, nobody waits for the task any more: it is not handed out. */
  deadline_at: number;
  result: string | null;
  error: string | null;
  configuration_version_id: string | null;
  created_at: number;
  finished_at: number | null;
}

export interface Database {
  vcs_reports: VcsReportsTable;
  server_keys: ServerKeysTable;
  capability_uses: CapabilityUsesTable;
  tfe_configuration_versions: TfeConfigurationVersionsTable;
  vcs_tasks: VcsTasksTable;
  vcs_connections: VcsConnectionsTable;
  vcs_deliveries: VcsDeliveriesTable;
  vcs_delivery_outcomes: VcsDeliveryOutcomesTable;
  workspace_vcs: WorkspaceVcsTable;
  pools: PoolsTable;
  pool_tokens: PoolTokensTable;
  user_tokens: UserTokensTable;
  web_sessions: WebSessionsTable;
  agents: AgentsTable;
  workspaces: WorkspacesTable;
  variables: VariablesTable;
  configuration_versions: ConfigurationVersionsTable;
  runs: RunsTable;
  jobs: JobsTable;
  log_chunks: LogChunksTable;
  plans: PlansTable;
  state_versions: StateVersionsTable;
  state_locks: StateLocksTable;
  job_tokens: JobTokensTable;
  state_version_chunks: ChunksTable;
  configuration_version_chunks: ChunksTable;
  plan_file_chunks: ChunksTable;
  plan_json_chunks: ChunksTable;
  provider_schema_chunks: ChunksTable;
}
