// The test cluster's API server authenticates ServiceAccount tokens and authorizes them
// with RBAC (403 Forbidden worded as Kubernetes words it; `kubectl auth can-i` with
// impersonation), enforces PodSecurity from namespace labels (Jobs then record
// FailedCreate), checks blockOwnerDeletion against the owner's finalizers permission,
// and closes watches after the configured time.
import { after, before, describe, it } from "node:test";
import assert from "node:assert/strict";
import {
  fastTimings,
  freshNamespace,
  hasKubectl,
  kube,
  kubectl,
  startTestCluster,
  until,
  watch,
  type TestCluster,
} from "./cluster.js";

const rbac = "/apis/rbac.authorization.k8s.io/v1";
const sh = (name: string, script: string, extra: Record<string, unknown> = {}) => ({
  name,
  image: "busybox:1.36",
  command: ["sh", "-c", script],
  ...extra,
});
const restrictedContainer = (name: string) =>
  sh(name, "true", { securityContext: { allowPrivilegeEscalation: false, capabilities: { drop: ["ALL"] } } });
const restrictedPod = {
  securityContext: { runAsNonRoot: true, runAsUser: 1000, seccompProfile: { type: "RuntimeDefault" } },
};

describe("test cluster authentication, authorization and admission", () => {
  let c: TestCluster;
  let ns: string;
  before(async () => {
    c = await startTestCluster({ timings: fastTimings, watchTimeoutMs: 400 });
    ns = await freshNamespace(c, "auth");
  });
  after(async () => {
    await c.close();
    assert.deepEqual(c.errors, []);
  });

  /** The cluster as seen with another bearer token. */
  const as = (token: string): TestCluster => ({ ...c, token });
  const serviceAccount = async (name: string, namespace = ns) => {
    assert.equal(
      (await kube(c, "POST", `/api/v1/namespaces/${namespace}/serviceaccounts`, { metadata: { name } })).status,
      201,
    );
    return as(c.serviceAccountToken(namespace, name));
  };
  const grant = async (name: string, rules: unknown[], subject: string, namespace = ns) => {
    assert.equal(
      (await kube(c, "POST", `${rbac}/namespaces/${namespace}/roles`, { metadata: { name }, rules })).status,
      201,
    );
    const binding = {
      metadata: { name },
      roleRef: { apiGroup: "rbac.authorization.k8s.io", kind: "Role", name },
      subjects: [{ kind: "ServiceAccount", name: subject, namespace }],
    };
    assert.equal((await kube(c, "POST", `${rbac}/namespaces/${namespace}/rolebindings`, binding)).status, 201);
  };

  it("authorizes ServiceAccount tokens from Roles and RoleBindings: verbs, resourceNames, subresources; 403 as Kubernetes words it", async () => {
    const reader = await serviceAccount("reader");
    const user = `system:serviceaccount:${ns}:reader`;
    const denied = await kube(reader, "GET", `/api/v1/namespaces/${ns}/pods`);
    assert.equal(denied.status, 403);
    assert.deepEqual(denied.body, {
      kind: "Status",
      apiVersion: "v1",
      metadata: {},
      status: "Failure",
      reason: "Forbidden",
      code: 403,
      message: `pods is forbidden: User "${user}" cannot list resource "pods" in API group "" in the namespace "${ns}"`,
      details: { group: "", kind: "pods" },
    });
    assert.ok(
      c.denials.some((d) => d.user === user && d.verb === "list" && d.resource === "pods" && d.namespace === ns),
      "the refusal is in the cluster's denials",
    );
    const jobs = await kube(reader, "GET", `/apis/batch/v1/namespaces/${ns}/jobs`);
    assert.equal(
      jobs.body.message,
      `jobs.batch is forbidden: User "${user}" cannot list resource "jobs" in API group "batch" in the namespace "${ns}"`,
    );
    await grant(
      "reader",
      [
        { apiGroups: [""], resources: ["pods", "pods/log"], verbs: ["get", "list", "watch"] },
        { apiGroups: [""], resources: ["configmaps"], resourceNames: ["allowed"], verbs: ["get"] },
      ],
      "reader",
    );
    assert.equal((await kube(reader, "GET", `/api/v1/namespaces/${ns}/pods`)).status, 200);
    assert.equal(
      (await kube(reader, "GET", `/api/v1/namespaces/${ns}/configmaps/allowed`)).status,
      404,
      "authorized, then not found",
    );
    const other = await kube(reader, "GET", `/api/v1/namespaces/${ns}/configmaps/other`);
    assert.equal(
      other.body.message,
      `configmaps "other" is forbidden: User "${user}" cannot get resource "configmaps" in API group "" in the namespace "${ns}"`,
    );
    // A list or watch selecting one name is authorized by that name, as the real request resolver does.
    await grant(
      "named",
      [{ apiGroups: [""], resources: ["configmaps"], resourceNames: ["allowed"], verbs: ["list", "watch"] }],
      "reader",
    );
    assert.equal(
      (await kube(reader, "GET", `/api/v1/namespaces/${ns}/configmaps?fieldSelector=metadata.name%3Dallowed`)).status,
      200,
    );
    assert.equal(
      (await kube(reader, "GET", `/api/v1/namespaces/${ns}/configmaps?fieldSelector=metadata.name%3Dother`)).status,
      403,
    );
    assert.equal(
      (await kube(reader, "GET", `/api/v1/namespaces/${ns}/configmaps`)).status,
      403,
      "not without the selector",
    );
    const evict = await kube(reader, "POST", `/api/v1/namespaces/${ns}/pods/x/eviction`, {
      apiVersion: "policy/v1",
      kind: "Eviction",
      metadata: { name: "x" },
    });
    assert.equal(
      evict.body.message,
      `pods "x" is forbidden: User "${user}" cannot create resource "pods/eviction" in API group "" in the namespace "${ns}"`,
    );
    const elsewhere = await freshNamespace(c, "other");
    assert.equal(
      (await kube(reader, "GET", `/api/v1/namespaces/${elsewhere}/pods`)).status,
      403,
      "a RoleBinding grants only in its namespace",
    );
    // Discovery stays open to every authenticated user, as system:discovery grants.
    assert.equal((await kube(reader, "GET", "/apis")).status, 200);
    // A token outlives nothing: deleting the ServiceAccount makes it 401.
    await kube(c, "DELETE", `/api/v1/namespaces/${ns}/serviceaccounts/reader`);
    assert.equal((await kube(reader, "GET", `/api/v1/namespaces/${ns}/pods`)).status, 401);
  });

  it("authorizes cluster-scoped requests from ClusterRoleBindings, and ClusterRoles bound per namespace", async () => {
    const ops = await serviceAccount("ops");
    const user = `system:serviceaccount:${ns}:ops`;
    const nodes = await kube(ops, "GET", "/api/v1/nodes");
    assert.equal(
      nodes.body.message,
      `nodes is forbidden: User "${user}" cannot list resource "nodes" in API group "" at the cluster scope`,
    );
    assert.equal(
      (
        await kube(c, "POST", `${rbac}/clusterroles`, {
          metadata: { name: "node-and-secret-reader" },
          rules: [{ apiGroups: [""], resources: ["nodes", "secrets"], verbs: ["list"] }],
        })
      ).status,
      201,
    );
    assert.equal(
      (
        await kube(c, "POST", `${rbac}/clusterrolebindings`, {
          metadata: { name: "ops-nodes" },
          roleRef: { apiGroup: "rbac.authorization.k8s.io", kind: "ClusterRole", name: "node-and-secret-reader" },
          subjects: [{ kind: "Group", name: `system:serviceaccounts:${ns}` }],
        })
      ).status,
      201,
    );
    assert.equal((await kube(ops, "GET", "/api/v1/nodes")).status, 200);
    assert.equal(
      (await kube(ops, "GET", `/api/v1/namespaces/${ns}/secrets`)).status,
      200,
      "a ClusterRoleBinding grants everywhere",
    );
    await kube(c, "DELETE", `${rbac}/clusterrolebindings/ops-nodes`);
    assert.equal((await kube(ops, "GET", `/api/v1/namespaces/${ns}/secrets`)).status, 403);
    assert.equal(
      (
        await kube(c, "POST", `${rbac}/namespaces/${ns}/rolebindings`, {
          metadata: { name: "ops-secrets" },
          roleRef: { apiGroup: "rbac.authorization.k8s.io", kind: "ClusterRole", name: "node-and-secret-reader" },
          subjects: [{ kind: "ServiceAccount", name: "ops", namespace: ns }],
        })
      ).status,
      201,
    );
    assert.equal((await kube(ops, "GET", `/api/v1/namespaces/${ns}/secrets`)).status, 200);
    assert.equal(
      (await kube(ops, "GET", "/api/v1/nodes")).status,
      403,
      "a RoleBinding of a ClusterRole grants only namespaced access",
    );
  });

  it(
    "answers SelfSubjectAccessReviews, SubjectAccessReviews and SelfSubjectRulesReviews, so kubectl auth can-i (and --list) works, with --as",
    { skip: !hasKubectl && "kubectl not installed" },
    async () => {
      const viewer = await serviceAccount("viewer");
      await grant("viewer", [{ apiGroups: ["batch"], resources: ["jobs"], verbs: ["get", "list"] }], "viewer");
      const review = await kube(viewer, "POST", "/apis/authorization.k8s.io/v1/selfsubjectaccessreviews", {
        spec: { resourceAttributes: { namespace: ns, verb: "list", group: "batch", resource: "jobs" } },
      });
      assert.equal(review.status, 201);
      assert.equal(review.body.status.allowed, true);
      const sar = await kube(c, "POST", "/apis/authorization.k8s.io/v1/subjectaccessreviews", {
        spec: {
          user: `system:serviceaccount:${ns}:viewer`,
          resourceAttributes: { namespace: ns, verb: "delete", group: "batch", resource: "jobs" },
        },
      });
      assert.equal(sar.body.status.allowed, false);
      const yes = await kubectl(c, [
        "auth",
        "can-i",
        "list",
        "jobs.batch",
        "-n",
        ns,
        "--as",
        `system:serviceaccount:${ns}:viewer`,
      ]);
      assert.deepEqual([yes.code, yes.stdout.trim()], [0, "yes"], yes.stderr);
      const no = await kubectl(c, [
        "auth",
        "can-i",
        "delete",
        "jobs.batch",
        "-n",
        ns,
        "--as",
        `system:serviceaccount:${ns}:viewer`,
      ]);
      assert.deepEqual([no.code, no.stdout.trim()], [1, "no"], no.stderr);
      const list = await kubectl(c, [
        "auth",
        "can-i",
        "--list",
        "-n",
        ns,
        "--as",
        `system:serviceaccount:${ns}:viewer`,
      ]);
      assert.equal(list.code, 0, list.stderr);
      assert.match(list.stdout, /^jobs\.batch\s+\[\]\s+\[\]\s+\[get list\]$/m, list.stdout);
      assert.doesNotMatch(list.stdout, /^pods\s/m, "nothing it was not granted");
      const admin = await kubectl(c, ["auth", "can-i", "delete", "nodes"]);
      assert.equal(admin.stdout.trim(), "yes");
      // Impersonation itself needs the impersonate verb.
      const get = await kubectl(as(c.serviceAccountToken(ns, "viewer")), ["get", "pods", "-n", ns, "--as", "someone"]);
      assert.notEqual(get.code, 0);
    },
  );

  it("enforces PodSecurity from the namespace's enforce label; a Job whose pods are refused records FailedCreate", async () => {
    const restricted = await freshNamespace(c, "restricted");
    await kube(
      c,
      "PATCH",
      `/api/v1/namespaces/${restricted}`,
      { metadata: { labels: { "pod-security.kubernetes.io/enforce": "restricted" } } },
      "application/merge-patch+json",
    );
    const refused = await kube(c, "POST", `/api/v1/namespaces/${restricted}/pods`, {
      metadata: { name: "plain" },
      spec: { containers: [sh("main", "true")] },
    });
    assert.equal(refused.status, 403);
    assert.equal(
      refused.body.message,
      'pods "plain" is forbidden: violates PodSecurity "restricted:latest": allowPrivilegeEscalation != false (container "main" must set securityContext.allowPrivilegeEscalation=false), unrestricted capabilities (container "main" must set securityContext.capabilities.drop=["ALL"]), runAsNonRoot != true (pod or container "main" must set securityContext.runAsNonRoot=true), seccompProfile (pod or container "main" must set securityContext.seccompProfile.type to "RuntimeDefault" or "Localhost")',
    );
    const ok = await kube(c, "POST", `/api/v1/namespaces/${restricted}/pods`, {
      metadata: { name: "fine" },
      spec: { ...restrictedPod, restartPolicy: "Never", containers: [restrictedContainer("main")] },
    });
    assert.equal(ok.status, 201, JSON.stringify(ok.body));
    const hostPath = { volumes: [{ name: "h", hostPath: { path: "/var/lib/x", type: "DirectoryOrCreate" } }] };
    const withHostPath = await kube(c, "POST", `/api/v1/namespaces/${restricted}/pods`, {
      metadata: { name: "hp" },
      spec: { ...restrictedPod, ...hostPath, containers: [restrictedContainer("main")] },
    });
    assert.match(
      withHostPath.body.message,
      /hostPath volumes \(volume "h"\), restricted volume types \(volume "h" uses restricted volume type "hostPath"\)/,
    );

    const baseline = await freshNamespace(c, "baseline");
    await kube(
      c,
      "PATCH",
      `/api/v1/namespaces/${baseline}`,
      { metadata: { labels: { "pod-security.kubernetes.io/enforce": "baseline" } } },
      "application/merge-patch+json",
    );
    assert.equal(
      (
        await kube(c, "POST", `/api/v1/namespaces/${baseline}/pods`, {
          metadata: { name: "plain" },
          spec: { restartPolicy: "Never", containers: [sh("main", "true")] },
        })
      ).status,
      201,
    );
    const priv = await kube(c, "POST", `/api/v1/namespaces/${baseline}/pods`, {
      metadata: { name: "hp" },
      spec: {
        ...hostPath,
        hostNetwork: true,
        containers: [sh("main", "true", { securityContext: { privileged: true } })],
      },
    });
    assert.equal(
      priv.body.message,
      'pods "hp" is forbidden: violates PodSecurity "baseline:latest": host namespaces (hostNetwork=true), privileged (container "main" must not set securityContext.privileged=true), hostPath volumes (volume "h")',
    );

    const job = await kube(c, "POST", `/apis/batch/v1/namespaces/${restricted}/jobs`, {
      metadata: { name: "refused" },
      spec: { backoffLimit: 0, template: { spec: { restartPolicy: "Never", containers: [sh("main", "true")] } } },
    });
    assert.equal(job.status, 201, "the Job itself is admitted");
    const events = await until(
      "FailedCreate",
      () => kube(c, "GET", `/api/v1/namespaces/${restricted}/events?fieldSelector=involvedObject.name%3Drefused`),
      (r) => r.body.items.some((e: any) => e.reason === "FailedCreate"),
    );
    const failed = events.body.items.find((e: any) => e.reason === "FailedCreate");
    assert.equal(failed.type, "Warning");
    assert.match(
      failed.message,
      /^Error creating: pods "refused-[a-z0-9]{5}" is forbidden: violates PodSecurity "restricted:latest": allowPrivilegeEscalation != false/,
    );
  });

  it("refuses blockOwnerDeletion without update on the owner's finalizers (OwnerReferencesPermissionEnforcement)", async () => {
    const writer = await serviceAccount("writer");
    await grant(
      "writer",
      [
        { apiGroups: [""], resources: ["secrets"], verbs: ["create"] },
        { apiGroups: ["batch"], resources: ["jobs"], verbs: ["get", "create"] },
      ],
      "writer",
    );
    const job = await kube(writer, "POST", `/apis/batch/v1/namespaces/${ns}/jobs`, {
      metadata: { name: "owner" },
      spec: { suspend: true, template: { spec: { restartPolicy: "Never", containers: [sh("main", "true")] } } },
    });
    assert.equal(job.status, 201);
    const ref = (block: boolean) => ({
      apiVersion: "batch/v1",
      kind: "Job",
      name: "owner",
      uid: job.body.metadata.uid,
      controller: true,
      ...(block ? { blockOwnerDeletion: true } : {}),
    });
    const refused = await kube(writer, "POST", `/api/v1/namespaces/${ns}/secrets`, {
      metadata: { name: "s1", ownerReferences: [ref(true)] },
    });
    assert.equal(refused.status, 403);
    assert.equal(
      refused.body.message,
      `secrets "s1" is forbidden: cannot set blockOwnerDeletion if an ownerReference refers to a resource you can't set finalizers on: jobs.batch "owner" is forbidden: User "system:serviceaccount:${ns}:writer" cannot update resource "jobs/finalizers" in API group "batch" in the namespace "${ns}"`,
    );
    assert.equal(
      (
        await kube(writer, "POST", `/api/v1/namespaces/${ns}/secrets`, {
          metadata: { name: "s2", ownerReferences: [ref(false)] },
        })
      ).status,
      201,
    );
    await grant(
      "writer-finalizers",
      [{ apiGroups: ["batch"], resources: ["jobs/finalizers"], verbs: ["update"] }],
      "writer",
    );
    assert.equal(
      (
        await kube(writer, "POST", `/api/v1/namespaces/${ns}/secrets`, {
          metadata: { name: "s1", ownerReferences: [ref(true)] },
        })
      ).status,
      201,
    );
  });

  it("closes watches after the configured time, whatever timeoutSeconds asks", async () => {
    const started = Date.now();
    const w = await watch(c, `/api/v1/namespaces/${ns}/configmaps?watch=1&timeoutSeconds=3600`);
    await w.ended;
    assert.ok(Date.now() - started < 3000, "ended by the server");
    assert.ok(w.events.every((e) => e.type !== "ERROR"));
  });
});
