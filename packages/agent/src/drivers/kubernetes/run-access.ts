import type { RbacAuthorizationV1Api, V1OwnerReference } from "@kubernetes/client-node";

/**
 * Node-worker mode: lets the node workers' ServiceAccount `get` exactly one job Secret, the
 * one of the Job `jobName`, through a Role and RoleBinding of the same name owned by that
 * Job (so the garbage collector removes them with it). The node workers' own Role grants no
 * Secret at all: the pool token and every other Secret of the namespace stay out of their
 * reach (decision 0009). Already existing objects (a retried launch) are kept.
 */
export async function grantJobSecret(
  rbac: RbacAuthorizationV1Api,
  o: {
    namespace: string;
    jobName: string;
    secretName: string;
    serviceAccount: string;
    owner: V1OwnerReference;
    labels: Record<string, string>;
  },
): Promise<void> {
  const metadata = { name: o.secretName, labels: o.labels, ownerReferences: [o.owner] };
  await ignoreConflict(
    rbac.createNamespacedRole({
      namespace: o.namespace,
      body: {
        metadata,
        rules: [{ apiGroups: [""], resources: ["secrets"], resourceNames: [o.secretName], verbs: ["get"] }],
      },
    }),
  );
  await ignoreConflict(
    rbac.createNamespacedRoleBinding({
      namespace: o.namespace,
      body: {
        metadata,
        roleRef: { apiGroup: "rbac.authorization.k8s.io", kind: "Role", name: o.secretName },
        subjects: [{ kind: "ServiceAccount", name: o.serviceAccount, namespace: o.namespace }],
      },
    }),
  );
}

async function ignoreConflict(p: Promise<unknown>): Promise<void> {
  try {
    await p;
  } catch (err) {
    const e = err as { code?: unknown; statusCode?: unknown };
    if (e.code !== 409 && e.statusCode !== 409) throw err;
  }
}
