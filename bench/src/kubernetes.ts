import { spawn, type ChildProcess } from "node:child_process";
import { mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { routes } from "@drover/protocol";
import { packDir, startAgentProc, type AgentProc } from "./agent-runs.js";
import { request } from "node:https";
import { join } from "node:path";
import { parse } from "yaml";
import type * as Ktc from "../../tools/kube-test-cluster/src/index.js";
import { tinyArchive } from "./dispatch.js";
import { api, client, droverBin, repoRoot, sleep, startServerProc, track, trackStop } from "./harness.js";
import { median, percentile, type Figure } from "./report.js";

const ktc = (await import(new URL("../../tools/kube-test-cluster/dist/index.js", import.meta.url).href)) as typeof Ktc;
const ns = "bench";

function kube(
  c: Ktc.TestCluster,
  method: string,
  path: string,
  body?: unknown,
): Promise<{ status: number; body: any }> {
  return new Promise((resolve, reject) => {
    const text = body === undefined ? undefined : JSON.stringify(body);
    // A connection of its own: a reused keep-alive socket the server is closing answers ECONNRESET.
    const req = request(
      new URL(path, c.url),
      {
        method,
        agent: false,
        ca: c.caCert,
        headers: { authorization: `Bearer ${c.token}`, "content-type": "application/json", accept: "application/json" },
      },
      (res) => {
        const chunks: Buffer[] = [];
        res.on("data", (d: Buffer) => chunks.push(d));
        res.on("end", () =>
          resolve({ status: res.statusCode ?? 0, body: JSON.parse(Buffer.concat(chunks).toString("utf8") || "null") }),
        );
      },
    );
    req.on("error", reject);
    if (text) req.write(text);
    req.end();
  });
}

/**
 * Watches the namespace's Jobs and records when each first appears (performance.now()), by
 * the label `key`: one stream instead of a poll loop on the API server, which shares this
 * process's event loop (the test cluster runs in process).
 */
function watchJobs(
  c: Ktc.TestCluster,
  namespace: string,
  key: string,
): { seen: Map<string, number>; waitFor(value: string): Promise<number>; close(): void } {
  const seen = new Map<string, number>();
  const waiting = new Map<string, (t: number) => void>();
  const req = request(
    new URL(`/apis/batch/v1/namespaces/${namespace}/jobs?watch=1`, c.url),
    { ca: c.caCert, headers: { authorization: `Bearer ${c.token}` } },
    (res) => {
      let buf = "";
      res.on("data", (d: Buffer) => {
        const now = performance.now();
        buf += d.toString("utf8");
        let nl: number;
        while ((nl = buf.indexOf("\n")) >= 0) {
          const line = buf.slice(0, nl);
          buf = buf.slice(nl + 1);
          if (!line.trim()) continue;
          const ev = JSON.parse(line) as { type: string; object: { metadata?: { labels?: Record<string, string> } } };
          const value = ev.object.metadata?.labels?.[key];
          if (ev.type !== "ADDED" || value === undefined || seen.has(value)) continue;
          seen.set(value, now);
          waiting.get(value)?.(now);
        }
      });
    },
  );
  req.on("error", () => undefined);
  req.end();
  return {
    seen,
    waitFor: (value) => {
      const t = seen.get(value);
      return t !== undefined ? Promise.resolve(t) : new Promise((resolve) => waiting.set(value, resolve));
    },
    close: () => req.destroy(),
  };
}

/** Time from `t0` until the run's plan log shows the runner's first step (`$ terraform init`), polled at 5 ms. */
/** How long a run of the second part may take to reach its first step, or to end: an agent that died never gets there. */
const runDeadlineMs = 120_000;

async function firstStep(url: string, runId: string, t0: number): Promise<number> {
  const deadline = Date.now() + runDeadlineMs;
  while (Date.now() < deadline) {
    const res = await client(url).exchange(routes.runLogs, {
      params: { id: runId },
      query: { phase: "plan", offset: 0, limit: 65536 },
    });
    if (res.result.toString("utf8").includes("$ terraform init")) return performance.now() - t0;
    await sleep(5);
  }
  throw new Error(
    `run ${runId} did not reach \`terraform init\` within ${runDeadlineMs / 1000} s (is its agent running?)`,
  );
}

async function waitForRun(url: string, runId: string): Promise<string> {
  const deadline = Date.now() + runDeadlineMs;
  while (Date.now() < deadline) {
    const run = await api(url, routes.getRun, { params: { id: runId } });
    if (["planned_and_finished", "errored", "canceled"].includes(run.status)) return run.status as string;
    await sleep(100);
  }
  throw new Error(`run ${runId} did not end within ${runDeadlineMs / 1000} s`);
}

const task = (containers: unknown[], podSpec: Record<string, unknown> = {}) => ({
  apiVersion: "drover.dev/v1alpha1",
  kind: "AgentTask",
  metadata: { name: "task" },
  spec: { jobTemplate: { template: { spec: { ...podSpec, containers } } } },
});

/**
 * Where the first part's pods go: nowhere. No node carries the label, so each pod is marked
 * unschedulable once and waits. (Pods on a node with an image that cannot be pulled had the
 * test cluster's kubelet rewrite each one's status on every pull retry: a few hundred such pods
 * loaded the cluster's API, its watchers and this process, whose stalls set the tail of both
 * figures.)
 */
const nowhere = { nodeSelector: { "bench.drover.dev/node": "none" } };

/** `drover agent controller` for `namespace`, serving the pool of `token`. */
function startController(
  cluster: Ktc.TestCluster,
  namespace: string,
  token: string,
  concurrency: number,
  extra: Record<string, string> = {},
): ChildProcess {
  return track(
    spawn(process.execPath, [droverBin, "agent", "controller"], {
      env: {
        ...process.env,
        KUBECONFIG: cluster.kubeconfigPath,
        DROVER_TOKEN: token,
        DROVER_AGENT_NAME: `bench-ctl-${namespace}`,
        DROVER_AGENT_CONCURRENCY: String(concurrency),
        DROVER_AGENT_KUBERNETES_NAMESPACE: namespace,
        DROVER_AGENT_KUBERNETES_TASK_TEMPLATE: "task",
        DROVER_AGENT_IMAGE_PULL_GRACE_SECONDS: "3600",
        DROVER_AGENT_HEALTH_PORT: "0",
        ...extra,
      },
      stdio: "ignore",
    }),
  );
}

async function waitForAgent(url: string, pool: string): Promise<void> {
  for (let i = 0; i < 600; i++) {
    if (
      (await api(url, routes.listAgents, { query: { pool } })).items.some(
        (a: { status: string }) => a.status !== "offline",
      )
    )
      return;
    await sleep(50);
  }
  throw new Error(`no agent of pool ${pool} came online`);
}

async function prepareNamespace(
  cluster: Ktc.TestCluster,
  namespace: string,
  containers: unknown[],
  podSpec: Record<string, unknown> = {},
): Promise<void> {
  await kube(cluster, "POST", "/api/v1/namespaces", { metadata: { name: namespace } });
  for (
    let i = 0;
    i < 100 &&
    (await kube(cluster, "GET", `/apis/drover.dev/v1alpha1/namespaces/${namespace}/agenttasks`)).status !== 200;
    i++
  )
    await sleep(50);
  await kube(
    cluster,
    "POST",
    `/apis/drover.dev/v1alpha1/namespaces/${namespace}/agenttasks`,
    task(containers, podSpec),
  );
}

/**
 * Kubernetes job mode. (1) A run created → its Job exists in the cluster (long-poll claim, Job
 * creation by the controller; pods never start), beside creating the same kind of Job
 * directly, `runs` of each, alternated. (2) A run created → the runner's first step (`terraform
 * init`) started in the pod (worker and runner as processes of the test cluster), beside the
 * same on a local agent, `stepRuns` of each.
 */
export async function benchKubernetes(runs = 100, stepRuns = 8): Promise<Figure[]> {
  // Pods of the first part never start (no node matches them; their image could not be pulled either): only the create path is measured.
  const image = "bench/never:pull";
  // The controller's API calls on the create path, counted by what only it asks for.
  const calls = { taskReads: 0, jobCreates: 0, secretCreates: 0 };
  const cluster = await ktc.startTestCluster({
    unpullableImages: [image],
    onRequest: (method, url) => {
      if (
        !url.startsWith(`/apis/drover.dev/v1alpha1/namespaces/${ns}/agenttasks/`) &&
        !url.startsWith(`/apis/batch/v1/namespaces/${ns}/jobs`) &&
        !url.startsWith(`/api/v1/namespaces/${ns}/secrets`)
      )
        return;
      if (method === "GET" && url.includes("/agenttasks/")) calls.taskReads++;
      else if (method === "POST" && url.includes("/jobs")) calls.jobCreates++;
      else if (method === "POST" && url.includes("/secrets")) calls.secretCreates++;
    },
  });
  // The test cluster runs in this process and starts pods as processes of its own: if this bench
  // is abandoned (timed out), the runner closes it.
  const forgetCluster = trackStop(() => void cluster.close().catch(() => undefined));
  const server = await startServerProc();
  const controllers: ChildProcess[] = [];
  let local: AgentProc | undefined;
  const dir = mkdtempSync(join(tmpdir(), "drover-bench-k8s-"));
  try {
    await kube(
      cluster,
      "POST",
      "/apis/apiextensions.k8s.io/v1/customresourcedefinitions",
      parse(readFileSync(join(repoRoot, "deploy", "kubernetes", "agenttasks.drover.dev.yaml"), "utf8")),
    );
    await prepareNamespace(
      cluster,
      ns,
      [
        { name: "worker", image },
        { name: "runner", image },
      ],
      nowhere,
    );
    await api(server.url, routes.createPool, { body: { name: "k8s" } });
    const { token } = await api(server.url, routes.createPoolToken, { params: { pool: "k8s" }, body: {} });
    controllers.push(startController(cluster, ns, token, runs + 5));
    await waitForAgent(server.url, "k8s");
    const archive = await tinyArchive();
    const jobs = watchJobs(cluster, ns, "drover.dev/run-id");
    const directJobs = watchJobs(cluster, ns, "direct");
    const drover: number[] = [];
    const direct: number[] = [];
    // Alternated, one of each at a time: on a shared machine both see the same load.
    for (let i = 0; i < runs; i++) {
      const ws = `k${i}`;
      await api(server.url, routes.createWorkspace, { body: { name: ws, pool: "k8s" } });
      const cv = await api(server.url, routes.uploadConfiguration, { params: { ws }, body: archive });
      let t0 = performance.now();
      const run = await api(server.url, routes.createRun, { body: { workspace: ws, configurationVersionId: cv.id } });
      drover.push((await jobs.waitFor(run.id)) - t0);
      t0 = performance.now();
      await kube(cluster, "POST", `/apis/batch/v1/namespaces/${ns}/jobs`, {
        metadata: { name: `direct-${i}`, labels: { direct: String(i) } },
        spec: {
          backoffLimit: 0,
          template: { spec: { ...nowhere, restartPolicy: "Never", containers: [{ name: "c", image }] } },
        },
      });
      direct.push((await directJobs.waitFor(String(i))) - t0);
    }
    jobs.close();
    directJobs.close();
    // Every launch's Secret follows its Job: wait for the last ones before counting.
    for (let i = 0; i < 200 && calls.secretCreates < runs; i++) await sleep(50);
    const perRun = (n: number) => (n / runs).toFixed(2);
    const apiCalls = `per run the controller made ${perRun(calls.taskReads)} AgentTask reads, ${perRun(calls.jobCreates - runs)} Job creates and ${perRun(calls.secretCreates)} Secret creates`;

    // (2) Pods that run: the worker is `drover agent worker`, the runner the exec-loop (as in the job-mode tests).
    const tfrc = join(dir, "terraformrc");
    writeFileSync(tfrc, "");
    const runNs = "bench-run";
    await prepareNamespace(cluster, runNs, [
      {
        name: "worker",
        image: "ghcr.io/drover-dev/drover:bench",
        command: [process.execPath, droverBin],
        args: ["agent", "worker"],
      },
      {
        name: "runner",
        image: "ghcr.io/drover-dev/drover-runner:bench",
        env: [
          { name: "TF_CLI_CONFIG_FILE", value: tfrc },
          { name: "CHECKPOINT_DISABLE", value: "1" },
        ],
      },
    ]);
    await api(server.url, routes.createPool, { body: { name: "k8s-run" } });
    const runToken = (await api(server.url, routes.createPoolToken, { params: { pool: "k8s-run" }, body: {} }))
      .token as string;
    controllers.push(
      startController(cluster, runNs, runToken, 5, {
        DROVER_AGENT_KUBERNETES_WORKER_IMAGE: "ghcr.io/drover-dev/drover:bench",
        DROVER_AGENT_EXEC_LOOP_PATH: join(repoRoot, "packages", "agent", "exec-loop", "exec-loop.sh"),
      }),
    );
    await waitForAgent(server.url, "k8s-run");
    await api(server.url, routes.createPool, { body: { name: "k8s-local" } });
    local = await startAgentProc(server, "k8s-local", "bench-local");
    mkdirSync(join(dir, "cfg"));
    writeFileSync(join(dir, "cfg", "main.tf"), 'resource "terraform_data" "trivial" {}\n');
    const runArchive = await packDir(join(dir, "cfg"));
    const steps = async (pool: string): Promise<number[]> => {
      const out: number[] = [];
      for (let i = 0; i < stepRuns; i++) {
        const ws = `${pool}-${i}`;
        await api(server.url, routes.createWorkspace, { body: { name: ws, pool } });
        const cv = await api(server.url, routes.uploadConfiguration, { params: { ws }, body: runArchive });
        const t0 = performance.now();
        const run = await api(server.url, routes.createRun, {
          body: { workspace: ws, configurationVersionId: cv.id, planOnly: true },
        });
        out.push(await firstStep(server.url, run.id, t0));
        const status = await waitForRun(server.url, run.id);
        if (status !== "planned_and_finished") throw new Error(`run ${run.id} in pool ${pool} ended ${status}`);
      }
      return out;
    };
    const podSteps = await steps("k8s-run");
    const localSteps = await steps("k8s-local");
    writeFileSync(
      join(repoRoot, "bench", "results", "kubernetes-samples.json"),
      JSON.stringify({ drover, direct, podSteps, localSteps }) + "\n",
    );
    const bench = `kubernetes (test cluster)`;
    const f = (n: number) => n.toFixed(0);
    return [
      {
        bench,
        metric: `run created → Job exists, p99 of ${runs}`,
        unit: "ms",
        value: percentile(drover, 99),
        baseline: percentile(direct, 99),
        baselineLabel: "creating a Job directly",
        target: "≤ 100 ms",
        met: percentile(drover, 99) <= 100,
        note: `median ${f(median(drover))} ms (direct ${f(median(direct))} ms), max ${f(Math.max(...drover))} ms (direct ${f(Math.max(...direct))} ms); includes the long-poll claim and the Job's creation (the AgentTask comes from a watch); ${apiCalls}; Drover's runs and direct creates alternate; seen through a watch on the namespace's Jobs`,
      },
      {
        bench,
        metric: `run created → runner's first step started, median of ${stepRuns}`,
        unit: "ms",
        value: median(podSteps),
        baseline: median(localSteps),
        baselineLabel: "a local agent",
        target: "reported",
        met: null,
        note: `every run planned_and_finished; pods: ${podSteps.map(f).join(", ")} ms; local agent: ${localSteps.map(f).join(", ")} ms (to the \`$ terraform init\` line in the run's log, polled at 5 ms); the pod's worker and runner are processes of the test cluster, so pod start is process start, not an image pull`,
      },
    ];
  } finally {
    for (const c of controllers) c.kill("SIGKILL");
    await local?.stop();
    await server.stop();
    forgetCluster();
    await cluster.close();
    rmSync(dir, { recursive: true, force: true });
  }
}
