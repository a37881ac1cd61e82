// kubectl (Debian's package) against the test cluster: get, apply (and re-apply as a
// patch), get -o json, logs, delete --cascade=background with pods garbage-collected,
// and get --watch.
import { after, before, describe, it } from "node:test";
import assert from "node:assert/strict";
import {
  fastTimings,
  hasKubectl,
  kube,
  kubectl,
  spawnKubectl,
  startTestCluster,
  until,
  type TestCluster,
} from "./cluster.js";

const job = (name: string, script: string, extra = "") => `apiVersion: batch/v1
kind: Job
metadata:
  name: ${name}
  labels:
    app: demo${extra}
spec:
  backoffLimit: 0
  template:
    spec:
      restartPolicy: Never
      containers:
      - name: main
        image: busybox:1.36
        command: ["sh", "-c", ${JSON.stringify(script)}]
`;

const configMap = (value: string) => `apiVersion: v1
kind: ConfigMap
metadata:
  name: settings
data:
  mode: "${value}"
`;

describe("kubectl against the test cluster", { skip: !hasKubectl && "kubectl not installed" }, () => {
  let c: TestCluster;
  let watches = 0;
  before(async () => {
    c = await startTestCluster({
      timings: fastTimings,
      onRequest: (_m, url) => void (url.includes("watch=true") && watches++),
    });
  });
  after(async () => {
    await c.close();
    assert.deepEqual(c.errors, []);
  });

  it("lists namespaces", async () => {
    const r = await kubectl(c, ["get", "ns"]);
    assert.equal(r.code, 0, r.stderr);
    assert.match(r.stdout, /^NAME\s+STATUS\s+AGE/m);
    assert.match(r.stdout, /^default\s+Active/m);
    assert.match(r.stdout, /^kube-system\s+Active/m);
  });

  it("applies a Job and a ConfigMap, then re-applies changes as patches", async () => {
    const first = await kubectl(
      c,
      ["apply", "-f", "-"],
      `${job("greeter", "echo hello from $HOSTNAME; sleep 0.2")}---\n${configMap("one")}`,
    );
    assert.equal(first.code, 0, first.stderr);
    assert.match(first.stdout, /job.batch\/greeter created/);
    assert.match(first.stdout, /configmap\/settings created/);

    const second = await kubectl(
      c,
      ["apply", "-f", "-"],
      `${job("greeter", "echo hello from $HOSTNAME; sleep 0.2", "\n    tier: batch")}---\n${configMap("two")}`,
    );
    assert.equal(second.code, 0, second.stderr);
    assert.match(second.stdout, /job.batch\/greeter configured/);
    assert.match(second.stdout, /configmap\/settings configured/);
    const cm = await kube(c, "GET", "/api/v1/namespaces/default/configmaps/settings");
    assert.equal(cm.body.data.mode, "two");
    assert.match(cm.body.metadata.annotations["kubectl.kubernetes.io/last-applied-configuration"], /"two"/);

    const unchanged = await kubectl(c, ["apply", "-f", "-"], configMap("two"));
    assert.match(unchanged.stdout, /configmap\/settings unchanged/);

    await until(
      "the Job to complete",
      () => kube(c, "GET", "/apis/batch/v1/namespaces/default/jobs/greeter"),
      (r) => r.body.status?.succeeded === 1,
    );
    const json = await kubectl(c, ["get", "jobs", "-o", "json"]);
    assert.equal(json.code, 0, json.stderr);
    const list = JSON.parse(json.stdout);
    const greeter = list.items.find((j: any) => j.metadata.name === "greeter");
    assert.equal(greeter.metadata.labels.tier, "batch");
    assert.equal(greeter.status.conditions.find((x: any) => x.type === "Complete").status, "True");

    const table = await kubectl(c, ["get", "jobs"]);
    assert.match(table.stdout, /^greeter\s+Complete\s+1\/1/m);
  });

  it("shows a pod's log", async () => {
    const pods = await kube(c, "GET", "/api/v1/namespaces/default/pods?labelSelector=job-name%3Dgreeter");
    const name = pods.body.items[0].metadata.name as string;
    const r = await kubectl(c, ["logs", name]);
    assert.equal(r.code, 0, r.stderr);
    assert.equal(r.stdout, `hello from ${name}\n`);
    const byJob = await kubectl(c, ["logs", "job/greeter"]);
    assert.equal(byJob.stdout, `hello from ${name}\n`);
  });

  it("deletes a Job with --cascade=background and its pods are garbage-collected", async () => {
    const r = await kubectl(c, ["delete", "job", "greeter", "--cascade=background"]);
    assert.equal(r.code, 0, r.stderr);
    assert.match(r.stdout, /job.batch "greeter" deleted/);
    await until(
      "the Job's pods to be collected",
      () => kube(c, "GET", "/api/v1/namespaces/default/pods?labelSelector=job-name%3Dgreeter"),
      (x) => x.body.items.length === 0,
    );
    const get = await kubectl(c, ["get", "job", "greeter"]);
    assert.notEqual(get.code, 0);
    assert.match(get.stderr, /NotFound|not found/);
  });

  it("watches pods with get --watch", async () => {
    const watcher = spawnKubectl(c, ["get", "pods", "--watch", "--output-watch-events"]);
    let out = "";
    watcher.stdout.on("data", (d: Buffer) => (out += d.toString()));
    watcher.stderr.on("data", (d: Buffer) => (out += d.toString()));
    try {
      await until(
        "kubectl to start watching",
        async () => watches,
        (n) => n > 0,
      );
      const r = await kubectl(c, ["apply", "-f", "-"], job("watched", "sleep 0.3"));
      assert.equal(r.code, 0, r.stderr);
      await until(
        "a watch line for the new pod",
        async () => out,
        (o) => /ADDED\s+watched-\w{5}\s+0\/1\s+Pending/.test(o),
      );
      await until(
        "the pod to be seen completing",
        async () => out,
        (o) => /MODIFIED\s+watched-\w{5}\s+0\/1\s+Completed/.test(o),
      );
    } finally {
      watcher.kill("SIGTERM");
    }
  });

  it("creates a Job with --dry-run=server: validated and admitted, never stored", async () => {
    const ok = await kubectl(c, ["create", "--dry-run=server", "-o", "name", "-f", "-"], job("dry", "true"));
    assert.equal(ok.code, 0, ok.stderr);
    assert.match(ok.stdout, /job.batch\/dry/);
    assert.equal((await kube(c, "GET", "/apis/batch/v1/namespaces/default/jobs/dry")).status, 404);
    const bad = await kubectl(
      c,
      ["create", "--dry-run=server", "-f", "-"],
      job("dry", "true").replace("name: main", "name: Main_1"),
    );
    assert.notEqual(bad.code, 0);
    assert.match(bad.stderr, /spec.template.spec.containers\[0\].name: Invalid value: "Main_1"/);
  });

  it("prints a CRD's condition column (a JSONPath filter) once status is written through /status", async () => {
    const crd = {
      apiVersion: "apiextensions.k8s.io/v1",
      kind: "CustomResourceDefinition",
      metadata: { name: "gadgets.example.dev" },
      spec: {
        group: "example.dev",
        scope: "Namespaced",
        names: { plural: "gadgets", singular: "gadget", kind: "Gadget" },
        versions: [
          {
            name: "v1",
            served: true,
            storage: true,
            subresources: { status: {} },
            additionalPrinterColumns: [
              { name: "Ready", type: "string", jsonPath: '.status.conditions[?(@.type=="Ready")].status' },
            ],
            schema: { openAPIV3Schema: { type: "object", "x-kubernetes-preserve-unknown-fields": true } },
          },
        ],
      },
    };
    assert.equal((await kube(c, "POST", "/apis/apiextensions.k8s.io/v1/customresourcedefinitions", crd)).status, 201);
    const base = "/apis/example.dev/v1/namespaces/default/gadgets";
    await until(
      "the CRD to be served",
      () => kube(c, "GET", base),
      (r) => r.status === 200,
    );
    assert.equal(
      (await kube(c, "POST", base, { apiVersion: "example.dev/v1", kind: "Gadget", metadata: { name: "g" } })).status,
      201,
    );
    const conditions = [
      { type: "Other", status: "False" },
      { type: "Ready", status: "True" },
    ];
    const st = await kube(
      c,
      "PATCH",
      `${base}/g/status`,
      [{ op: "add", path: "/status", value: { conditions } }],
      "application/json-patch+json",
    );
    assert.equal(st.status, 200, JSON.stringify(st.body));
    const r = await kubectl(c, ["get", "gadgets"]);
    assert.equal(r.code, 0, r.stderr);
    assert.match(r.stdout, /^NAME\s+READY\s+AGE$/m);
    assert.match(r.stdout, /^g\s+True\s+/m);
  });

  it("reports errors as kubectl prints them", async () => {
    const r = await kubectl(c, ["get", "pod", "nope"]);
    assert.notEqual(r.code, 0);
    assert.match(r.stderr, /Error from server \(NotFound\): pods "nope" not found/);
    const bad = await kubectl(
      c,
      ["apply", "-f", "-"],
      "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: Bad_Name\n",
    );
    assert.notEqual(bad.code, 0);
    assert.match(bad.stderr, /Invalid value: "Bad_Name"/);
  });
});
