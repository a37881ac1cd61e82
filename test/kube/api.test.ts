// The REST API over raw HTTP: discovery, errors as Status objects, watch with
// resourceVersion resume and 410 Expired, the three patch types, propagation
// policies with ownerReference garbage collection, and CRDs with custom resources.
import { after, before, describe, it } from "node:test";
import assert from "node:assert/strict";
import { fastTimings, freshNamespace, kube, startTestCluster, until, watch, type TestCluster } from "./cluster.js";

describe("test cluster API", () => {
  let c: TestCluster;
  before(async () => {
    c = await startTestCluster({ timings: fastTimings, watchHistory: 20 });
  });
  after(async () => {
    await c.close();
    assert.deepEqual(c.errors, []);
  });

  it("serves discovery and requires the token", async () => {
    const v1 = await kube(c, "GET", "/api/v1");
    const pods = v1.body.resources.find((r: any) => r.name === "pods");
    assert.deepEqual(
      { kind: pods.kind, namespaced: pods.namespaced, singularName: pods.singularName, shortNames: pods.shortNames },
      { kind: "Pod", namespaced: true, singularName: "pod", shortNames: ["po"] },
    );
    assert.ok(v1.body.resources.some((r: any) => r.name === "pods/log"));
    const batch = await kube(c, "GET", "/apis/batch/v1");
    assert.ok(batch.body.resources.some((r: any) => r.name === "jobs" && r.verbs.includes("watch")));
    const groups = await kube(c, "GET", "/apis");
    assert.ok(groups.body.groups.some((g: any) => g.name === "apiextensions.k8s.io"));
    const version = await kube(c, "GET", "/version");
    assert.equal(version.body.major, "1");
    // eslint-disable-next-line no-restricted-globals -- the Kubernetes API server without credentials, on purpose
    const res = await fetch(`${c.url}/api/v1/namespaces`).catch((e: unknown) => e);
    // Self-signed TLS: plain fetch cannot even connect; with the CA but no token it is 401.
    assert.ok(res instanceof Error || (res as Response).status === 401);
  });

  it("answers with Status errors", async () => {
    const ns = await freshNamespace(c);
    const cm = { metadata: { name: "a" }, data: { k: "v" } };
    assert.equal((await kube(c, "POST", `/api/v1/namespaces/${ns}/configmaps`, cm)).status, 201);
    const dup = await kube(c, "POST", `/api/v1/namespaces/${ns}/configmaps`, cm);
    assert.equal(dup.status, 409);
    assert.equal(dup.body.reason, "AlreadyExists");
    const missing = await kube(c, "GET", `/api/v1/namespaces/${ns}/configmaps/zzz`);
    assert.deepEqual(
      { code: missing.body.code, reason: missing.body.reason, message: missing.body.message },
      { code: 404, reason: "NotFound", message: 'configmaps "zzz" not found' },
    );
    const stale = await kube(c, "PUT", `/api/v1/namespaces/${ns}/configmaps/a`, {
      metadata: { name: "a", resourceVersion: "1" },
      data: {},
    });
    assert.equal(stale.status, 409);
    assert.equal(stale.body.reason, "Conflict");
    const bad = await kube(c, "POST", `/api/v1/namespaces/${ns}/configmaps`, { metadata: { name: "UPPER" } });
    assert.equal(bad.status, 422);
    assert.equal(bad.body.reason, "Invalid");
    const noNs = await kube(c, "POST", "/api/v1/namespaces/absent/configmaps", cm);
    assert.equal(noNs.status, 404);
    const gen = await kube(c, "POST", `/api/v1/namespaces/${ns}/configmaps`, { metadata: { generateName: "gen-" } });
    assert.match(gen.body.metadata.name, /^gen-[a-z0-9]{5}$/);
    assert.ok(gen.body.metadata.uid && gen.body.metadata.creationTimestamp && gen.body.metadata.resourceVersion);
  });

  it("lists with label and field selectors and pages with continue", async () => {
    const ns = await freshNamespace(c);
    for (const [name, tier] of [
      ["a", "web"],
      ["b", "db"],
      ["c", "web"],
    ]) {
      await kube(c, "POST", `/api/v1/namespaces/${ns}/configmaps`, { metadata: { name, labels: { tier } } });
    }
    const web = await kube(c, "GET", `/api/v1/namespaces/${ns}/configmaps?labelSelector=tier%3Dweb`);
    assert.deepEqual(
      web.body.items.map((i: any) => i.metadata.name),
      ["a", "c"],
    );
    const notWeb = await kube(c, "GET", `/api/v1/namespaces/${ns}/configmaps?labelSelector=tier,tier%20notin%20(web)`);
    assert.deepEqual(
      notWeb.body.items.map((i: any) => i.metadata.name),
      ["b"],
    );
    const byName = await kube(c, "GET", `/api/v1/namespaces/${ns}/configmaps?fieldSelector=metadata.name%3Db`);
    assert.deepEqual(
      byName.body.items.map((i: any) => i.metadata.name),
      ["b"],
    );
    const unsupported = await kube(c, "GET", `/api/v1/namespaces/${ns}/configmaps?fieldSelector=data.x%3Dy`);
    assert.equal(unsupported.status, 400);
    // Four ConfigMaps: a, b, c and the cluster's kube-root-ca.crt.
    const page1 = await kube(c, "GET", `/api/v1/namespaces/${ns}/configmaps?limit=3`);
    assert.equal(page1.body.items.length, 3);
    const page2 = await kube(
      c,
      "GET",
      `/api/v1/namespaces/${ns}/configmaps?limit=3&continue=${page1.body.metadata.continue as string}`,
    );
    assert.deepEqual(
      page2.body.items.map((i: any) => i.metadata.name),
      ["kube-root-ca.crt"],
    );
  });

  it("watches from a resourceVersion and answers 410 Expired once it is compacted", async () => {
    const ns = await freshNamespace(c);
    const base = `/api/v1/namespaces/${ns}/configmaps`;
    const list = await kube(c, "GET", base);
    const rv = list.body.metadata.resourceVersion as string;
    await kube(c, "POST", base, { metadata: { name: "one" } });
    await kube(c, "PATCH", `${base}/one`, { data: { x: "1" } }, "application/merge-patch+json");
    await kube(c, "DELETE", `${base}/one`);
    // Resume from the list's version: the three changes are replayed, in order.
    const w = await watch(c, `${base}?watch=true&resourceVersion=${rv}`);
    await w.waitFor((e) => e.type === "DELETED");
    assert.deepEqual(
      w.events.map((e) => e.type),
      ["ADDED", "MODIFIED", "DELETED"],
    );
    // Live events follow.
    await kube(c, "POST", base, { metadata: { name: "two", labels: { keep: "yes" } } });
    await w.waitFor((e) => e.type === "ADDED" && e.object.metadata.name === "two");
    w.close();

    // Selectors: an object leaving the selection is seen as DELETED.
    const sel = await watch(c, `${base}?watch=1&labelSelector=keep%3Dyes`);
    await sel.waitFor((e) => e.type === "ADDED" && e.object.metadata.name === "two");
    await kube(c, "PATCH", `${base}/two`, { metadata: { labels: { keep: "no" } } }, "application/merge-patch+json");
    await sel.waitFor((e) => e.type === "DELETED" && e.object.metadata.name === "two");
    sel.close();

    // More changes than the 20 retained events: the old version is gone.
    for (let i = 0; i < 25; i++)
      await kube(c, "PATCH", `${base}/two`, { data: { i: String(i) } }, "application/merge-patch+json");
    const old = await watch(c, `${base}?watch=true&resourceVersion=${rv}`);
    await old.ended;
    assert.equal(old.events.length, 1);
    assert.equal(old.events[0]?.type, "ERROR");
    assert.deepEqual(
      { code: old.events[0]?.object.code, reason: old.events[0]?.object.reason, kind: old.events[0]?.object.kind },
      { code: 410, reason: "Expired", kind: "Status" },
    );
    await kube(c, "POST", base, { metadata: { name: "three" } });
    const cont = await kube(c, "GET", `${base}?limit=1`);
    await kube(c, "POST", base, { metadata: { name: "four" } });
    c.compactWatchHistory();
    const expired = await kube(c, "GET", `${base}?limit=1&continue=${cont.body.metadata.continue as string}`);
    assert.equal(expired.status, 410);
  });

  it("applies merge, strategic merge and JSON patches", async () => {
    const ns = await freshNamespace(c);
    const path = `/api/v1/namespaces/${ns}/pods/p`;
    await kube(c, "POST", `/api/v1/namespaces/${ns}/pods`, {
      metadata: { name: "p", labels: { a: "1" } },
      spec: {
        schedulerName: "nobody",
        containers: [
          { name: "one", image: "busybox", env: [{ name: "A", value: "1" }] },
          { name: "two", image: "busybox" },
        ],
      },
    });
    // Strategic merge: containers merge by name (images are the mutable part of a pod), finalizers as a set.
    const smp = await kube(
      c,
      "PATCH",
      path,
      { metadata: { finalizers: ["x/a"] }, spec: { containers: [{ name: "two", image: "busybox:2" }] } },
      "application/strategic-merge-patch+json",
    );
    assert.equal(smp.status, 200, JSON.stringify(smp.body));
    assert.deepEqual(
      smp.body.spec.containers.map((x: any) => [x.name, x.image]),
      [
        ["one", "busybox"],
        ["two", "busybox:2"],
      ],
    );
    assert.deepEqual(smp.body.spec.containers[0].env, [{ name: "A", value: "1" }]);
    const smp2 = await kube(
      c,
      "PATCH",
      path,
      { metadata: { finalizers: ["x/b"] } },
      "application/strategic-merge-patch+json",
    );
    assert.deepEqual(smp2.body.metadata.finalizers, ["x/a", "x/b"]);
    const del = await kube(
      c,
      "PATCH",
      path,
      { metadata: { finalizers: null } },
      "application/strategic-merge-patch+json",
    );
    assert.equal(del.body.metadata.finalizers, undefined);
    // Merge patch: null deletes, objects merge.
    const mp = await kube(
      c,
      "PATCH",
      path,
      { metadata: { labels: { a: null, b: "2" } } },
      "application/merge-patch+json",
    );
    assert.deepEqual(mp.body.metadata.labels, { b: "2" });
    // JSON patch, including a failing test operation.
    const jp = await kube(
      c,
      "PATCH",
      path,
      [
        { op: "add", path: "/metadata/annotations", value: { x: "y" } },
        { op: "replace", path: "/metadata/labels/b", value: "3" },
      ],
      "application/json-patch+json",
    );
    assert.deepEqual([jp.body.metadata.annotations, jp.body.metadata.labels], [{ x: "y" }, { b: "3" }]);
    const failed = await kube(
      c,
      "PATCH",
      path,
      [{ op: "test", path: "/metadata/labels/b", value: "nope" }],
      "application/json-patch+json",
    );
    assert.equal(failed.status, 422);
    // Pod specs are immutable apart from images and a few fields.
    const forbidden = await kube(
      c,
      "PATCH",
      path,
      { spec: { restartPolicy: "Never" } },
      "application/merge-patch+json",
    );
    assert.equal(forbidden.status, 422);
    assert.match(forbidden.body.message, /pod updates may not change fields/);
    // A stale resourceVersion in a patch conflicts.
    const stale = await kube(
      c,
      "PATCH",
      path,
      { metadata: { resourceVersion: "2", labels: { c: "1" } } },
      "application/merge-patch+json",
    );
    assert.equal(stale.status, 409);
    const unsupported = await kube(c, "PATCH", path, { a: 1 }, "application/yaml");
    assert.equal(unsupported.status, 415);
  });

  it("garbage-collects dependents by ownerReferences with each propagation policy", async () => {
    const ns = await freshNamespace(c);
    const mk = async (name: string, owner?: any) =>
      (
        await kube(c, "POST", `/api/v1/namespaces/${ns}/configmaps`, {
          metadata: {
            name,
            ...(owner
              ? {
                  ownerReferences: [
                    {
                      apiVersion: "v1",
                      kind: "ConfigMap",
                      name: owner.metadata.name,
                      uid: owner.metadata.uid,
                      blockOwnerDeletion: true,
                    },
                  ],
                }
              : {}),
          },
        })
      ).body;
    const exists = async (name: string) =>
      (await kube(c, "GET", `/api/v1/namespaces/${ns}/configmaps/${name}`)).status === 200;

    const bgOwner = await mk("bg-owner");
    await mk("bg-child", await mk("bg-mid", bgOwner));
    await kube(c, "DELETE", `/api/v1/namespaces/${ns}/configmaps/bg-owner`, { propagationPolicy: "Background" });
    await until(
      "background cascade",
      async () => [await exists("bg-mid"), await exists("bg-child")],
      (v) => !v[0] && !v[1],
    );

    const fgOwner = await mk("fg-owner");
    await mk("fg-child", fgOwner);
    const del = await kube(c, "DELETE", `/api/v1/namespaces/${ns}/configmaps/fg-owner`, {
      propagationPolicy: "Foreground",
    });
    assert.ok(del.body.metadata.deletionTimestamp);
    assert.deepEqual(del.body.metadata.finalizers, ["foregroundDeletion"]);
    await until(
      "foreground cascade",
      async () => [await exists("fg-owner"), await exists("fg-child")],
      (v) => !v[0] && !v[1],
    );

    const orphanOwner = await mk("or-owner");
    await mk("or-child", orphanOwner);
    await kube(c, "DELETE", `/api/v1/namespaces/${ns}/configmaps/or-owner`, { propagationPolicy: "Orphan" });
    await until(
      "owner gone",
      () => exists("or-owner"),
      (v) => !v,
    );
    const child = await kube(c, "GET", `/api/v1/namespaces/${ns}/configmaps/or-child`);
    assert.equal(child.status, 200);
    assert.equal(child.body.metadata.ownerReferences, undefined);

    // A dependent created for an owner that does not exist is collected.
    await kube(c, "POST", `/api/v1/namespaces/${ns}/configmaps`, {
      metadata: {
        name: "dangling",
        ownerReferences: [
          { apiVersion: "v1", kind: "ConfigMap", name: "ghost", uid: "00000000-0000-0000-0000-000000000000" },
        ],
      },
    });
    await until(
      "dangling dependent collected",
      () => exists("dangling"),
      (v) => !v,
    );

    // A finalizer holds deletion until it is removed.
    await kube(c, "POST", `/api/v1/namespaces/${ns}/configmaps`, {
      metadata: { name: "held", finalizers: ["example.com/hold"] },
    });
    const held = await kube(c, "DELETE", `/api/v1/namespaces/${ns}/configmaps/held`);
    assert.ok(held.body.metadata.deletionTimestamp);
    assert.equal(await exists("held"), true);
    await kube(
      c,
      "PATCH",
      `/api/v1/namespaces/${ns}/configmaps/held`,
      { metadata: { finalizers: null } },
      "application/merge-patch+json",
    );
    assert.equal(await exists("held"), false);
  });

  it("serves a CRD's custom resources: create, validate, list, watch, status", async () => {
    const ns = await freshNamespace(c);
    const crd = {
      apiVersion: "apiextensions.k8s.io/v1",
      kind: "CustomResourceDefinition",
      metadata: { name: "agenttasks.drover.dev" },
      spec: {
        group: "drover.dev",
        scope: "Namespaced",
        names: { plural: "agenttasks", singular: "agenttask", kind: "AgentTask", shortNames: ["atask"] },
        versions: [
          {
            name: "v1alpha1",
            served: true,
            storage: true,
            subresources: { status: {} },
            additionalPrinterColumns: [{ name: "Phase", type: "string", jsonPath: ".status.phase" }],
            schema: {
              openAPIV3Schema: {
                type: "object",
                properties: {
                  spec: {
                    type: "object",
                    required: ["runId"],
                    properties: {
                      runId: { type: "string" },
                      jobTemplate: { type: "object", "x-kubernetes-preserve-unknown-fields": true },
                      retries: { type: "integer", default: 0 },
                    },
                  },
                  status: {
                    type: "object",
                    properties: { phase: { type: "string", enum: ["Pending", "Running", "Done"] } },
                  },
                },
              },
            },
          },
        ],
      },
    };
    assert.equal((await kube(c, "POST", "/apis/apiextensions.k8s.io/v1/customresourcedefinitions", crd)).status, 201);
    const disc = await kube(c, "GET", "/apis/drover.dev/v1alpha1");
    const entry = disc.body.resources.find((r: any) => r.name === "agenttasks");
    assert.deepEqual(
      { kind: entry.kind, shortNames: entry.shortNames, namespaced: entry.namespaced },
      { kind: "AgentTask", shortNames: ["atask"], namespaced: true },
    );
    assert.ok(disc.body.resources.some((r: any) => r.name === "agenttasks/status"));

    const base = `/apis/drover.dev/v1alpha1/namespaces/${ns}/agenttasks`;
    const w = await watch(c, `${base}?watch=true`);
    const created = await kube(c, "POST", base, {
      apiVersion: "drover.dev/v1alpha1",
      kind: "AgentTask",
      metadata: { name: "t1" },
      spec: { runId: "r1", unknown: "pruned", jobTemplate: { any: { thing: 1 } } },
      status: { phase: "Done" },
    });
    assert.equal(created.status, 201, JSON.stringify(created.body));
    assert.deepEqual(created.body.spec, { runId: "r1", jobTemplate: { any: { thing: 1 } }, retries: 0 });
    assert.equal(created.body.status, undefined, "status is only written through /status");
    assert.equal(created.body.metadata.generation, 1);
    const invalid = await kube(c, "POST", base, {
      apiVersion: "drover.dev/v1alpha1",
      kind: "AgentTask",
      metadata: { name: "t2" },
      spec: { retries: "x" },
    });
    assert.equal(invalid.status, 422);
    assert.match(invalid.body.message, /spec.runId: Required value/);

    const st = await kube(
      c,
      "PATCH",
      `${base}/t1/status`,
      { status: { phase: "Running" } },
      "application/merge-patch+json",
    );
    assert.equal(st.body.status.phase, "Running");
    assert.equal(st.body.metadata.generation, 1);
    const badStatus = await kube(
      c,
      "PATCH",
      `${base}/t1/status`,
      { status: { phase: "Exploded" } },
      "application/merge-patch+json",
    );
    assert.equal(badStatus.status, 422);
    const smp = await kube(
      c,
      "PATCH",
      `${base}/t1`,
      { spec: { runId: "r2" } },
      "application/strategic-merge-patch+json",
    );
    assert.equal(smp.status, 415);
    const spec = await kube(c, "PATCH", `${base}/t1`, { spec: { runId: "r2" } }, "application/merge-patch+json");
    assert.equal(spec.body.metadata.generation, 2);

    await w.waitFor((e) => e.type === "MODIFIED" && e.object.spec.runId === "r2");
    assert.deepEqual(
      w.events.map((e) => e.type),
      ["ADDED", "MODIFIED", "MODIFIED"],
    );
    w.close();
    const list = await kube(c, "GET", base);
    assert.equal(list.body.kind, "AgentTaskList");
    assert.deepEqual(
      list.body.items.map((i: any) => i.metadata.name),
      ["t1"],
    );

    // Deleting the CRD removes its objects and stops serving the type.
    await kube(c, "DELETE", "/apis/apiextensions.k8s.io/v1/customresourcedefinitions/agenttasks.drover.dev");
    assert.equal((await kube(c, "GET", base)).status, 404);
  });

  it("deletes a namespace with everything in it", async () => {
    const ns = await freshNamespace(c);
    await kube(c, "POST", `/api/v1/namespaces/${ns}/secrets`, { metadata: { name: "s" }, stringData: { a: "b" } });
    const secret = await kube(c, "GET", `/api/v1/namespaces/${ns}/secrets/s`);
    assert.equal(secret.body.data.a, Buffer.from("b").toString("base64"));
    const del = await kube(c, "DELETE", `/api/v1/namespaces/${ns}`);
    assert.equal(del.body.status.phase, "Terminating");
    const refused = await kube(c, "POST", `/api/v1/namespaces/${ns}/configmaps`, { metadata: { name: "late" } });
    assert.equal(refused.status, 403);
    await until(
      "namespace removal",
      () => kube(c, "GET", `/api/v1/namespaces/${ns}`),
      (r) => r.status === 404,
    );
  });
});
