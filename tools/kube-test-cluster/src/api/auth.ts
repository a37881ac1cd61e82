/**
 * Authentication and RBAC authorization as the API server performs them: the admin
 * token (group system:masters), ServiceAccount tokens (signed here, valid while the
 * ServiceAccount with that uid exists), impersonation headers, and authorization from
 * Role/ClusterRole/RoleBinding/ClusterRoleBinding objects with the real 403 wording.
 */
import { createHmac, randomBytes, timingSafeEqual } from "node:crypto";
import type { ObjectApi } from "./object-api.js";
import { qualified, StatusError } from "./status-error.js";
import type { JsonObject, KObject } from "./types.js";
import { isObject } from "./types.js";

export interface UserInfo {
  name: string;
  groups: string[];
}

/** What a request asks to do, in RBAC's terms. */
export interface Attributes {
  verb: string;
  group: string;
  resource: string;
  subresource?: string;
  namespace?: string;
  name?: string;
  /** Set for non-resource requests (discovery, /version, /openapi). */
  path?: string;
}

export const adminUser: UserInfo = { name: "kubernetes-admin", groups: ["system:masters", "system:authenticated"] };

const saPrefix = "system:serviceaccount:";

/** The user a ServiceAccount authenticates as. */
export function serviceAccountUser(namespace: string, name: string): UserInfo {
  return {
    name: `${saPrefix}${namespace}:${name}`,
    groups: ["system:serviceaccounts", `system:serviceaccounts:${namespace}`, "system:authenticated"],
  };
}

export class TokenAuthority {
  private readonly key = randomBytes(32);

  constructor(
    private readonly api: ObjectApi,
    private readonly adminToken: string,
  ) {}

  /** A token for the ServiceAccount as it exists now (it stops working when the SA is deleted or recreated). */
  issue(namespace: string, name: string): string {
    const sa = this.api.tryGet(this.api.type("", "serviceaccounts"), namespace, name);
    const payload = Buffer.from(JSON.stringify({ ns: namespace, name, uid: sa?.metadata.uid ?? "" })).toString(
      "base64url",
    );
    return `ktc-sa.${payload}.${this.sign(payload)}`;
  }

  private sign(payload: string): string {
    return createHmac("sha256", this.key).update(payload).digest("base64url");
  }

  /** The user behind a bearer token, or undefined (401). */
  authenticate(token: string): UserInfo | undefined {
    if (token === this.adminToken) return adminUser;
    const [prefix, payload, sig] = token.split(".");
    if (prefix !== "ktc-sa" || !payload || !sig) return undefined;
    const want = Buffer.from(this.sign(payload));
    const got = Buffer.from(sig);
    if (want.length !== got.length || !timingSafeEqual(want, got)) return undefined;
    let claims: { ns?: string; name?: string; uid?: string };
    try {
      claims = JSON.parse(Buffer.from(payload, "base64url").toString("utf8")) as typeof claims;
    } catch {
      return undefined;
    }
    const sa = this.api.tryGet(this.api.type("", "serviceaccounts"), claims.ns ?? "", claims.name ?? "");
    if (!sa || (claims.uid !== "" && sa.metadata.uid !== claims.uid)) return undefined;
    return serviceAccountUser(claims.ns ?? "", claims.name ?? "");
  }
}

function strings(v: unknown): string[] {
  return Array.isArray(v) ? v.map(String) : [];
}

function ruleAllows(rule: JsonObject, a: Attributes): boolean {
  const verbs = strings(rule.verbs);
  if (!verbs.includes("*") && !verbs.includes(a.verb)) return false;
  if (a.path !== undefined) {
    return strings(rule.nonResourceURLs).some(
      (u) => u === "*" || u === a.path || (u.endsWith("*") && a.path?.startsWith(u.slice(0, -1))),
    );
  }
  const groups = strings(rule.apiGroups);
  if (!groups.includes("*") && !groups.includes(a.group)) return false;
  const full = a.subresource ? `${a.resource}/${a.subresource}` : a.resource;
  const resources = strings(rule.resources);
  if (
    !resources.includes("*") &&
    !resources.includes(full) &&
    !(a.subresource && resources.includes(`*/${a.subresource}`))
  )
    return false;
  const names = strings(rule.resourceNames);
  if (names.length > 0 && (a.name === undefined || !names.includes(a.name))) return false;
  return true;
}

function subjectMatches(s: JsonObject, user: UserInfo, bindingNs: string | undefined): boolean {
  const kind = String(s.kind ?? "");
  const name = String(s.name ?? "");
  if (kind === "User") return name === user.name;
  if (kind === "Group") return user.groups.includes(name);
  if (kind === "ServiceAccount") return user.name === `${saPrefix}${String(s.namespace ?? bindingNs ?? "")}:${name}`;
  return false;
}

/** Endpoints every authenticated user may use (system:discovery, system:basic-user, system:public-info-viewer). */
const publicPaths = ["/api", "/apis", "/version", "/openapi", "/healthz", "/livez", "/readyz"];

export class RbacAuthorizer {
  /** Every refusal made by check() (API requests and admission), for tests asserting a product never met a 403. */
  readonly denials: {
    user: string;
    verb: string;
    resource: string;
    namespace?: string;
    name?: string;
    message: string;
  }[] = [];

  constructor(private readonly api: ObjectApi) {}

  private rulesOf(kind: string, name: string, ns: string | undefined): JsonObject[] {
    const t =
      kind === "ClusterRole"
        ? this.api.type("rbac.authorization.k8s.io", "clusterroles")
        : this.api.type("rbac.authorization.k8s.io", "roles");
    const role = this.api.tryGet(t, kind === "ClusterRole" ? undefined : ns, name);
    return role && Array.isArray(role.rules) ? role.rules.filter(isObject) : [];
  }

  /** Whether `user` may do `a`, with the reason the real authorizer gives when it allows. */
  authorize(user: UserInfo, a: Attributes): { allowed: boolean; reason: string } {
    if (user.groups.includes("system:masters")) return { allowed: true, reason: "" };
    if (
      a.path !== undefined &&
      (a.verb === "get" || a.verb === "head") &&
      publicPaths.some((p) => a.path === p || a.path?.startsWith(`${p}/`))
    ) {
      return { allowed: true, reason: "" };
    }
    if (
      a.group === "authorization.k8s.io" &&
      ["selfsubjectaccessreviews", "selfsubjectrulesreviews"].includes(a.resource) &&
      a.verb === "create"
    )
      return { allowed: true, reason: "" };
    const crbs = this.api.store.list("rbac.authorization.k8s.io/clusterrolebindings");
    for (const b of crbs) {
      if (!(Array.isArray(b.subjects) && b.subjects.filter(isObject).some((s) => subjectMatches(s, user, undefined))))
        continue;
      const ref = isObject(b.roleRef) ? b.roleRef : {};
      if (this.rulesOf("ClusterRole", String(ref.name ?? ""), undefined).some((r) => ruleAllows(r, a))) {
        return {
          allowed: true,
          reason: `RBAC: allowed by ClusterRoleBinding "${b.metadata.name ?? ""}" of ClusterRole "${String(ref.name ?? "")}" to ${user.name.startsWith(saPrefix) ? "ServiceAccount" : "User"} "${user.name}"`,
        };
      }
    }
    if (a.namespace !== undefined && a.path === undefined) {
      for (const b of this.api.store.list("rbac.authorization.k8s.io/rolebindings", a.namespace)) {
        if (!(
          Array.isArray(b.subjects) && b.subjects.filter(isObject).some((s) => subjectMatches(s, user, a.namespace))
        ))
          continue;
        const ref = isObject(b.roleRef) ? b.roleRef : {};
        if (
          this.rulesOf(String(ref.kind ?? "Role"), String(ref.name ?? ""), a.namespace).some((r) => ruleAllows(r, a))
        ) {
          return {
            allowed: true,
            reason: `RBAC: allowed by RoleBinding "${b.metadata.name ?? ""}/${a.namespace}" of ${String(ref.kind ?? "Role")} "${String(ref.name ?? "")}" to ${user.name.startsWith(saPrefix) ? "ServiceAccount" : "User"} "${user.name}"`,
          };
        }
      }
    }
    return { allowed: false, reason: "" };
  }

  /** The rules that apply to `user` in `namespace` (SelfSubjectRulesReview, `kubectl auth can-i --list`). */
  rulesFor(user: UserInfo, namespace: string): { resourceRules: JsonObject[]; nonResourceRules: JsonObject[] } {
    const rules: JsonObject[] = [];
    if (user.groups.includes("system:masters"))
      rules.push({ apiGroups: ["*"], resources: ["*"], verbs: ["*"] }, { nonResourceURLs: ["*"], verbs: ["*"] });
    for (const b of this.api.store.list("rbac.authorization.k8s.io/clusterrolebindings")) {
      if (!(Array.isArray(b.subjects) && b.subjects.filter(isObject).some((s) => subjectMatches(s, user, undefined))))
        continue;
      rules.push(...this.rulesOf("ClusterRole", String(isObject(b.roleRef) ? (b.roleRef.name ?? "") : ""), undefined));
    }
    for (const b of this.api.store.list("rbac.authorization.k8s.io/rolebindings", namespace)) {
      if (!(Array.isArray(b.subjects) && b.subjects.filter(isObject).some((s) => subjectMatches(s, user, namespace))))
        continue;
      const ref = isObject(b.roleRef) ? b.roleRef : {};
      rules.push(
        ...this.rulesOf(String(ref.kind ?? "Role"), String(ref.name ?? ""), namespace).filter(
          (r) => r.nonResourceURLs === undefined,
        ),
      );
    }
    const resourceRules: JsonObject[] = [
      {
        verbs: ["create"],
        apiGroups: ["authorization.k8s.io"],
        resources: ["selfsubjectaccessreviews", "selfsubjectrulesreviews"],
      },
    ];
    const nonResourceRules: JsonObject[] = [
      { verbs: ["get"], nonResourceURLs: publicPaths.flatMap((p) => [p, `${p}/*`]) },
    ];
    for (const r of rules) {
      if (Array.isArray(r.nonResourceURLs))
        nonResourceRules.push({ verbs: strings(r.verbs), nonResourceURLs: strings(r.nonResourceURLs) });
      else
        resourceRules.push({
          verbs: strings(r.verbs),
          apiGroups: strings(r.apiGroups),
          resources: strings(r.resources),
          ...(Array.isArray(r.resourceNames) && r.resourceNames.length > 0
            ? { resourceNames: strings(r.resourceNames) }
            : {}),
        });
    }
    return { resourceRules, nonResourceRules };
  }

  /** Throws the API server's 403 Forbidden Status when `user` may not do `a`. */
  check(user: UserInfo, a: Attributes, prefix?: string): void {
    if (this.authorize(user, a).allowed) return;
    const e = forbiddenFor(user, a, prefix);
    this.denials.push({
      user: user.name,
      verb: a.verb,
      resource: a.path ?? (a.subresource ? `${a.resource}/${a.subresource}` : a.resource),
      ...(a.namespace !== undefined ? { namespace: a.namespace } : {}),
      ...(a.name !== undefined ? { name: a.name } : {}),
      message: e.message,
    });
    throw e;
  }
}

/** `pods "x" is forbidden: User "u" cannot get resource "pods" in API group "" in the namespace "ns"` */
export function forbiddenFor(user: UserInfo, a: Attributes, prefix?: string): StatusError {
  if (a.path !== undefined)
    return new StatusError(403, "Forbidden", `forbidden: User "${user.name}" cannot ${a.verb} path "${a.path}"`, {});
  const what = a.subresource ? `${a.resource}/${a.subresource}` : a.resource;
  const scope = a.namespace !== undefined ? `in the namespace "${a.namespace}"` : "at the cluster scope";
  const subject = `${qualified(a.resource, a.group)}${a.name !== undefined ? ` "${a.name}"` : ""}`;
  const why = `User "${user.name}" cannot ${a.verb} resource "${what}" in API group "${a.group}" ${scope}`;
  return new StatusError(403, "Forbidden", `${subject} is forbidden: ${prefix ? `${prefix}: ` : ""}${why}`, {
    ...(a.name !== undefined ? { name: a.name } : {}),
    group: a.group,
    kind: a.resource,
  });
}

/**
 * OwnerReferencesPermissionEnforcement: setting blockOwnerDeletion on a reference needs
 * `update` on the owner's `finalizers` subresource; changing ownerReferences at all needs
 * `delete` on the object itself.
 */
export function checkOwnerReferences(
  api: ObjectApi,
  authz: RbacAuthorizer,
  user: UserInfo,
  a: Attributes,
  obj: KObject,
  old: KObject | undefined,
): void {
  const refs = obj.metadata.ownerReferences ?? [];
  const oldRefs = old?.metadata.ownerReferences ?? [];
  if (old && JSON.stringify(refs) !== JSON.stringify(oldRefs)) {
    authz.check(
      user,
      { ...a, verb: "delete", subresource: undefined },
      "cannot change ownerReferences without delete permission on the object",
    );
  }
  for (const r of refs) {
    if (r.blockOwnerDeletion !== true) continue;
    if (oldRefs.some((o) => o.uid === r.uid && o.blockOwnerDeletion === true)) continue;
    const t = api.resources.byKind(r.apiVersion, r.kind);
    if (!t) {
      throw new StatusError(
        403,
        "Forbidden",
        `${qualified(a.resource, a.group)} "${obj.metadata.name ?? ""}" is forbidden: cannot set blockOwnerDeletion in this case because cannot find RESTMapping for APIVersion ${r.apiVersion} Kind ${r.kind}`,
        {},
      );
    }
    const attrs: Attributes = {
      verb: "update",
      group: t.group,
      resource: t.resource,
      subresource: "finalizers",
      name: r.name,
      ...(t.namespaced ? { namespace: a.namespace } : {}),
    };
    if (!authz.authorize(user, attrs).allowed) {
      const inner = forbiddenFor(user, attrs).message;
      authz.denials.push({
        user: user.name,
        verb: "update",
        resource: `${t.resource}/finalizers`,
        ...(attrs.namespace !== undefined ? { namespace: attrs.namespace } : {}),
        name: r.name,
        message: inner,
      });
      throw new StatusError(
        403,
        "Forbidden",
        `${qualified(a.resource, a.group)} "${obj.metadata.name ?? ""}" is forbidden: cannot set blockOwnerDeletion if an ownerReference refers to a resource you can't set finalizers on: ${inner}`,
        { name: obj.metadata.name ?? "", group: a.group, kind: a.resource },
      );
    }
  }
}
