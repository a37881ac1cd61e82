/**
 * A failed Kubernetes API call, described for an operator: what was asked of which object
 * ("create Secret "x" in namespace "ns""), the API's status reason and code, and its message
 * (an RBAC refusal names the user and the missing verb). `code` is the HTTP status, as on
 * client-node's ApiException, so callers that branch on 404 or 409 keep working.
 */
export class KubeApiError extends Error {
  constructor(
    /** e.g. `create Secret "drover-run-1-plan-1-job" in namespace "drover"` */
    readonly action: string,
    /** The HTTP status; undefined when no answer came (a deadline, a refused connection). */
    readonly code: number | undefined,
    /** The Status object's reason (Forbidden, NotFound, AlreadyExists, Invalid…). */
    readonly reason: string | undefined,
    /** The Status object's message, or the transport error's. */
    readonly apiMessage: string,
    options?: { cause?: unknown },
  ) {
    super(
      `cannot ${action}: ${code === undefined ? "" : `${reason ?? "error"} (HTTP ${code}): `}${apiMessage}`,
      options,
    );
    this.name = "KubeApiError";
  }
}

const verbs: Record<string, string> = {
  create: "create",
  read: "get",
  list: "list",
  replace: "update",
  patch: "patch",
  delete: "delete",
  deleteCollection: "delete all",
  get: "get",
};

/**
 * `create Secret "x" in namespace "ns"` from a client-node method name and its parameters:
 * `createNamespacedSecret`, `readNamespacedJob`, `listNamespacedPod`,
 * `getNamespacedCustomObject` (the kind is then the parameters' plural)…
 */
export function describeCall(method: string, params: unknown): string {
  const p = (params ?? {}) as {
    name?: unknown;
    namespace?: unknown;
    plural?: unknown;
    body?: { metadata?: { name?: unknown } };
  };
  const m =
    /^(deleteCollection|create|read|list|replace|patch|delete|get)(Namespaced|Cluster)?(.*?)(Status|ForAllNamespaces)?$/.exec(
      method,
    );
  const verb = m ? verbs[m[1]!]! : method;
  let kind = m?.[3] || method;
  if (/CustomObject$/.test(kind) && typeof p.plural === "string") kind = p.plural;
  if (m?.[1] === "list" || m?.[1] === "deleteCollection") kind = /s$/.test(kind) ? kind : `${kind}s`;
  const name =
    typeof p.name === "string" ? p.name : typeof p.body?.metadata?.name === "string" ? p.body.metadata.name : undefined;
  const status = m?.[4] === "Status" ? " status" : "";
  return `${verb} ${kind}${status}${name ? ` ${JSON.stringify(name)}` : ""}${typeof p.namespace === "string" ? ` in namespace ${JSON.stringify(p.namespace)}` : ""}`;
}

/** The Kubernetes Status in an ApiException's body (a JSON string or an object), if any. */
function statusOf(body: unknown): { reason?: string; message?: string } | undefined {
  let value = body;
  if (typeof body === "string") {
    try {
      value = JSON.parse(body) as unknown;
    } catch {
      return body.trim() ? { message: body.trim().slice(0, 500) } : undefined;
    }
  }
  if (typeof value !== "object" || value === null) return undefined;
  const s = value as { reason?: unknown; message?: unknown };
  return {
    reason: typeof s.reason === "string" ? s.reason : undefined,
    message: typeof s.message === "string" ? s.message : undefined,
  };
}

/** `err` (from the call `action`) as a KubeApiError naming the object and the API's reason. */
export function kubeApiError(action: string, err: unknown): KubeApiError {
  if (err instanceof KubeApiError) return err;
  const e = err as { code?: unknown; body?: unknown; message?: unknown; name?: unknown };
  if (typeof e.code === "number") {
    const status = statusOf(e.body);
    return new KubeApiError(action, e.code, status?.reason, status?.message ?? "no Status in the answer", {
      cause: err,
    });
  }
  // No answer: the deadline (an AbortError/TimeoutError) or the transport's own error.
  const message =
    e.name === "TimeoutError" || e.name === "AbortError"
      ? "the API server did not answer in time"
      : err instanceof Error
        ? err.message.split("\n")[0]!
        : String(err);
  return new KubeApiError(action, undefined, undefined, message, { cause: err });
}

/**
 * The same API client, each of whose calls rejects with a KubeApiError naming the call's object
 * instead of client-node's ApiException ("HTTP-Code: 403" and a raw body).
 */
export function describingErrors<T extends object>(api: T): T {
  return new Proxy(api, {
    get(target, prop, receiver) {
      const value: unknown = Reflect.get(target, prop, receiver);
      if (typeof value !== "function" || typeof prop !== "string") return value;
      return (...args: unknown[]) => {
        const result: unknown = (value as (...a: unknown[]) => unknown).apply(target, args);
        if (!(result instanceof Promise)) return result;
        return result.catch((err: unknown) => {
          throw kubeApiError(describeCall(prop, args[0]), err);
        });
      };
    },
  });
}
