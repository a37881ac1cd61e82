import { DroverClient, routes, type Phase } from "@drover/protocol";

/*
 * The tests' HTTP calls, all through the protocol's typed client: `client()` for calls of the
 * route table, `rawCall()` for the requests a test builds by hand on purpose (malformed bodies,
 * wrong tokens, paths outside the table), answered whatever their status.
 */

/** A JSON (or text, or empty) answer, headers as a fetch-style `Headers`. */
export interface ApiResponse {
  status: number;
  body: any;
  headers: Headers;
}

const clients = new Map<string, DroverClient>();

/** One typed client per base URL and token, reused across calls (its connections too). */
export function client(baseUrl: string, token?: string): DroverClient {
  const key = `${baseUrl} ${token ?? ""}`;
  let c = clients.get(key);
  if (!c) {
    c = new DroverClient({ baseUrl, token });
    clients.set(key, c);
  }
  return c;
}

/**
 * Sends `body` (a Buffer as is, a string as JSON text, anything else as JSON) to `path` with a
 * bearer token; the answer's JSON is parsed when it is JSON, else kept as text.
 */
export async function rawCall(baseUrl: string, method: string, path: string, token: string | undefined, body?: unknown, headers: Record<string, string> = {}): Promise<ApiResponse> {
  const sent: Record<string, string> = { ...headers };
  let payload: Buffer | string | undefined;
  if (Buffer.isBuffer(body)) {
    payload = body;
    sent["content-type"] ??= "application/octet-stream";
  } else if (typeof body === "string") {
    payload = body;
    sent["content-type"] ??= "application/json";
  } else if (body !== undefined) {
    payload = JSON.stringify(body);
    sent["content-type"] ??= "application/json";
  }
  const answer = await client(baseUrl).request(method, path, { token, headers: sent, body: payload, timeoutMs: 120_000 });
  const text = answer.body.toString("utf8");
  let parsed: unknown = text;
  try {
    parsed = text ? JSON.parse(text) : undefined;
  } catch {
    // not JSON: keep the text
  }
  const out = new Headers();
  for (const [k, v] of Object.entries(answer.headers)) {
    if (v === undefined) continue;
    for (const one of Array.isArray(v) ? v : [v]) out.append(k, one);
  }
  return { status: answer.status, body: parsed, headers: out };
}

/** A phase's whole log, following offsets until the server says it is complete or has no more. */
export async function readPhaseLog(baseUrl: string, token: string, runId: string, phase: Phase): Promise<string> {
  let out = "";
  let offset = 0;
  for (;;) {
    const res = await client(baseUrl, token).exchange(routes.runLogs, { params: { id: runId }, query: { phase, offset } });
    out += res.result.toString("utf8");
    offset = Number(res.headers["x-drover-log-offset"]);
    if (res.headers["x-drover-log-complete"] === "true" || res.result.length === 0) return out;
  }
}
