/**
 * The resource types the cluster serves: built-in kinds plus those defined by
 * CustomResourceDefinitions, registered and removed as CRDs come and go.
 */
import type { JsonObject } from "./types.js";

export const allVerbs = ["create", "delete", "deletecollection", "get", "list", "patch", "update", "watch"];

export interface ResourceType {
  group: string;
  /** Served versions, preferred first. Objects are stored once and shown in the version asked for. */
  versions: string[];
  resource: string;
  singular: string;
  kind: string;
  listKind: string;
  namespaced: boolean;
  shortNames: string[];
  categories: string[];
  statusSubresource: boolean;
  /** Verbs listed in discovery (default: all); review kinds only accept create and are never stored. */
  verbs?: string[];
  /** Set for custom resources: the CRD's per-version schema and printer columns. */
  custom?: { schemas: Map<string, JsonObject | undefined>; printerColumns: Map<string, JsonObject[]> };
}

/** Extra subresources listed in discovery beside `<resource>/status`. */
interface SubresourceEntry {
  name: string;
  kind: string;
  verbs: string[];
  group?: string;
  version?: string;
}

const builtins: ResourceType[] = [
  core("namespaces", "namespace", "Namespace", false, ["ns"]),
  core("pods", "pod", "Pod", true, ["po"], ["all"], true),
  core("secrets", "secret", "Secret", true, []),
  core("configmaps", "configmap", "ConfigMap", true, ["cm"]),
  core("events", "event", "Event", true, ["ev"]),
  core("serviceaccounts", "serviceaccount", "ServiceAccount", true, ["sa"]),
  core("nodes", "node", "Node", false, ["no"], [], true),
  core("services", "service", "Service", true, ["svc"], ["all"], true),
  core("persistentvolumeclaims", "persistentvolumeclaim", "PersistentVolumeClaim", true, ["pvc"], [], true),
  core("resourcequotas", "resourcequota", "ResourceQuota", true, ["quota"], [], true),
  // Stored and served so charts apply as a whole; only Deployments have a controller here.
  {
    group: "apps",
    versions: ["v1"],
    resource: "deployments",
    singular: "deployment",
    kind: "Deployment",
    listKind: "DeploymentList",
    namespaced: true,
    shortNames: ["deploy"],
    categories: ["all"],
    statusSubresource: true,
  },
  {
    group: "apps",
    versions: ["v1"],
    resource: "daemonsets",
    singular: "daemonset",
    kind: "DaemonSet",
    listKind: "DaemonSetList",
    namespaced: true,
    shortNames: ["ds"],
    categories: ["all"],
    statusSubresource: true,
  },
  {
    group: "policy",
    versions: ["v1"],
    resource: "poddisruptionbudgets",
    singular: "poddisruptionbudget",
    kind: "PodDisruptionBudget",
    listKind: "PodDisruptionBudgetList",
    namespaced: true,
    shortNames: ["pdb"],
    categories: [],
    statusSubresource: true,
  },
  {
    group: "networking.k8s.io",
    versions: ["v1"],
    resource: "networkpolicies",
    singular: "networkpolicy",
    kind: "NetworkPolicy",
    listKind: "NetworkPolicyList",
    namespaced: true,
    shortNames: ["netpol"],
    categories: [],
    statusSubresource: false,
  },
  {
    group: "rbac.authorization.k8s.io",
    versions: ["v1"],
    resource: "roles",
    singular: "role",
    kind: "Role",
    listKind: "RoleList",
    namespaced: true,
    shortNames: [],
    categories: [],
    statusSubresource: false,
  },
  {
    group: "rbac.authorization.k8s.io",
    versions: ["v1"],
    resource: "rolebindings",
    singular: "rolebinding",
    kind: "RoleBinding",
    listKind: "RoleBindingList",
    namespaced: true,
    shortNames: [],
    categories: [],
    statusSubresource: false,
  },
  {
    group: "rbac.authorization.k8s.io",
    versions: ["v1"],
    resource: "clusterroles",
    singular: "clusterrole",
    kind: "ClusterRole",
    listKind: "ClusterRoleList",
    namespaced: false,
    shortNames: [],
    categories: [],
    statusSubresource: false,
  },
  {
    group: "rbac.authorization.k8s.io",
    versions: ["v1"],
    resource: "clusterrolebindings",
    singular: "clusterrolebinding",
    kind: "ClusterRoleBinding",
    listKind: "ClusterRoleBindingList",
    namespaced: false,
    shortNames: [],
    categories: [],
    statusSubresource: false,
  },
  review("selfsubjectaccessreviews", "SelfSubjectAccessReview", false),
  review("subjectaccessreviews", "SubjectAccessReview", false),
  review("localsubjectaccessreviews", "LocalSubjectAccessReview", true),
  review("selfsubjectrulesreviews", "SelfSubjectRulesReview", false),
  {
    group: "batch",
    versions: ["v1"],
    resource: "jobs",
    singular: "job",
    kind: "Job",
    listKind: "JobList",
    namespaced: true,
    shortNames: [],
    categories: ["all"],
    statusSubresource: true,
  },
  {
    group: "coordination.k8s.io",
    versions: ["v1"],
    resource: "leases",
    singular: "lease",
    kind: "Lease",
    listKind: "LeaseList",
    namespaced: true,
    shortNames: [],
    categories: [],
    statusSubresource: false,
  },
  {
    group: "apiextensions.k8s.io",
    versions: ["v1"],
    resource: "customresourcedefinitions",
    singular: "customresourcedefinition",
    kind: "CustomResourceDefinition",
    listKind: "CustomResourceDefinitionList",
    namespaced: false,
    shortNames: ["crd", "crds"],
    categories: ["api-extensions"],
    statusSubresource: true,
  },
];

const extraSubresources: Record<string, SubresourceEntry[]> = {
  "/pods": [
    { name: "pods/log", kind: "Pod", verbs: ["get"] },
    { name: "pods/eviction", kind: "Eviction", verbs: ["create"], group: "policy", version: "v1" },
    { name: "pods/binding", kind: "Binding", verbs: ["create"] },
  ],
};

function review(resource: string, kind: string, namespaced: boolean): ResourceType {
  return {
    group: "authorization.k8s.io",
    versions: ["v1"],
    resource,
    singular: "",
    kind,
    listKind: `${kind}List`,
    namespaced,
    shortNames: [],
    categories: [],
    statusSubresource: false,
    verbs: ["create"],
  };
}

function core(
  resource: string,
  singular: string,
  kind: string,
  namespaced: boolean,
  shortNames: string[],
  categories: string[] = [],
  status = false,
): ResourceType {
  return {
    group: "",
    versions: ["v1"],
    resource,
    singular,
    kind,
    listKind: `${kind}List`,
    namespaced,
    shortNames,
    categories,
    statusSubresource: status || resource === "namespaces",
  };
}

export function typeKey(group: string, resource: string): string {
  return `${group}/${resource}`;
}

export function apiVersionOf(group: string, version: string): string {
  return group === "" ? version : `${group}/${version}`;
}

export function splitApiVersion(apiVersion: string): { group: string; version: string } {
  const slash = apiVersion.indexOf("/");
  return slash < 0
    ? { group: "", version: apiVersion }
    : { group: apiVersion.slice(0, slash), version: apiVersion.slice(slash + 1) };
}

export class ResourceRegistry {
  private readonly types = new Map<string, ResourceType>();

  constructor() {
    for (const t of builtins) this.types.set(typeKey(t.group, t.resource), t);
  }

  get(group: string, resource: string): ResourceType | undefined {
    return this.types.get(typeKey(group, resource));
  }

  /** The type behind a URL segment: only versions it serves match. */
  lookup(group: string, version: string, resource: string): ResourceType | undefined {
    const t = this.types.get(typeKey(group, resource));
    return t && t.versions.includes(version) ? t : undefined;
  }

  byKind(apiVersion: string, kind: string): ResourceType | undefined {
    const { group, version } = splitApiVersion(apiVersion);
    for (const t of this.types.values())
      if (t.group === group && t.kind === kind && t.versions.includes(version)) return t;
    return undefined;
  }

  all(): ResourceType[] {
    return [...this.types.values()];
  }

  register(t: ResourceType): void {
    this.types.set(typeKey(t.group, t.resource), t);
  }

  unregister(group: string, resource: string): void {
    this.types.delete(typeKey(group, resource));
  }

  /** Groups in discovery order (core excluded), each with its versions, preferred first. */
  groups(): { name: string; versions: string[] }[] {
    const out = new Map<string, string[]>();
    for (const t of this.types.values()) {
      if (t.group === "") continue;
      const versions = out.get(t.group) ?? [];
      for (const v of t.versions) if (!versions.includes(v)) versions.push(v);
      out.set(t.group, versions);
    }
    return [...out.entries()].map(([name, versions]) => ({ name, versions: versions.sort(compareVersions) }));
  }

  /** The APIResourceList for one group/version. */
  resourceList(group: string, version: string): JsonObject | undefined {
    const resources: JsonObject[] = [];
    for (const t of this.types.values()) {
      if (t.group !== group || !t.versions.includes(version)) continue;
      resources.push({
        name: t.resource,
        singularName: t.singular,
        namespaced: t.namespaced,
        kind: t.kind,
        verbs: t.verbs ?? allVerbs,
        ...(t.shortNames.length > 0 ? { shortNames: t.shortNames } : {}),
        ...(t.categories.length > 0 ? { categories: t.categories } : {}),
        storageVersionHash: Buffer.from(`${group}/${version}/${t.kind}`).toString("base64").slice(0, 12),
      });
      if (t.statusSubresource) {
        resources.push({
          name: `${t.resource}/status`,
          singularName: "",
          namespaced: t.namespaced,
          kind: t.kind,
          verbs: ["get", "patch", "update"],
        });
      }
      for (const s of extraSubresources[typeKey(t.group, t.resource)] ?? []) {
        resources.push({
          name: s.name,
          singularName: "",
          namespaced: t.namespaced,
          kind: s.kind,
          verbs: s.verbs,
          ...(s.group ? { group: s.group, version: s.version } : {}),
        });
      }
    }
    if (resources.length === 0) return undefined;
    return { kind: "APIResourceList", apiVersion: "v1", groupVersion: apiVersionOf(group, version), resources };
  }
}

/** Kubernetes version priority: GA > beta > alpha, higher numbers first. */
export function compareVersions(a: string, b: string): number {
  const rank = (v: string): [number, number, number] => {
    const m = /^v(\d+)(?:(alpha|beta)(\d+))?$/.exec(v);
    if (!m) return [3, 0, 0];
    const level = m[2] === undefined ? 0 : m[2] === "beta" ? 1 : 2;
    return [level, -Number(m[1]), -Number(m[3] ?? 0)];
  };
  const ra = rank(a);
  const rb = rank(b);
  for (let i = 0; i < 3; i++) if (ra[i] !== rb[i]) return (ra[i] ?? 0) - (rb[i] ?? 0);
  return a.localeCompare(b);
}
