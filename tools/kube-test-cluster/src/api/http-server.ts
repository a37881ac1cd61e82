/**
 * The REST front end: discovery, resource paths (`/api/v1/...`, `/apis/<g>/<v>/...`),
 * watch streams, pods/log, pods/eviction and pods/binding, all rendered as the real
 * API server renders them (Status errors, Tables for kubectl, chunked watch events).
 */
import type { IncomingMessage, ServerResponse } from "node:http";
import type { Attributes, RbacAuthorizer, UserInfo } from "./auth.js";
import { adminUser, serviceAccountUser } from "./auth.js";
import type { ObjectApi, PropagationPolicy } from "./object-api.js";
import { checkFieldSelector, patchTypeOf } from "./object-api.js";
import { openApiDocument, openApiRoot } from "./openapi.js";
import { decodeAccessReview } from "./protobuf.js";
import type { ResourceType } from "./resources.js";
import { apiVersionOf, typeKey } from "./resources.js";
import { fieldsOf, parseFieldSelector, parseLabelSelector } from "./selectors.js";
import { badRequest, methodNotAllowed, StatusError } from "./status-error.js";
import type { StoreEvent } from "./store.js";
import type { IncludeObject } from "./table.js";
import { toTable } from "./table.js";
import type { JsonObject, KObject } from "./types.js";
import { isObject } from "./types.js";

export interface LogOptions {
  follow: boolean;
  previous: boolean;
  timestamps: boolean;
  tailLines?: number;
  limitBytes?: number;
  sinceSeconds?: number;
}

/** What the node agent provides to serve pods/log and pods/eviction. */
export interface NodeHooks {
  /** Streams a container's log into `res`; throws StatusError when the container has none yet. */
  streamLog(
    pod: KObject,
    container: string,
    opts: LogOptions,
    write: (chunk: Buffer) => boolean,
    signal: AbortSignal,
  ): Promise<void>;
  /** API-initiated eviction: marks the pod with DisruptionTarget and deletes it. */
  evict(ns: string, name: string, deleteOptions: JsonObject | undefined): void;
}

export interface HttpOptions {
  /** Bearer-token authentication and RBAC; undefined serves every request as the admin. */
  auth: { authenticate(token: string): UserInfo | undefined; authorizer: RbacAuthorizer } | undefined;
  /** The server ends every watch after this long (a real API server: 30-60 min), so clients' relists run. */
  watchTimeoutMs: number;
  gitVersion: string;
  bookmarkIntervalMs: number;
  /** Called for each request, for tests that assert on what clients sent. */
  onRequest?: (method: string, url: string) => void;
}

interface Target {
  user: UserInfo;
  t: ResourceType;
  version: string;
  ns: string | undefined;
  name: string | undefined;
  sub: string | undefined;
}

function send(res: ServerResponse, code: number, body: unknown, contentType = "application/json"): void {
  const text = JSON.stringify(body);
  res.writeHead(code, {
    "content-type": contentType,
    "content-length": Buffer.byteLength(text),
    "cache-control": "no-cache, private",
  });
  res.end(text);
}

function sendError(res: ServerResponse, e: unknown): void {
  if (res.headersSent) {
    res.destroy();
    return;
  }
  if (e instanceof StatusError) send(res, e.code, e.toStatus());
  else
    send(res, 500, {
      kind: "Status",
      apiVersion: "v1",
      metadata: {},
      status: "Failure",
      message: e instanceof Error ? e.message : String(e),
      reason: "InternalError",
      code: 500,
    });
}

async function readBody(req: IncomingMessage): Promise<unknown> {
  const chunks: Buffer[] = [];
  for await (const c of req) chunks.push(c as Buffer);
  const text = Buffer.concat(chunks).toString("utf8");
  if (text.trim() === "") return undefined;
  try {
    return JSON.parse(text) as unknown;
  } catch {
    throw badRequest(
      `the request body could not be decoded as JSON (YAML and protobuf bodies are not supported by the test cluster)`,
    );
  }
}

/** A review's body: JSON, or the protobuf kubectl sends for `auth can-i`. */
async function readReviewBody(req: IncomingMessage): Promise<unknown> {
  if (!(req.headers["content-type"] ?? "").startsWith("application/vnd.kubernetes.protobuf")) return readBody(req);
  const chunks: Buffer[] = [];
  for await (const c of req) chunks.push(c as Buffer);
  return decodeAccessReview(Buffer.concat(chunks));
}

function wantsTable(req: IncomingMessage): boolean {
  const accept = req.headers.accept ?? "";
  return accept
    .split(",")
    .some(
      (a) => a.includes("as=Table") && a.includes("g=meta.k8s.io") && a.includes("v=v1") && !a.includes("v=v1beta1"),
    );
}

const tableContentType = "application/json;as=Table;v=v1;g=meta.k8s.io";

export class ApiHttpHandler {
  /** While true, new watches are answered (200, headers) and then held open with nothing: no events, no end. */
  stallWatches = false;
  /** Watches held by `stallWatches` that their client has not closed yet. */
  stalledWatches = 0;
  /** While set, matching requests (watches and every other verb) are never answered, not even with headers. */
  stallRequests: ((method: string, url: string) => boolean) | undefined;
  /** Requests held by `stallRequests` that their client has not closed yet. */
  stalledRequests = 0;
  /** While set, matching requests are carried out but never answered: a reply lost on its way back. */
  loseAnswers: ((method: string, url: string) => boolean) | undefined;

  constructor(
    private readonly api: ObjectApi,
    private readonly node: NodeHooks,
    private readonly opts: HttpOptions,
  ) {}

  handle = (req: IncomingMessage, res: ServerResponse): void => {
    this.dispatch(req, res).catch((e: unknown) => sendError(res, e));
  };

  private async dispatch(req: IncomingMessage, res: ServerResponse): Promise<void> {
    const method = req.method ?? "GET";
    const url = new URL(req.url ?? "/", "http://localhost");
    this.opts.onRequest?.(method, url.pathname + url.search);
    if (this.stallRequests?.(method, url.pathname + url.search)) {
      // An API server (or a proxy) that accepted the request and never answers: only the client can end it.
      this.stalledRequests++;
      res.on("close", () => this.stalledRequests--);
      return;
    }
    if (this.loseAnswers?.(method, url.pathname + url.search)) {
      this.stalledRequests++;
      res.on("close", () => this.stalledRequests--);
      muzzle(res);
    }
    const path = url.pathname.replace(/\/+$/, "") || "/";
    if (["/healthz", "/livez", "/readyz"].includes(path)) {
      res.writeHead(200, { "content-type": "text/plain" }).end("ok");
      return;
    }
    const user = this.authenticate(req);
    if (!user) {
      send(res, 401, {
        kind: "Status",
        apiVersion: "v1",
        metadata: {},
        status: "Failure",
        message: "Unauthorized",
        reason: "Unauthorized",
        code: 401,
      });
      return;
    }
    const q = url.searchParams;
    if (!path.startsWith("/api/") && !path.startsWith("/apis/") && path !== "/api" && path !== "/apis")
      this.opts.auth?.authorizer.check(user, { verb: method.toLowerCase(), group: "", resource: "", path });
    if (path === "/version") {
      const m = /^v(\d+)\.(\d+)/.exec(this.opts.gitVersion);
      send(res, 200, {
        major: m?.[1] ?? "1",
        minor: m?.[2] ?? "32",
        gitVersion: this.opts.gitVersion,
        gitCommit: "0000000000000000000000000000000000000000",
        gitTreeState: "clean",
        buildDate: "2025-01-01T00:00:00Z",
        goVersion: "go1.23.0",
        compiler: "gc",
        platform: "linux/amd64",
      });
      return;
    }
    if (path === "/openapi/v3") {
      send(res, 200, openApiRoot(this.api.resources));
      return;
    }
    if (path.startsWith("/openapi/v3/")) {
      const rest = path.slice("/openapi/v3/".length).split("/");
      const doc =
        rest[0] === "api"
          ? openApiDocument(this.api.resources, "", rest[1] ?? "")
          : openApiDocument(this.api.resources, rest[1] ?? "", rest[2] ?? "");
      if (!doc) throw notFoundPath();
      send(res, 200, doc);
      return;
    }
    if (path === "/api") {
      send(res, 200, {
        kind: "APIVersions",
        versions: ["v1"],
        serverAddressByClientCIDRs: [{ clientCIDR: "0.0.0.0/0", serverAddress: req.headers.host ?? "" }],
      });
      return;
    }
    if (path === "/apis") {
      send(res, 200, {
        kind: "APIGroupList",
        apiVersion: "v1",
        groups: this.api.resources.groups().map((g) => this.groupObject(g.name, g.versions)),
      });
      return;
    }
    const parts = path
      .split("/")
      .filter((p) => p !== "")
      .map(decodeURIComponent);
    let group: string;
    let version: string;
    let rest: string[];
    if (parts[0] === "api" && parts.length >= 2) {
      group = "";
      version = parts[1] ?? "";
      rest = parts.slice(2);
    } else if (parts[0] === "apis" && parts.length >= 2) {
      group = parts[1] ?? "";
      if (parts.length === 2) {
        const g = this.api.resources.groups().find((x) => x.name === group);
        if (!g) throw notFoundPath();
        send(res, 200, { kind: "APIGroup", apiVersion: "v1", ...this.groupObject(g.name, g.versions) });
        return;
      }
      version = parts[2] ?? "";
      rest = parts.slice(3);
    } else {
      throw notFoundPath();
    }
    if (rest.length === 0) {
      const list = this.api.resources.resourceList(group, version);
      if (!list) throw notFoundPath();
      send(res, 200, list);
      return;
    }
    let watchPath = false;
    if (rest[0] === "watch") {
      watchPath = true;
      rest = rest.slice(1);
    }
    const resolved = this.resolve(group, version, rest);
    if (!resolved) throw notFoundPath();
    const target: Target = { ...resolved, user };
    const isWatch = watchPath || q.get("watch") === "true" || q.get("watch") === "1";
    this.opts.auth?.authorizer.check(user, requestAttributes(method, target, isWatch, q.get("fieldSelector")));
    if (target.t.group === "authorization.k8s.io" && method === "POST" && target.name === undefined) {
      send(res, 201, this.review(target, user, await readReviewBody(req)));
      return;
    }
    await this.serveResource(req, res, method, target, q, isWatch);
  }

  private groupObject(name: string, versions: string[]): JsonObject {
    const gvs = versions.map((v) => ({ groupVersion: `${name}/${v}`, version: v }));
    return { name, versions: gvs, preferredVersion: gvs[0] };
  }

  /** The request's user: from its bearer token, then impersonation headers (which need the impersonate verb). */
  private authenticate(req: IncomingMessage): UserInfo | undefined {
    const auth = this.opts.auth;
    if (!auth) return adminUser;
    const h = req.headers.authorization ?? "";
    const user = h.startsWith("Bearer ") ? auth.authenticate(h.slice("Bearer ".length).trim()) : undefined;
    if (!user) return undefined;
    const as = req.headers["impersonate-user"];
    if (typeof as !== "string" || as === "") return user;
    const sa = /^system:serviceaccount:([^:]+):([^:]+)$/.exec(as);
    auth.authorizer.check(
      user,
      sa
        ? { verb: "impersonate", group: "", resource: "serviceaccounts", namespace: sa[1], name: sa[2] }
        : { verb: "impersonate", group: "", resource: "users", name: as },
    );
    const raw = req.headers["impersonate-group"];
    const groups = (Array.isArray(raw) ? raw : typeof raw === "string" ? raw.split(",") : [])
      .map((g) => g.trim())
      .filter((g) => g !== "");
    for (const g of groups)
      auth.authorizer.check(user, { verb: "impersonate", group: "", resource: "groups", name: g });
    const base = sa ? serviceAccountUser(sa[1] ?? "", sa[2] ?? "").groups : ["system:authenticated"];
    return { name: as, groups: [...new Set([...groups, ...base])] };
  }

  /** SelfSubjectAccessReview, SubjectAccessReview and LocalSubjectAccessReview (what `kubectl auth can-i` sends). */
  private review(target: Target, user: UserInfo, body: unknown): JsonObject {
    const b = isObject(body) ? body : {};
    const spec = isObject(b.spec) ? b.spec : {};
    if (target.t.resource === "selfsubjectrulesreviews") {
      const namespace = String(spec.namespace ?? "");
      const rules = this.opts.auth
        ? this.opts.auth.authorizer.rulesFor(user, namespace)
        : {
            resourceRules: [{ verbs: ["*"], apiGroups: ["*"], resources: ["*"] }],
            nonResourceRules: [{ verbs: ["*"], nonResourceURLs: ["*"] }],
          };
      return {
        kind: "SelfSubjectRulesReview",
        apiVersion: "authorization.k8s.io/v1",
        metadata: { creationTimestamp: null },
        spec,
        status: { ...rules, incomplete: false },
      };
    }
    let subject = user;
    if (target.t.resource !== "selfsubjectaccessreviews") {
      subject = { name: String(spec.user ?? ""), groups: Array.isArray(spec.groups) ? spec.groups.map(String) : [] };
      const sa = /^system:serviceaccount:([^:]+):([^:]+)$/.exec(subject.name);
      if (sa)
        subject = {
          name: subject.name,
          groups: [...new Set([...subject.groups, ...serviceAccountUser(sa[1] ?? "", sa[2] ?? "").groups])],
        };
    }
    const ra = isObject(spec.resourceAttributes) ? spec.resourceAttributes : undefined;
    const nra = isObject(spec.nonResourceAttributes) ? spec.nonResourceAttributes : undefined;
    let attrs: Attributes;
    if (ra) {
      const ns =
        target.t.resource === "localsubjectaccessreviews"
          ? target.ns
          : typeof ra.namespace === "string" && ra.namespace !== ""
            ? ra.namespace
            : undefined;
      attrs = {
        verb: String(ra.verb ?? ""),
        group: String(ra.group ?? ""),
        resource: String(ra.resource ?? ""),
        ...(typeof ra.subresource === "string" && ra.subresource !== "" ? { subresource: ra.subresource } : {}),
        ...(ns !== undefined ? { namespace: ns } : {}),
        ...(typeof ra.name === "string" && ra.name !== "" ? { name: ra.name } : {}),
      };
    } else if (nra) {
      attrs = { verb: String(nra.verb ?? ""), group: "", resource: "", path: String(nra.path ?? "") };
    } else throw badRequest("spec.resourceAttributes or spec.nonResourceAttributes is required");
    const decision = this.opts.auth
      ? this.opts.auth.authorizer.authorize(subject, attrs)
      : { allowed: true, reason: "" };
    return {
      kind: target.t.kind,
      apiVersion: "authorization.k8s.io/v1",
      metadata: { creationTimestamp: null },
      spec,
      status: { allowed: decision.allowed, ...(decision.reason ? { reason: decision.reason } : {}) },
    };
  }

  private resolve(group: string, version: string, rest: string[]): Omit<Target, "user"> | undefined {
    // /namespaces/{ns}/{resource}[/{name}[/{sub}]] unless {resource} is not namespaced (then it is namespaces/{name}/{sub}).
    if (rest[0] === "namespaces" && rest.length >= 3) {
      const t = this.api.resources.lookup(group, version, rest[2] ?? "");
      if (t && t.namespaced) return { t, version, ns: rest[1], name: rest[3], sub: rest[4] };
    }
    const t = this.api.resources.lookup(group, version, rest[0] ?? "");
    if (!t || rest.length > 3) return undefined;
    if (t.namespaced && rest.length > 1) return undefined;
    return { t, version, ns: undefined, name: rest[1], sub: rest[2] };
  }

  private async serveResource(
    req: IncomingMessage,
    res: ServerResponse,
    method: string,
    target: Target,
    q: URLSearchParams,
    isWatch: boolean,
  ): Promise<void> {
    const { t, version, ns, name, sub } = target;
    const api = this.api;
    const dryRun = q.get("dryRun") === "All";
    const table = wantsTable(req);
    const include = (q.get("includeObject") ?? "Metadata") as IncludeObject;
    if (name === undefined) {
      switch (method) {
        case "GET": {
          if (isWatch) return this.serveWatch(req, res, target, q, table, include);
          const limit = q.get("limit");
          const result = api.list(
            t,
            ns,
            {
              labelSelector: q.get("labelSelector"),
              fieldSelector: q.get("fieldSelector"),
              ...(limit ? { limit: Number(limit) } : {}),
              continueToken: q.get("continue"),
            },
            version,
          );
          if (table) {
            send(
              res,
              200,
              toTable(t, version, result.items, result.resourceVersion, include, true, result.continueToken),
              tableContentType,
            );
            return;
          }
          send(res, 200, {
            kind: t.listKind,
            apiVersion: apiVersionOf(t.group, version),
            metadata: {
              resourceVersion: result.resourceVersion,
              ...(result.continueToken
                ? { continue: result.continueToken, remainingItemCount: result.remainingItemCount }
                : {}),
            },
            items: result.items,
          });
          return;
        }
        case "POST": {
          if (t.namespaced && ns === undefined)
            throw methodNotAllowed(`the server does not allow this method on the requested resource`);
          const created = api.create(t, ns, await readBody(req), { dryRun, user: target.user }, version);
          send(res, 201, created);
          return;
        }
        case "DELETE": {
          const body = await readBody(req);
          const deleted = api.deleteCollection(
            t,
            ns,
            { labelSelector: q.get("labelSelector"), fieldSelector: q.get("fieldSelector") },
            { ...deleteOptions(body, q), dryRun },
          );
          send(res, 200, {
            kind: t.listKind,
            apiVersion: apiVersionOf(t.group, version),
            metadata: {},
            items: deleted,
          });
          return;
        }
        default:
          throw methodNotAllowed(`the server does not allow this method on the requested resource`);
      }
    }
    if (sub !== undefined) return this.serveSubresource(req, res, method, target, q, name, sub);
    switch (method) {
      case "GET": {
        if (isWatch) {
          const fs = q.get("fieldSelector");
          q.set("fieldSelector", fs ? `${fs},metadata.name=${name}` : `metadata.name=${name}`);
          return this.serveWatch(req, res, { ...target, name: undefined }, q, table, include);
        }
        const o = api.get(t, ns, name, version);
        if (table)
          send(res, 200, toTable(t, version, [o], o.metadata.resourceVersion ?? "", include, true), tableContentType);
        else send(res, 200, o);
        return;
      }
      case "PUT":
        send(res, 200, api.update(t, ns, name, await readBody(req), { dryRun, user: target.user }, version));
        return;
      case "PATCH": {
        const type = patchTypeOf(req.headers["content-type"] ?? "");
        send(res, 200, api.patch(t, ns, name, type, await readBody(req), { dryRun, user: target.user }, version));
        return;
      }
      case "DELETE": {
        const body = await readBody(req);
        send(res, 200, api.delete(t, ns, name, { ...deleteOptions(body, q), dryRun }, version));
        return;
      }
      default:
        throw methodNotAllowed(`the server does not allow this method on the requested resource`);
    }
  }

  private async serveSubresource(
    req: IncomingMessage,
    res: ServerResponse,
    method: string,
    target: Target,
    q: URLSearchParams,
    name: string,
    sub: string,
  ): Promise<void> {
    const { t, version, ns } = target;
    const api = this.api;
    const dryRun = q.get("dryRun") === "All";
    const isPods = t.group === "" && t.resource === "pods";
    if (sub === "status" && t.statusSubresource) {
      if (method === "GET") send(res, 200, api.get(t, ns, name, version));
      else if (method === "PUT")
        send(
          res,
          200,
          api.update(t, ns, name, await readBody(req), { subresource: "status", dryRun, user: target.user }, version),
        );
      else if (method === "PATCH")
        send(
          res,
          200,
          api.patch(
            t,
            ns,
            name,
            patchTypeOf(req.headers["content-type"] ?? ""),
            await readBody(req),
            { subresource: "status", dryRun, user: target.user },
            version,
          ),
        );
      else throw methodNotAllowed("the server does not allow this method on the requested resource");
      return;
    }
    if (isPods && sub === "log" && method === "GET") return this.serveLog(req, res, ns ?? "", name, q);
    if (isPods && sub === "eviction" && method === "POST") {
      const body = await readBody(req);
      api.get(t, ns, name);
      this.node.evict(ns ?? "", name, isObject(body) && isObject(body.deleteOptions) ? body.deleteOptions : undefined);
      send(res, 201, { kind: "Status", apiVersion: "v1", metadata: {}, status: "Success", code: 201 });
      return;
    }
    if (isPods && sub === "binding" && method === "POST") {
      const body = await readBody(req);
      const node = isObject(body) && isObject(body.target) ? String(body.target.name ?? "") : "";
      const pod = api.get(t, ns, name);
      if (isObject(pod.spec) && pod.spec.nodeName)
        throw new StatusError(
          409,
          "Conflict",
          `pod ${name} is already assigned to node "${String(pod.spec.nodeName)}"`,
        );
      api.mutate(t, ns, name, (p) => {
        if (isObject(p.spec)) p.spec.nodeName = node;
      });
      send(res, 201, { kind: "Status", apiVersion: "v1", metadata: {}, status: "Success", code: 201 });
      return;
    }
    throw notFoundPath();
  }

  private async serveLog(
    req: IncomingMessage,
    res: ServerResponse,
    ns: string,
    name: string,
    q: URLSearchParams,
  ): Promise<void> {
    const pod = this.api.get(this.api.type("", "pods"), ns, name);
    const spec = isObject(pod.spec) ? pod.spec : {};
    const names = (key: string): string[] =>
      Array.isArray(spec[key]) ? spec[key].filter(isObject).map((c) => String(c.name)) : [];
    const containers = names("containers");
    const inits = names("initContainers");
    let container = q.get("container") ?? undefined;
    if (container === undefined) {
      if (containers.length === 1 && inits.length === 0) container = containers[0];
      else if (containers.length === 1) container = containers[0];
      else
        throw badRequest(
          `a container name must be specified for pod ${name}, choose one of: [${containers.join(" ")}]${inits.length > 0 ? ` or one of the init containers: [${inits.join(" ")}]` : ""}`,
        );
    }
    if (container === undefined || ![...containers, ...inits].includes(container))
      throw badRequest(`container ${container ?? ""} is not valid for pod ${name}`);
    const num = (k: string): number | undefined => (q.get(k) === null ? undefined : Number(q.get(k)));
    const opts: LogOptions = {
      follow: q.get("follow") === "true" || q.get("follow") === "1",
      previous: q.get("previous") === "true",
      timestamps: q.get("timestamps") === "true",
      ...(num("tailLines") !== undefined ? { tailLines: num("tailLines") } : {}),
      ...(num("limitBytes") !== undefined ? { limitBytes: num("limitBytes") } : {}),
      ...(num("sinceSeconds") !== undefined ? { sinceSeconds: num("sinceSeconds") } : {}),
    };
    const abort = new AbortController();
    res.on("close", () => abort.abort());
    let started = false;
    const write = (chunk: Buffer): boolean => {
      if (!started) {
        res.writeHead(200, {
          "content-type": "text/plain",
          "transfer-encoding": "chunked",
          "cache-control": "no-cache, private",
        });
        started = true;
      }
      return res.write(chunk);
    };
    await this.node.streamLog(pod, container, opts, write, abort.signal);
    if (!started) res.writeHead(200, { "content-type": "text/plain", "content-length": 0 });
    res.end();
  }

  /**
   * A watch stream. Without a resourceVersion (or with "0") it starts with ADDED events
   * for the current objects; with one it replays the retained history after it, or
   * sends a single ERROR event carrying a 410 Expired Status when that is compacted.
   */
  private serveWatch(
    req: IncomingMessage,
    res: ServerResponse,
    target: Target,
    q: URLSearchParams,
    table: boolean,
    include: IncludeObject,
  ): void {
    const { t, version, ns } = target;
    const labels = parseLabelSelector(q.get("labelSelector"));
    const fields = parseFieldSelector(q.get("fieldSelector"));
    checkFieldSelector(t, fields.keys);
    const key = typeKey(t.group, t.resource);
    const matches = (o: KObject | undefined): boolean =>
      o !== undefined &&
      (!t.namespaced || ns === undefined || o.metadata.namespace === ns) &&
      labels(o.metadata.labels ?? {}) &&
      fields.selector(fieldsOf(o, fields.keys));
    res.writeHead(200, {
      "content-type": table ? tableContentType : "application/json",
      "transfer-encoding": "chunked",
      "cache-control": "no-cache, private",
    });
    res.flushHeaders();
    if (this.stallWatches) {
      // A stalled API server or a proxy that keeps the connection but passes nothing on: the
      // watch never sees an event nor its timeoutSeconds; only the client can end it.
      this.stalledWatches++;
      res.on("close", () => this.stalledWatches--);
      return;
    }
    let first = true;
    const emit = (type: string, o: KObject | JsonObject): void => {
      let object: unknown = o;
      if (table && type !== "ERROR" && type !== "BOOKMARK") {
        const k = o as KObject;
        object = toTable(
          t,
          version,
          [this.api.present(t, k, version)],
          k.metadata.resourceVersion ?? "",
          include,
          first,
        );
        first = false;
      } else if (type !== "ERROR" && type !== "BOOKMARK") {
        object = this.api.present(t, o as KObject, version);
      }
      res.write(`${JSON.stringify({ type, object })}\n`);
    };
    const rvParam = q.get("resourceVersion") ?? "";
    const bookmarks = q.get("allowWatchBookmarks") === "true";
    const sendInitial = q.get("sendInitialEvents") === "true";
    const onEvent = (e: StoreEvent): void => {
      if (e.typeKey !== key) return;
      const now = matches(e.object);
      const before = e.type === "MODIFIED" && matches(e.previous);
      if (e.type === "DELETED") {
        if (now || matches(e.previous)) emit("DELETED", e.object);
      } else if (e.type === "ADDED") {
        if (now) emit("ADDED", e.object);
      } else if (now && before) emit("MODIFIED", e.object);
      else if (now) emit("ADDED", e.object);
      else if (before) emit("DELETED", e.object);
    };
    if (rvParam === "" || rvParam === "0" || sendInitial) {
      for (const o of this.api.store.list(key, t.namespaced ? ns : undefined)) if (matches(o)) emit("ADDED", o);
      if (sendInitial && bookmarks) {
        emit("BOOKMARK", {
          kind: t.kind,
          apiVersion: apiVersionOf(t.group, version),
          metadata: {
            resourceVersion: String(this.api.store.currentRevision),
            annotations: { "k8s.io/initial-events-end": "true" },
          },
        });
      }
    } else {
      const from = Number(rvParam);
      const replay = Number.isFinite(from) ? this.api.store.since(from) : undefined;
      if (!replay) {
        const status = new StatusError(
          410,
          "Expired",
          `too old resource version: ${rvParam} (${this.api.store.oldestResumable + 1})`,
        ).toStatus();
        res.end(`${JSON.stringify({ type: "ERROR", object: status })}\n`);
        return;
      }
      for (const e of replay) onEvent(e);
    }
    const unsubscribe = this.api.store.subscribe(onEvent);
    const timers: NodeJS.Timeout[] = [];
    const stop = (): void => {
      unsubscribe();
      for (const tm of timers) clearTimeout(tm);
      if (!res.writableEnded) res.end();
    };
    if (bookmarks) {
      const iv = setInterval(
        () =>
          emit("BOOKMARK", {
            kind: t.kind,
            apiVersion: apiVersionOf(t.group, version),
            metadata: { resourceVersion: String(this.api.store.currentRevision) },
          }),
        this.opts.bookmarkIntervalMs,
      );
      iv.unref();
      timers.push(iv);
    }
    const timeout = Number(q.get("timeoutSeconds") ?? "0");
    const tm = setTimeout(
      stop,
      timeout > 0 ? Math.min(timeout * 1000, this.opts.watchTimeoutMs) : this.opts.watchTimeoutMs,
    );
    tm.unref();
    timers.push(tm);
    req.on("close", stop);
    res.on("close", stop);
  }
}

/** The RBAC attributes of a resource request (namespaces' own name counts as their namespace, as in Kubernetes). */
/**
 * The authorizer's view of a request. As the real RequestInfo resolver does, a list or watch
 * whose field selector names one object (`metadata.name=x`) carries that name, so RBAC rules
 * with resourceNames can allow it.
 */
function requestAttributes(method: string, target: Target, isWatch: boolean, fieldSelector: string | null): Attributes {
  const { t, ns, sub } = target;
  let name = target.name;
  if (name === undefined && (method === "GET" || method === "HEAD") && fieldSelector) {
    const named = /^metadata\.name==?(.+)$/.exec(
      fieldSelector.split(",").find((f) => f.startsWith("metadata.name=")) ?? "",
    );
    if (named) name = named[1];
  }
  let verb: string;
  switch (method) {
    case "GET":
    case "HEAD":
      verb = isWatch ? "watch" : target.name === undefined ? "list" : "get";
      break;
    case "POST":
      verb = "create";
      break;
    case "PUT":
      verb = "update";
      break;
    case "PATCH":
      verb = "patch";
      break;
    case "DELETE":
      verb = target.name === undefined ? "deletecollection" : "delete";
      break;
    default:
      verb = method.toLowerCase();
  }
  const namespace = t.namespaced ? ns : t.group === "" && t.resource === "namespaces" ? target.name : undefined;
  return {
    verb,
    group: t.group,
    resource: t.resource,
    ...(sub !== undefined ? { subresource: sub } : {}),
    ...(namespace !== undefined ? { namespace } : {}),
    ...(name !== undefined ? { name } : {}),
  };
}

function notFoundPath(): StatusError {
  return new StatusError(404, "NotFound", "the server could not find the requested resource", {});
}

function deleteOptions(
  body: unknown,
  q: URLSearchParams,
): {
  propagationPolicy?: PropagationPolicy;
  gracePeriodSeconds?: number;
  orphanDependents?: boolean;
  preconditions?: { uid?: string; resourceVersion?: string };
} {
  const b = isObject(body) ? body : {};
  const out: {
    propagationPolicy?: PropagationPolicy;
    gracePeriodSeconds?: number;
    orphanDependents?: boolean;
    preconditions?: { uid?: string; resourceVersion?: string };
  } = {};
  const policy = b.propagationPolicy ?? q.get("propagationPolicy") ?? undefined;
  if (typeof policy === "string") out.propagationPolicy = policy as PropagationPolicy;
  const grace = b.gracePeriodSeconds ?? q.get("gracePeriodSeconds") ?? undefined;
  if (grace !== undefined && grace !== null) out.gracePeriodSeconds = Number(grace);
  const orphan = b.orphanDependents ?? q.get("orphanDependents") ?? undefined;
  if (orphan !== undefined && orphan !== null) out.orphanDependents = orphan === true || orphan === "true";
  if (isObject(b.preconditions)) {
    out.preconditions = {
      ...(typeof b.preconditions.uid === "string" ? { uid: b.preconditions.uid } : {}),
      ...(typeof b.preconditions.resourceVersion === "string"
        ? { resourceVersion: b.preconditions.resourceVersion }
        : {}),
    };
  }
  return out;
}

/** Makes `res` swallow its answer (headers and body) while the connection stays open. */
function muzzle(res: ServerResponse): void {
  const silent = { writeHead: () => res, write: () => true, end: () => res, flushHeaders: () => undefined };
  Object.assign(res, silent);
}
