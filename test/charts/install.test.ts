import assert from "node:assert/strict";
import { execFileSync, spawn } from "node:child_process";
import { chmodSync, mkdirSync, writeFileSync } from "node:fs";
import { dirname, join } from "node:path";
import { fileURLToPath, pathToFileURL } from "node:url";
import { after, before, test } from "node:test";
import { startStack, type Stack } from "../support/stack.js";
import { droverBin } from "../support/processes.js";
import { fastTimings, kube, startTestCluster, type TestCluster } from "../kube/cluster.js";

// The charts installed on the test cluster with kubectl apply; agent-job's controller then runs
// in the cluster (a Deployment pod) and completes examples/hello against the real server.

const repo = join(dirname(fileURLToPath(import.meta.url)), "..", "..", "..");
const { tools } = (await import(pathToFileURL(join(repo, "scripts", "tools.mjs")).href)) as { tools(): { helm: string; kubectl: string } };
const { helm } = tools();
const image = "ghcr.io/drover-dev/drover:test";
let cluster: TestCluster;
let stack: Stack;

/** kubectl (Debian's) against the test cluster, without blocking the event loop the cluster runs on. */
function kubectl(args: string[], input?: string): Promise<{ code: number; out: string }> {
  return new Promise((resolve) => {
    const child = spawn("kubectl", args, { env: { ...process.env, ...cluster.kubectlEnv() } });
    let out = "";
    child.stdout.on("data", (d: Buffer) => (out += d.toString()));
    child.stderr.on("data", (d: Buffer) => (out += d.toString()));
    child.on("exit", (code) => resolve({ code: code ?? 1, out }));
    child.stdin.end(input ?? "");
  });
}

/** Applies rendered manifests as `helm install` would: CRDs first, established, then the rest. */
async function applyRendered(ns: string, rendered: string): Promise<{ code: number; out: string }> {
  const docs = rendered.split(/^---$/m).filter((d) => /\bkind:/.test(d));
  const crds = docs.filter((d) => /^kind: CustomResourceDefinition$/m.test(d));
  const rest = docs.filter((d) => !crds.includes(d));
  let out = "";
  if (crds.length > 0) {
    const r = await kubectl(["apply", "-f", "-"], crds.join("\n---\n"));
    out += r.out;
    if (r.code !== 0) return { code: r.code, out };
    for (let i = 0; i < 100 && (await kube(cluster, "GET", `/apis/drover.dev/v1alpha1/namespaces/${ns}/agenttasks`)).status !== 200; i++) await new Promise((res) => setTimeout(res, 50));
  }
  const r = await kubectl(["apply", "-n", ns, "-f", "-"], rest.join("\n---\n"));
  return { code: r.code, out: out + r.out };
}

function template(chart: string, namespace: string, args: string[]): string {
  return execFileSync(helm, ["template", chart.replace("agent-", "d-"), join(repo, "charts", chart), "--namespace", namespace, "--include-crds", ...args], { encoding: "utf8" });
}

before(async () => {
  // A `drover` on PATH, as in the image.
  const bin = join(repo, "test", "dist", ".bin");
  mkdirSync(bin, { recursive: true });
  writeFileSync(join(bin, "drover"), `#!/bin/sh\nexec "${process.execPath}" "${droverBin}" "$@"\n`);
  chmodSync(join(bin, "drover"), 0o755);
  cluster = await startTestCluster({
    timings: fastTimings,
    images: { [image]: { entrypoint: ["drover"], paths: [repo] } },
    baseEnv: { PATH: `${bin}:${process.env.PATH ?? ""}`, HOME: "/root" },
    // Room for every chart's pods at once: the first test leaves them all applied, and the
    // scheduler counts their requests against the node's allocatable.
    nodes: [{ name: "ktc-node", allocatable: { cpu: "64", memory: "256Gi", pods: "500" } }],
  });
  stack = await startStack();
  // The Prometheus Operator's CRD, so the maximal values (ServiceMonitor on) apply too.
  await kube(cluster, "POST", "/apis/apiextensions.k8s.io/v1/customresourcedefinitions", {
    apiVersion: "apiextensions.k8s.io/v1",
    kind: "CustomResourceDefinition",
    metadata: { name: "servicemonitors.monitoring.coreos.com" },
    spec: { group: "monitoring.coreos.com", scope: "Namespaced", names: { kind: "ServiceMonitor", plural: "servicemonitors", singular: "servicemonitor", listKind: "ServiceMonitorList" }, versions: [{ name: "v1", served: true, storage: true, schema: { openAPIV3Schema: { type: "object", "x-kubernetes-preserve-unknown-fields": true } } }] },
  });
});

after(async () => {
  await stack?.stop();
  await cluster?.close();
});

test("every chart, with default and maximal values, applies with kubectl to the test cluster", async () => {
  let n = 0;
  for (const chart of ["agent-local", "agent-job", "agent-k8s"]) {
    for (const args of [["--set", "agent.token=drv_p_eyJ1cmwiOiJodHRwOi8veCIsInBvb2wiOiJwIn0.eA"], ["-f", join(repo, "charts", chart, "ci", "max-values.yaml")]]) {
      const ns = `apply-${++n}`;
      assert.equal((await kube(cluster, "POST", "/api/v1/namespaces", { metadata: { name: ns } })).status, 201);
      const res = await applyRendered(ns, template(chart, ns, args));
      assert.equal(res.code, 0, `${chart} ${args.join(" ")}:\n${res.out}`);
      assert.doesNotMatch(res.out, /error/i);
      // Its pods hold cpu/memory requests on the node (the scheduler counts them) and would only crash-loop.
      await kube(cluster, "DELETE", `/api/v1/namespaces/${ns}`);
    }
  }
});

test("agent-job installed on the test cluster completes examples/hello end to end", async () => {
  // Pods mount an emptyDir over /tmp: give them files from elsewhere. The controller reaches the
  // API in-cluster, with its ServiceAccount's token under the chart's RBAC.
  const shared = join(repo, "test", "dist", ".chart-install");
  mkdirSync(shared, { recursive: true });
  const tfrc = join(shared, "runner.tfrc");
  writeFileSync(tfrc, "");
  const rendered = template("agent-job", "drover", [
    "--set", `agent.token=${stack.poolToken}`,
    "--set", `agent.url=${stack.server.url}`,
    "--set", "image.tag=test",
    "--set", `agent.healthPort=${20000 + Math.floor(Math.random() * 20000)}`,
    "--set", "agent.imagePullGracePeriodSeconds=5",
    "--set", `task.execLoopPath=${join(repo, "packages", "agent", "exec-loop", "exec-loop.sh")}`,
    "--set", "task.runner.image=ghcr.io/drover-dev/drover-runner:test",
    "--set", `task.runner.extraEnv.TF_CLI_CONFIG_FILE=${tfrc}`,
  ]);
  assert.equal((await kube(cluster, "POST", "/api/v1/namespaces", { metadata: { name: "drover" } })).status, 201);
  const applied = await applyRendered("drover", rendered);
  assert.equal(applied.code, 0, applied.out);
  // The controller runs as the Deployment's pod and registers with the server.
  const deadline = Date.now() + 30_000;
  while (!(await stack.server.api("GET", `/api/v1/agents?pool=${stack.pool}`)).body.items.some((a: any) => a.driver === "kubernetes" && a.status !== "offline")) {
    if (Date.now() > deadline) {
      const pods = await kubectl(["get", "pods,events", "-n", "drover", "-o", "wide"]);
      const logs = await kubectl(["logs", "-n", "drover", "-l", "app.kubernetes.io/component=controller"]);
      assert.fail(`the controller did not register:\n${pods.out}\n${logs.out}`);
    }
    await new Promise((r) => setTimeout(r, 200));
  }
  await stack.server.api("POST", "/api/v1/workspaces", { name: "chart-hello", pool: stack.pool });
  const res = await stack.cli(["run", "start", join(repo, "examples", "hello"), "--workspace", "chart-hello", "--auto-apply"]);
  assert.equal(res.code, 0, `${res.stdout}\n${res.stderr}`);
  assert.match(res.stdout, /Hello from Drover/);
  assert.match(res.stdout, /Apply complete!/);
  const jobs = await kubectl(["get", "jobs", "-n", "drover", "-l", "drover.dev/controller=d-job-agent-job", "-o", "name"]);
  assert.equal(jobs.out.trim().split("\n").length, 2, jobs.out);
});
