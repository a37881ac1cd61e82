/**
 * Admission plugins of a default API server that our product meets: ServiceAccount
 * (the pod's ServiceAccount must exist; its token, the cluster CA and the namespace are
 * mounted at the standard path when automount is on), PodSecurity (the namespace's
 * `pod-security.kubernetes.io/enforce` level refuses pods), and
 * OwnerReferencesPermissionEnforcement (for API requests; see auth.ts).
 */
import { checkOwnerReferences } from "./auth.js";
import type { RbacAuthorizer } from "./auth.js";
import type { AdmissionPlugin, ObjectApi } from "./object-api.js";
import { StatusError } from "./status-error.js";
import type { JsonObject, KObject } from "./types.js";
import { isObject, randomSuffix } from "./types.js";

export const tokenMountPath = "/var/run/secrets/kubernetes.io/serviceaccount";
export const rootCaConfigMap = "kube-root-ca.crt";

function arr(v: unknown): JsonObject[] {
  return Array.isArray(v) ? v.filter(isObject) : [];
}

function isPods(r: { t: { group: string; resource: string } }): boolean {
  return r.t.group === "" && r.t.resource === "pods";
}

export function serviceAccountAdmission(api: ObjectApi): AdmissionPlugin {
  return {
    mutate(r) {
      if (!isPods(r) || r.operation !== "CREATE") return;
      const spec = isObject(r.obj.spec) ? r.obj.spec : {};
      const ns = r.obj.metadata.namespace ?? "default";
      const saName = String(spec.serviceAccountName ?? "default");
      const sa = api.tryGet(api.type("", "serviceaccounts"), ns, saName);
      // The "default" ServiceAccount is created right after its namespace; a pod racing it is let through.
      if (!sa && saName !== "default") {
        throw new StatusError(
          403,
          "Forbidden",
          `pods "${r.obj.metadata.name ?? ""}" is forbidden: error looking up service account ${ns}/${saName}: serviceaccount "${saName}" not found`,
          { name: r.obj.metadata.name ?? "", kind: "pods" },
        );
      }
      const automount =
        typeof spec.automountServiceAccountToken === "boolean"
          ? spec.automountServiceAccountToken
          : sa?.automountServiceAccountToken !== false;
      if (!automount) return;
      const containers = [...arr(spec.initContainers), ...arr(spec.containers)];
      if (containers.some((c) => arr(c.volumeMounts).some((m) => m.mountPath === tokenMountPath))) return;
      const volume = `kube-api-access-${randomSuffix()}`;
      spec.volumes = [
        ...arr(spec.volumes),
        {
          name: volume,
          projected: {
            defaultMode: 0o644,
            sources: [
              { serviceAccountToken: { expirationSeconds: 3607, path: "token" } },
              { configMap: { name: rootCaConfigMap, items: [{ key: "ca.crt", path: "ca.crt" }] } },
              {
                downwardAPI: {
                  items: [{ path: "namespace", fieldRef: { apiVersion: "v1", fieldPath: "metadata.namespace" } }],
                },
              },
            ],
          },
        },
      ];
      for (const c of containers)
        c.volumeMounts = [...arr(c.volumeMounts), { name: volume, readOnly: true, mountPath: tokenMountPath }];
    },
  };
}

/** The owner-reference check for writes made through the API (controllers' own writes carry no user). */
export function ownerReferencesAdmission(api: ObjectApi, authz: RbacAuthorizer): AdmissionPlugin {
  return {
    validate(r) {
      const user = r.opts.user;
      if (!user) return;
      checkOwnerReferences(
        api,
        authz,
        user,
        {
          verb: r.operation === "CREATE" ? "create" : "update",
          group: r.t.group,
          resource: r.t.resource,
          ...(r.t.namespaced ? { namespace: r.obj.metadata.namespace } : {}),
          name: r.obj.metadata.name,
        },
        r.obj,
        r.old,
      );
    },
  };
}

// ---- PodSecurity ----

const levels = ["privileged", "baseline", "restricted"] as const;
type Level = (typeof levels)[number];

const baselineCapabilities = new Set([
  "AUDIT_WRITE",
  "CHOWN",
  "DAC_OVERRIDE",
  "FOWNER",
  "FSETID",
  "KILL",
  "MKNOD",
  "NET_BIND_SERVICE",
  "SETFCAP",
  "SETGID",
  "SETPCAP",
  "SETUID",
  "SYS_CHROOT",
]);
const restrictedVolumes = new Set([
  "configMap",
  "csi",
  "downwardAPI",
  "emptyDir",
  "ephemeral",
  "persistentVolumeClaim",
  "projected",
  "secret",
]);
const safeSysctls = new Set([
  "kernel.shm_rmid_forced",
  "net.ipv4.ip_local_port_range",
  "net.ipv4.ip_unprivileged_port_start",
  "net.ipv4.tcp_syncookies",
  "net.ipv4.ping_group_range",
  "net.ipv4.ip_local_reserved_ports",
  "net.ipv4.tcp_keepalive_time",
  "net.ipv4.tcp_fin_timeout",
  "net.ipv4.tcp_keepalive_intvl",
  "net.ipv4.tcp_keepalive_probes",
]);

function quoteList(names: string[]): string {
  return names.map((n) => `"${n}"`).join(", ");
}

/** Names of containers (all kinds) failing `pred`, for the "container(s) ... must" messages. */
function failing(containers: JsonObject[], pred: (c: JsonObject, sc: JsonObject) => boolean): string[] {
  return containers
    .filter((c) => pred(c, isObject(c.securityContext) ? c.securityContext : {}))
    .map((c) => String(c.name));
}

function containerWord(names: string[]): string {
  return names.length === 1 ? "container" : "containers";
}

/**
 * The Pod Security Standards checks (baseline, then restricted's additions), worded as
 * the PodSecurity admission plugin words its refusals.
 */
export function podSecurityViolations(spec: JsonObject, level: Level): string[] {
  if (level === "privileged") return [];
  const out: string[] = [];
  const psc = isObject(spec.securityContext) ? spec.securityContext : {};
  const containers = [...arr(spec.initContainers), ...arr(spec.containers), ...arr(spec.ephemeralContainers)];
  const hostNs = ["hostNetwork", "hostPID", "hostIPC"].filter((f) => spec[f] === true);
  if (hostNs.length > 0) out.push(`host namespaces (${hostNs.map((f) => `${f}=true`).join(", ")})`);
  const priv = failing(containers, (_c, sc) => sc.privileged === true);
  if (priv.length > 0)
    out.push(`privileged (${containerWord(priv)} ${quoteList(priv)} must not set securityContext.privileged=true)`);
  const caps = new Set<string>();
  for (const c of containers) {
    const sc = isObject(c.securityContext) ? c.securityContext : {};
    const add = isObject(sc.capabilities) && Array.isArray(sc.capabilities.add) ? sc.capabilities.add.map(String) : [];
    for (const cap of add) if (!baselineCapabilities.has(cap)) caps.add(cap);
  }
  if (caps.size > 0) {
    const names = failing(
      containers,
      (_c, sc) =>
        isObject(sc.capabilities) &&
        Array.isArray(sc.capabilities.add) &&
        sc.capabilities.add.some((x) => !baselineCapabilities.has(String(x))),
    );
    out.push(
      `non-default capabilities (${containerWord(names)} ${quoteList(names)} must not include ${quoteList([...caps])} in securityContext.capabilities.add)`,
    );
  }
  const hostPaths = arr(spec.volumes)
    .filter((v) => isObject(v.hostPath))
    .map((v) => String(v.name));
  if (hostPaths.length > 0)
    out.push(`hostPath volumes (${hostPaths.length === 1 ? "volume" : "volumes"} ${quoteList(hostPaths)})`);
  const hostPorts = containers.flatMap((c) =>
    arr(c.ports)
      .filter((p) => typeof p.hostPort === "number" && p.hostPort !== 0)
      .map((p) => String(p.hostPort)),
  );
  if (hostPorts.length > 0) out.push(`hostPort (${containerWord(hostPorts)} uses hostPorts ${hostPorts.join(", ")})`);
  const seccompOf = (sc: JsonObject): string | undefined =>
    isObject(sc.seccompProfile) ? String(sc.seccompProfile.type ?? "") : undefined;
  if (
    seccompOf(psc) === "Unconfined" ||
    containers.some((c) => seccompOf(isObject(c.securityContext) ? c.securityContext : {}) === "Unconfined")
  )
    out.push(`seccompProfile (pod or containers must not set securityContext.seccompProfile.type to "Unconfined")`);
  const sysctls = arr(psc.sysctls)
    .map((s) => String(s.name))
    .filter((n) => !safeSysctls.has(n));
  if (sysctls.length > 0) out.push(`forbidden sysctls (${sysctls.join(", ")})`);
  const procMount = failing(containers, (_c, sc) => sc.procMount !== undefined && sc.procMount !== "Default");
  if (procMount.length > 0)
    out.push(
      `procMount (${containerWord(procMount)} ${quoteList(procMount)} must not set securityContext.procMount to "Unmasked")`,
    );
  if (level === "baseline") return out;

  const badVolumes = arr(spec.volumes).filter((v) => !Object.keys(v).some((k) => restrictedVolumes.has(k)));
  if (badVolumes.length > 0) {
    const types = [...new Set(badVolumes.flatMap((v) => Object.keys(v).filter((k) => k !== "name")))];
    out.push(
      `restricted volume types (${badVolumes.length === 1 ? "volume" : "volumes"} ${quoteList(badVolumes.map((v) => String(v.name)))} ${badVolumes.length === 1 ? "uses" : "use"} restricted volume ${types.length === 1 ? "type" : "types"} ${quoteList(types)})`,
    );
  }
  const escalation = failing(containers, (_c, sc) => sc.allowPrivilegeEscalation !== false);
  if (escalation.length > 0)
    out.push(
      `allowPrivilegeEscalation != false (${containerWord(escalation)} ${quoteList(escalation)} must set securityContext.allowPrivilegeEscalation=false)`,
    );
  const dropAll = failing(
    containers,
    (_c, sc) =>
      !(
        isObject(sc.capabilities) &&
        Array.isArray(sc.capabilities.drop) &&
        sc.capabilities.drop.map(String).includes("ALL")
      ),
  );
  const addMore = failing(
    containers,
    (_c, sc) =>
      isObject(sc.capabilities) &&
      Array.isArray(sc.capabilities.add) &&
      sc.capabilities.add.some((x) => String(x) !== "NET_BIND_SERVICE"),
  );
  if (dropAll.length > 0 || addMore.length > 0) {
    const parts = [
      ...(dropAll.length > 0
        ? [`${containerWord(dropAll)} ${quoteList(dropAll)} must set securityContext.capabilities.drop=["ALL"]`]
        : []),
      ...(addMore.length > 0
        ? [
            `${containerWord(addMore)} ${quoteList(addMore)} must not include capabilities other than "NET_BIND_SERVICE" in securityContext.capabilities.add`,
          ]
        : []),
    ];
    out.push(`unrestricted capabilities (${parts.join("; ")})`);
  }
  const podNonRoot = psc.runAsNonRoot === true;
  const nonRoot = failing(
    containers,
    (_c, sc) => sc.runAsNonRoot === false || (!podNonRoot && sc.runAsNonRoot !== true),
  );
  if (psc.runAsNonRoot === false)
    out.push(`runAsNonRoot != true (pod must not set securityContext.runAsNonRoot=false)`);
  else if (nonRoot.length > 0)
    out.push(
      `runAsNonRoot != true (pod or ${containerWord(nonRoot)} ${quoteList(nonRoot)} must set securityContext.runAsNonRoot=true)`,
    );
  const rootUser = failing(containers, (_c, sc) => sc.runAsUser === 0);
  if (psc.runAsUser === 0 || rootUser.length > 0)
    out.push(
      `runAsUser=0 (${psc.runAsUser === 0 ? "pod" : `${containerWord(rootUser)} ${quoteList(rootUser)}`} must not set runAsUser=0)`,
    );
  const okSeccomp = (t: string | undefined): boolean => t === "RuntimeDefault" || t === "Localhost";
  const podSeccomp = okSeccomp(seccompOf(psc));
  const noSeccomp = failing(
    containers,
    (_c, sc) => !okSeccomp(seccompOf(sc)) && !(podSeccomp && seccompOf(sc) === undefined),
  );
  if (noSeccomp.length > 0)
    out.push(
      `seccompProfile (pod or ${containerWord(noSeccomp)} ${quoteList(noSeccomp)} must set securityContext.seccompProfile.type to "RuntimeDefault" or "Localhost")`,
    );
  return out;
}

/** The enforce level of a namespace (privileged when unlabelled). */
export function enforceLevel(ns: KObject | undefined): Level {
  const v = ns?.metadata.labels?.["pod-security.kubernetes.io/enforce"];
  return (levels as readonly string[]).includes(v ?? "") ? (v as Level) : "privileged";
}

export function podSecurityAdmission(api: ObjectApi): AdmissionPlugin {
  return {
    validate(r) {
      if (!isPods(r) || r.operation !== "CREATE") return;
      const ns = r.obj.metadata.namespace ?? "default";
      const level = enforceLevel(api.tryGet(api.type("", "namespaces"), undefined, ns));
      const violations = podSecurityViolations(isObject(r.obj.spec) ? r.obj.spec : {}, level);
      if (violations.length === 0) return;
      throw new StatusError(
        403,
        "Forbidden",
        `pods "${r.obj.metadata.name ?? ""}" is forbidden: violates PodSecurity "${level}:latest": ${violations.join(", ")}`,
        { name: r.obj.metadata.name ?? "", kind: "pods" },
      );
    },
  };
}
