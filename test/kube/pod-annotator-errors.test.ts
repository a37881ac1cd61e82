import assert from "node:assert/strict";
import { mkdirSync, mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { Writable } from "node:stream";
import { after, before, test } from "node:test";
import { pino } from "pino";
import { runPodAnnotator } from "@drover/agent/pod-annotator";
import { eventually, fastTimings, freshNamespace, kube, startTestCluster, type TestCluster } from "./cluster.js";

// The pod-annotator sidecar's Kubernetes API errors, like the controller's and the workers',
// name the object and kind acted on and carry the API's Status reason and message: here its
// ServiceAccount may not patch its own pod (an RBAC refusal on the test cluster).

let cluster: TestCluster;
let dir: string;

before(async () => {
  cluster = await startTestCluster({ timings: fastTimings });
  dir = mkdtempSync(join(tmpdir(), "drover-annotator-"));
});

after(async () => {
  await cluster?.close();
  rmSync(dir, { recursive: true, force: true });
});

test("a patch its RBAC refuses: the annotator's error names the Pod, the reason Forbidden, HTTP 403 and the API's message", async () => {
  const ns = await freshNamespace(cluster, "annot");
  assert.equal(
    (await kube(cluster, "POST", `/api/v1/namespaces/${ns}/serviceaccounts`, { metadata: { name: "annotator" } }))
      .status,
    201,
  );
  const sa = join(dir, "sa");
  mkdirSync(sa);
  writeFileSync(join(sa, "token"), cluster.serviceAccountToken(ns, "annotator"));
  writeFileSync(join(sa, "ca.crt"), cluster.caCert ?? "");
  const statusFile = join(dir, "status.json");
  writeFileSync(statusFile, JSON.stringify({ runningJobs: 1, state: "running" }));
  const lines: string[] = [];
  const sink = new Writable({
    write(chunk: Buffer, _enc, cb) {
      lines.push(chunk.toString("utf8"));
      cb();
    },
  });
  const stop = new AbortController();
  const done = runPodAnnotator(
    {
      statusFile,
      podName: "agent-0",
      namespace: ns,
      apiUrl: cluster.url,
      serviceAccountDir: sa,
      recheckMs: 100,
      logFormat: "json",
    },
    pino(sink),
    stop.signal,
  );
  try {
    const line = await eventually(
      "the refused patch in the log",
      async () => lines.find((l) => l.includes("could not annotate the pod")),
      20_000,
    );
    const err = String((JSON.parse(line) as { err?: unknown }).err);
    assert.equal(
      err,
      `cannot patch Pod "agent-0" in namespace "${ns}": Forbidden (HTTP 403): pods "agent-0" is forbidden: User "system:serviceaccount:${ns}:annotator" cannot patch resource "pods" in API group "" in the namespace "${ns}"`,
    );
  } finally {
    stop.abort();
    await done;
  }
});
