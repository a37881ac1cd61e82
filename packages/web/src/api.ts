import type {
  Agent,
  ErrorBody,
  Job,
  Output,
  Pool,
  PoolDemand,
  PoolToken,
  RequestIssue,
  Run,
  RunStatus,
  StateVersion,
  UserToken,
  Variable,
  VariableKind,
  WebSession,
  Workspace,
  WorkspaceSummary,
  WorkspaceVcs,
} from "@drover/protocol";

/*
 * The user API as the page calls it: same origin, the session cookie, and the session's CSRF
 * token on every change. Only types come from @drover/protocol (its schemas would add zod to
 * the bundle); the server checks every request, and a test checks these names match its own.
 */

/** The CSRF header of @drover/protocol. */
export const csrfHeader = "x-drover-csrf";
/** The log read headers of @drover/protocol. */
export const logOffsetHeader = "x-drover-log-offset";
export const logCompleteHeader = "x-drover-log-complete";

/** An error answer of the API: its HTTP status, code and message, and the request's parts at fault if it names them. */
export class ApiError extends Error {
  constructor(
    readonly status: number,
    readonly code: string,
    message: string,
    readonly issues: readonly RequestIssue[] = [],
  ) {
    super(message);
  }
}

/**
 * The server could not be reached: no connection (the browser's fetch says only "Failed to
 * fetch"), or a proxy in front of it answered 502, 503 or 504 with a page of its own.
 */
export class UnreachableError extends ApiError {
  constructor(readonly reason: string) {
    super(0, "unreachable", `Cannot reach the Drover server (${reason}); check the connection, or try again shortly.`);
  }
}

const proxyFailures = new Set([502, 503, 504]);

let csrfToken: string | null = null;
const signedOutListeners = new Set<() => void>();

/** Calls `listener` when the API refuses the session (expired, revoked, signed out elsewhere). */
export function onSignedOut(listener: () => void): () => void {
  signedOutListeners.add(listener);
  return () => signedOutListeners.delete(listener);
}

const e = encodeURIComponent;

type Method = "GET" | "POST" | "PUT" | "PATCH" | "DELETE";

/** `request`'s answer, or null when the server answers 404 (a plan not made yet, a link not set). */
async function unlessMissing<T>(request: Promise<T>): Promise<T | null> {
  try {
    return await request;
  } catch (err) {
    if (err instanceof ApiError && err.status === 404) return null;
    throw err;
  }
}

async function call(method: Method, path: string, body?: unknown, retried = false): Promise<Response> {
  const headers: Record<string, string> = { accept: "application/json" };
  if (body !== undefined) headers["content-type"] = "application/json";
  const sent = csrfToken;
  if (method !== "GET" && sent !== null) headers[csrfHeader] = sent;
  let res: Response;
  try {
    res = await fetch(path, {
      method,
      headers,
      credentials: "same-origin",
      cache: "no-store",
      ...(body === undefined ? {} : { body: JSON.stringify(body) }),
    });
  } catch {
    // fetch rejects only when no answer came (refused, reset, offline), with a message that says nothing.
    throw new UnreachableError("no connection");
  }
  if (res.ok) return res;
  // Signing in again (in another tab) replaced the session and its CSRF token: a change refused
  // for that is sent once more with the current session's token.
  if (res.status === 403 && method !== "GET" && !retried && (await currentCsrfToken()) !== sent)
    return call(method, path, body, true);
  let code = "internal";
  let message = `${res.status} ${res.statusText}`;
  let issues: RequestIssue[] = [];
  try {
    const answer = (await res.json()) as Partial<ErrorBody>;
    code = answer.error ?? code;
    message = answer.message ?? message;
    issues = answer.issues ?? issues;
  } catch {
    // Not a JSON error body: a proxy's page, which for these answers means the server is not there.
    if (proxyFailures.has(res.status)) throw new UnreachableError(message);
  }
  if (res.status === 401 && path !== sessionPath) for (const listener of signedOutListeners) listener();
  throw new ApiError(res.status, code, message, issues);
}

/**
 * Tells the signed-out listeners when the browser's session no longer holds (expired, signed out
 * elsewhere, its token revoked); nothing when it does or the server cannot be reached.
 */
export async function checkSignedIn(): Promise<void> {
  await api.session().catch((err: unknown) => {
    if (err instanceof ApiError && err.status === 401) for (const listener of signedOutListeners) listener();
  });
}

/** The CSRF token of the session the browser's cookie holds now (kept for later calls), or null. */
function currentCsrfToken(): Promise<string | null> {
  return api.session().then(
    (session) => session.csrfToken,
    () => null,
  );
}

async function json<T>(method: Method, path: string, body?: unknown): Promise<T> {
  const res = await call(method, path, body);
  return (res.status === 204 ? undefined : await res.json()) as T;
}

function query(params: Record<string, string | number | boolean | undefined>): string {
  const q = new URLSearchParams();
  for (const [key, value] of Object.entries(params)) if (value !== undefined && value !== "") q.set(key, String(value));
  const text = q.toString();
  return text === "" ? "" : `?${text}`;
}

const sessionPath = "/api/v1/web/session";
/** The most log bytes one read asks for (the server allows 8 MiB). */
const logReadBytes = 4 * 1024 * 1024;

/** One page of a list and the cursor of the next. */
export interface Page<T> {
  items: T[];
  next: string | null;
}

/** A chunk of a job's log: its bytes, where the next read starts, and whether the log is complete. */
export interface LogChunk {
  bytes: Uint8Array;
  nextOffset: number;
  complete: boolean;
}

/** The API calls of the pages. */
export const api = {
  /** The session of this browser's cookie (401 when signed out). */
  async session(): Promise<WebSession> {
    const session = await json<WebSession>("GET", sessionPath);
    csrfToken = session.csrfToken;
    return session;
  },
  async signIn(token: string): Promise<WebSession> {
    const session = await json<WebSession>("POST", sessionPath, { token });
    csrfToken = session.csrfToken;
    return session;
  },
  async signOut(): Promise<void> {
    try {
      await call("DELETE", sessionPath);
    } finally {
      csrfToken = null;
    }
  },

  pools: () => json<{ items: Pool[] }>("GET", "/api/v1/pools"),
  pool: (name: string) => json<Pool>("GET", `/api/v1/pools/${e(name)}`),
  createPool: (name: string) => json<Pool>("POST", "/api/v1/pools", { name }),
  poolDemand: (name: string) => json<PoolDemand>("GET", `/api/v1/pools/${e(name)}/demand`),
  poolTokens: (name: string) => json<{ items: PoolToken[] }>("GET", `/api/v1/pools/${e(name)}/tokens`),
  createPoolToken: (name: string, description: string) =>
    json<PoolToken & { token: string }>("POST", `/api/v1/pools/${e(name)}/tokens`, { description }),
  revokePoolToken: (id: string) => json<PoolToken>("DELETE", `/api/v1/pool-tokens/${e(id)}`),
  agents: () => json<{ items: Agent[] }>("GET", "/api/v1/agents"),

  userTokens: () => json<{ items: UserToken[] }>("GET", "/api/v1/user-tokens"),
  createUserToken: (description: string, expiresInDays?: number) =>
    json<UserToken & { token: string }>("POST", "/api/v1/user-tokens", {
      description,
      ...(expiresInDays === undefined ? {} : { expiresInDays }),
    }),
  revokeUserToken: (id: string) => json<UserToken>("DELETE", `/api/v1/user-tokens/${e(id)}`),

  workspaces: (q: { search?: string; pool?: string; after?: string; limit?: number }) =>
    json<Page<WorkspaceSummary>>("GET", `/api/v1/workspaces${query(q)}`),
  workspace: (name: string) => json<Workspace>("GET", `/api/v1/workspaces/${e(name)}`),
  updateWorkspace: (name: string, change: Partial<WorkspaceSettings>) =>
    json<Workspace>("PATCH", `/api/v1/workspaces/${e(name)}`, change),
  /** The workspace's repository link, or null when it has none. */
  workspaceVcs: (name: string) => unlessMissing(json<WorkspaceVcs>("GET", `/api/v1/workspaces/${e(name)}/vcs`)),
  variables: (ws: string) => json<{ items: Variable[] }>("GET", `/api/v1/workspaces/${e(ws)}/vars`),
  setVariable: (
    ws: string,
    key: string,
    value: { value: string; kind: VariableKind; sensitive: boolean; hcl: boolean },
  ) => json<Variable>("PUT", `/api/v1/workspaces/${e(ws)}/vars/${e(key)}`, value),
  /** Deletes one variable: a terraform variable and an environment variable may share a key. */
  deleteVariable: (ws: string, key: string, kind: VariableKind) =>
    call("DELETE", `/api/v1/workspaces/${e(ws)}/vars/${e(key)}${query({ kind })}`),
  outputs: (ws: string) => json<{ items: Output[] }>("GET", `/api/v1/workspaces/${e(ws)}/outputs`),
  stateVersions: (ws: string) => json<{ items: StateVersion[] }>("GET", `/api/v1/workspaces/${e(ws)}/state-versions`),
  stateVersionUrl: (id: string) => `/api/v1/state-versions/${e(id)}/download`,

  runs: (q: { workspace?: string; status?: RunStatus; after?: string; limit?: number }) =>
    json<Page<Run>>("GET", `/api/v1/runs${query(q)}`),
  run: (id: string) => json<Run>("GET", `/api/v1/runs/${e(id)}`),
  runJobs: (id: string) => json<{ items: Job[] }>("GET", `/api/v1/runs/${e(id)}/jobs`),
  /** The run's plan JSON (`terraform show -json`), or null before the plan has one. */
  runPlan: (id: string) => unlessMissing(json<PlanJson>("GET", `/api/v1/runs/${e(id)}/plan`)),
  confirmRun: (id: string) => json<Run>("POST", `/api/v1/runs/${e(id)}/confirm`),
  discardRun: (id: string) => json<Run>("POST", `/api/v1/runs/${e(id)}/discard`),
  cancelRun: (id: string, force: boolean) => json<Run>("POST", `/api/v1/runs/${e(id)}/cancel${query({ force })}`),
  async runLog(id: string, phase: "plan" | "apply", offset: number): Promise<LogChunk> {
    // Large reads: a long finished log arrives in a few requests instead of one per MiB.
    const res = await call("GET", `/api/v1/runs/${e(id)}/logs${query({ phase, offset, limit: logReadBytes })}`);
    return {
      bytes: new Uint8Array(await res.arrayBuffer()),
      nextOffset: Number(res.headers.get(logOffsetHeader) ?? offset),
      complete: res.headers.get(logCompleteHeader) === "true",
    };
  },
};

/** The workspace settings the settings form edits. */
export interface WorkspaceSettings {
  pool: string;
  engine: "terraform" | "tofu";
  engineVersion: string | null;
  workingDirectory: string;
  runnerImage: string | null;
  autoApply: boolean;
  allowDestroyAll: boolean;
  /** Names of the workspaces whose runs may read this one's state (terraform_remote_state). */
  remoteStateConsumers: string[];
  globalRemoteState: boolean;
}

/** The parts of terraform's plan JSON the run page shows. */
export interface PlanJson {
  resource_changes?: {
    address: string;
    type?: string;
    change?: { actions?: string[] };
  }[];
}
