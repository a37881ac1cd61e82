import { spawn } from "node:child_process";
import { readFileSync, writeFileSync } from "node:fs";
import { request } from "node:https";
import { join } from "node:path";
import { parse } from "yaml";
import type * as Ktc from "../../tools/kube-test-cluster/src/index.js";
import { tinyArchive } from "./dispatch.js";
import { adminToken, api, droverBin, repoRoot, sleep, startServerProc } from "./harness.js";
import { median, percentile, type Figure } from "./report.js";

const ktc = (await import(new URL("../../tools/kube-test-cluster/dist/index.js", import.meta.url).href)) as typeof Ktc;
const ns = "bench";

function kube(c: Ktc.TestCluster, method: string, path: string, body?: unknown): Promise<{ status: number; body: any }> {
  return new Promise((resolve, reject) => {
    const text = body === undefined ? undefined : JSON.stringify(body);
    const req = request(new URL(path, c.url), { method, ca: c.caCert, headers: { authorization: `Bearer ${c.token}`, "content-type": "application/json", accept: "application/json" } }, (res) => {
      const chunks: Buffer[] = [];
      res.on("data", (d: Buffer) => chunks.push(d));
      res.on("end", () => resolve({ status: res.statusCode ?? 0, body: JSON.parse(Buffer.concat(chunks).toString("utf8") || "null") }));
    });
    req.on("error", reject);
    if (text) req.write(text);
    req.end();
  });
}

/** Milliseconds until a Job named by `predicate` appears, polled at 2 ms. */
async function waitForJob(c: Ktc.TestCluster, selector: string): Promise<void> {
  for (;;) {
    const res = await kube(c, "GET", `/apis/batch/v1/namespaces/${ns}/jobs?labelSelector=${encodeURIComponent(selector)}`);
    if (res.body.items.length > 0) return;
    await sleep(2);
  }
}

/**
 * Kubernetes job mode: a run created → its Job exists in the cluster (long-poll claim + Job and
 * Secret creation by the controller), beside creating the same kind of Job directly.
 */
export async function benchKubernetes(runs = 20): Promise<Figure[]> {
  // Pods never start (their image cannot be pulled): only the scheduling path is measured.
  const cluster = await ktc.startTestCluster({ unpullableImages: ["bench/never:pull"] });
  const server = await startServerProc();
  let controller: ReturnType<typeof spawn> | undefined;
  try {
    await kube(cluster, "POST", "/api/v1/namespaces", { metadata: { name: ns } });
    await kube(cluster, "POST", "/apis/apiextensions.k8s.io/v1/customresourcedefinitions", parse(readFileSync(join(repoRoot, "deploy", "kubernetes", "agenttasks.drover.dev.yaml"), "utf8")));
    for (let i = 0; i < 100 && (await kube(cluster, "GET", `/apis/drover.dev/v1alpha1/namespaces/${ns}/agenttasks`)).status !== 200; i++) await sleep(50);
    const image = "bench/never:pull";
    await kube(cluster, "POST", `/apis/drover.dev/v1alpha1/namespaces/${ns}/agenttasks`, {
      apiVersion: "drover.dev/v1alpha1",
      kind: "AgentTask",
      metadata: { name: "task" },
      spec: { jobTemplate: { template: { spec: { containers: [{ name: "worker", image }, { name: "runner", image }] } } } },
    });
    await api(server.url, "POST", "/api/v1/pools", undefined, { name: "k8s" });
    const { token } = await api(server.url, "POST", "/api/v1/pools/k8s/tokens", undefined, {});
    controller = spawn(process.execPath, [droverBin, "agent", "controller"], {
      env: {
        ...process.env,
        KUBECONFIG: cluster.kubeconfigPath,
        DROVER_TOKEN: token,
        DROVER_AGENT_NAME: "bench-ctl",
        DROVER_AGENT_CONCURRENCY: String(runs + 5),
        DROVER_AGENT_KUBERNETES_NAMESPACE: ns,
        DROVER_AGENT_KUBERNETES_TASK_TEMPLATE: "task",
        DROVER_AGENT_IMAGE_PULL_GRACE_SECONDS: "3600",
        DROVER_AGENT_HEALTH_PORT: "0",
      },
      stdio: "ignore",
    });
    await sleep(1500);
    const archive = await tinyArchive();
    const drover: number[] = [];
    for (let i = 0; i < runs; i++) {
      const ws = `k${i}`;
      await api(server.url, "POST", "/api/v1/workspaces", adminToken, { name: ws, pool: "k8s" });
      const cv = await api(server.url, "POST", `/api/v1/workspaces/${ws}/configuration-versions`, adminToken, archive, "application/gzip");
      const t0 = performance.now();
      const run = await api(server.url, "POST", "/api/v1/runs", adminToken, { workspace: ws, configurationVersionId: cv.id });
      await waitForJob(cluster, `drover.dev/run-id=${run.id}`);
      drover.push(performance.now() - t0);
    }
    const direct: number[] = [];
    for (let i = 0; i < runs; i++) {
      const t0 = performance.now();
      await kube(cluster, "POST", `/apis/batch/v1/namespaces/${ns}/jobs`, {
        metadata: { name: `direct-${i}`, labels: { direct: String(i) } },
        spec: { backoffLimit: 0, template: { spec: { restartPolicy: "Never", containers: [{ name: "c", image }] } } },
      });
      await waitForJob(cluster, `direct=${i}`);
      direct.push(performance.now() - t0);
    }
    writeFileSync(join(repoRoot, "bench", "results", "kubernetes-samples.json"), JSON.stringify({ drover, direct }) + "\n");
    return [
      {
        bench: `kubernetes (${runs} runs, test cluster)`,
        metric: "run created → Job exists, median",
        unit: "ms",
        value: median(drover),
        baseline: median(direct),
        baselineLabel: "creating a Job directly",
        target: "—",
        met: null,
        note: `p99 ${percentile(drover, 99).toFixed(1)} ms; includes the long-poll claim, the AgentTask read, Job and Secret creation`,
      },
    ];
  } finally {
    controller?.kill("SIGKILL");
    await server.stop();
    await cluster.close();
  }
}
