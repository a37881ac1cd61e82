// The Pulumi component's objects (captured under Pulumi's mocks) applied with kubectl to the
// raised test cluster: in a namespace enforcing the restricted PodSecurity level every pod
// must pass admission; with or without it the job-mode controller becomes Ready through its
// probes under its own ServiceAccount's RBAC, and examples/hello completes through the task
// pods it launches, whose UID-1000 worker must read its 0400 job Secret (fsGroup). In the
// restricted namespace a ResourceQuota on requests and memory limits refuses any pod that
// does not state them (as many multi-tenant clusters do): run pods must not be BestEffort. Where podman
// runs here, the controller, the task pods' worker and runner are real containers of the locally
// built drover and runner images (chartImages); elsewhere the host-process shim stands in.
import assert from "node:assert/strict";
import { readFileSync } from "node:fs";
import { join } from "node:path";
import { pathToFileURL } from "node:url";
import { after, before, test } from "node:test";
import { parse, stringify } from "yaml";
import { runLog, startStack, type Stack } from "../support/stack.js";
import {
  applyRendered,
  assertStarted,
  chartImages,
  startedContainers,
  droverImage,
  isReady,
  kubectlOut,
  namespace,
  repo,
  runnerImage,
  type ChartImages,
  chartTimings,
} from "../support/chart-cluster.js";
import { kube, startTestCluster, until, type TestCluster } from "../kube/cluster.js";
import { routes } from "@drover/protocol";

let cluster: TestCluster;
let stack: Stack;
let images: ChartImages;

interface Created {
  type: string;
  name: string;
  inputs: Record<string, unknown>;
}

/** Pulumi's wire form of a secret (`{ <sig>: <marker>, value }`) unwrapped, recursively. */
function plain(v: unknown): unknown {
  if (Array.isArray(v)) return v.map(plain);
  if (v && typeof v === "object") {
    const o = v as Record<string, unknown>;
    if ("4dabf18193072939515e22adb298388d" in o) return plain(o.value);
    return Object.fromEntries(Object.entries(o).map(([k, x]) => [k, plain(x)]));
  }
  return v;
}

/** `kubernetes:apps/v1:Deployment` → a Deployment object as kubectl would apply it. */
function toObject(c: Created): Record<string, any> | undefined {
  const m = /^kubernetes:([^:]+):([^:]+)$/.exec(c.type);
  if (!m) return undefined;
  const [, gv = "", kind = ""] = m;
  const apiVersion = gv.startsWith("core/") ? gv.slice("core/".length) : gv;
  const o = plain(c.inputs) as Record<string, any>;
  delete o.apiVersion;
  delete o.kind;
  o.metadata = { ...(o.metadata ?? {}), name: o.metadata?.name ?? c.name };
  return { apiVersion, kind, ...o };
}

before(
  async () => {
    // The locally built drover and runner images as real containers where podman runs here.
    images = await chartImages(join(repo, "test", "dist", ".pulumi-cluster"));
    cluster = await startTestCluster({
      timings: chartTimings,
      ...images.options,
      // The server ends every watch after 1.5 s, so the controller's re-list/re-watch runs many times per test.
      watchTimeoutMs: 1500,
    });
    stack = await startStack();
  },
  { timeout: 20 * 60_000 },
);

after(async () => {
  await stack?.stop();
  await cluster?.close();
});

/** Applies the component's objects into a fresh namespace at `level`, waits for the controller, runs examples/hello, removes the namespace. */
async function installAndRun(ns: string, level: "restricted" | "privileged"): Promise<void> {
  const since = new Date();
  const created: Created[] = [];
  const pulumi = await import("@pulumi/pulumi");
  await pulumi.runtime.setMocks(
    {
      newResource: (args) => {
        created.push({ type: args.type, name: args.name, inputs: args.inputs as Record<string, unknown> });
        return { id: `${args.name}-id`, state: args.inputs };
      },
      call: (args) => args.inputs,
    },
    "drover",
    "cluster",
    false,
  );
  const { DroverAgent } = (await import(
    pathToFileURL(join(repo, "deploy", "pulumi", "dist", "src", "index.js")).href
  )) as { DroverAgent: new (name: string, args: Record<string, unknown>) => { deployment: { id: unknown } } };
  const agent = new DroverAgent("drv", {
    namespace: ns,
    createNamespace: false,
    mode: "job",
    token: stack.poolToken,
    url: stack.server.url,
    image: droverImage,
    runnerImage,
    env: images.execLoopPath ? { DROVER_AGENT_EXEC_LOOP_PATH: images.execLoopPath } : {},
    podTemplate: {
      spec: {
        containers: [
          { name: "runner", env: Object.entries(images.runnerEnv).map(([name, value]) => ({ name, value })) },
        ],
      },
    },
  });
  await new Promise<void>((resolve) => pulumi.all([agent.deployment.id as never]).apply(() => resolve()));
  await until(
    "every child registered",
    async () => created.length,
    (n) => n > 0,
  );
  await new Promise((r) => setTimeout(r, 100));
  const objects = created
    .map(toObject)
    .filter((o): o is Record<string, any> => o !== undefined && o.kind !== "Namespace");
  assert.ok(
    objects.some((o) => o.kind === "Deployment") && objects.some((o) => o.kind === "AgentTask"),
    created.map((c) => c.type).join(", "),
  );

  await namespace(cluster, ns, level);
  if (level === "restricted") {
    const hard = { "requests.cpu": "8", "requests.memory": "16Gi", "limits.memory": "32Gi" };
    assert.equal(
      (
        await kube(cluster, "POST", `/api/v1/namespaces/${ns}/resourcequotas`, {
          metadata: { name: "compute" },
          spec: { hard },
        })
      ).status,
      201,
    );
  }
  // The component installs the AgentTask CRD itself: applied first, as helm orders CRDs.
  const crds = objects.filter((o) => o.kind === "CustomResourceDefinition");
  assert.deepEqual(
    crds.map((o) => o.spec),
    [parse(readFileSync(join(repo, "deploy", "kubernetes", "agenttasks.drover.dev.yaml"), "utf8")).spec],
  );
  const applied = await applyRendered(cluster, ns, objects.map((o) => stringify(o)).join("---\n"));
  assert.equal(applied.code, 0, applied.out);

  const diagnose = async () =>
    `${(await kubectlOut(cluster, ["get", "pods,events", "-n", ns, "-o", "wide"])).out}\n${(await kubectlOut(cluster, ["logs", "-n", ns, "deployment/drv", "--tail=50"])).out}\n${(await kubectlOut(cluster, ["logs", "-n", ns, "-l", "app.kubernetes.io/name=drover-task", "-c", "worker", "--tail=20"])).out}`;
  const pods = async () => (await kube(cluster, "GET", `/api/v1/namespaces/${ns}/pods`)).body.items as any[];
  try {
    await until("the controller Ready through its readiness probe", pods, (ps) => ps.some(isReady), 60_000);
  } catch (e) {
    assert.fail(`${(e as Error).message}\n${await diagnose()}`);
  }
  const refused = (await kube(cluster, "GET", `/api/v1/namespaces/${ns}/events?fieldSelector=reason%3DFailedCreate`))
    .body.items as any[];
  assert.deepEqual(
    refused.map((e) => e.message),
    [],
  );

  await stack.server.api(routes.createWorkspace, { body: { name: `hello-${ns}`, pool: stack.pool } });
  const runId = await stack.startRun(join(repo, "examples", "hello"), `hello-${ns}`, ["--auto-apply"]);
  // A refused task pod fails the test at once instead of leaving the run queued until a timeout.
  const refusal = async () =>
    (
      (await kube(cluster, "GET", `/api/v1/namespaces/${ns}/events?fieldSelector=reason%3DFailedCreate`)).body
        .items as any[]
    )[0]?.message as string | undefined;
  await until(
    "the run to end (or a task pod to be refused)",
    async () => ({
      run: (await stack.server.api(routes.getRun, { params: { id: runId } })).body,
      refused: await refusal(),
    }),
    (x) => ["applied", "errored", "canceled"].includes(x.run.status) || x.refused !== undefined,
    120_000,
  );
  assert.equal(await refusal(), undefined, "every task pod passes admission");
  const run = (await stack.server.api(routes.getRun, { params: { id: runId } })).body;
  assert.equal(
    run.status,
    "applied",
    `${JSON.stringify(run)}\n${await runLog(stack.server, runId, "plan")}\n${await diagnose()}`,
  );
  assert.match(await runLog(stack.server, runId, "apply"), /Hello from Drover/);
  if (images.built) {
    // The controller, the task pods' worker and runner were real containers of the built images.
    const started = await startedContainers(cluster, since);
    for (const [image, container] of [
      [images.built.images.drover, "controller"],
      [images.built.images.drover, "worker"],
      [images.built.images.runner, "runner"],
    ] as const)
      assertStarted(started, image, container);
  }
  // Jobs carry the controller's stable name, not its pod's: a replaced pod finds them again.
  const jobs = (await kube(cluster, "GET", `/apis/batch/v1/namespaces/${ns}/jobs`)).body.items as any[];
  assert.ok(
    jobs.length >= 2 && jobs.every((j) => j.metadata.labels["drover.dev/controller"] === "drv-controller"),
    JSON.stringify(jobs.map((j) => j.metadata.labels)),
  );
}

/** The component's controller always listens on 8080 (pods share this machine's network here): one install at a time. */
async function remove(ns: string): Promise<void> {
  // Forced: the controller's grace period is the component's (minutes, to drain its runs).
  await kube(cluster, "DELETE", `/apis/apps/v1/namespaces/${ns}/deployments`);
  await kube(cluster, "DELETE", `/api/v1/namespaces/${ns}/pods?gracePeriodSeconds=0`);
  await kube(cluster, "DELETE", `/api/v1/namespaces/${ns}`);
  await until(
    `namespace ${ns} gone`,
    () => kube(cluster, "GET", `/api/v1/namespaces/${ns}`),
    (r) => r.status === 404,
    30_000,
  ).catch(() => undefined);
}

test("the Pulumi component's job-mode objects, applied in a restricted namespace with a compute quota: admitted, Ready through probes, examples/hello completes", async () => {
  try {
    await installAndRun("pulumi-restricted", "restricted");
  } finally {
    await remove("pulumi-restricted");
  }
});

test("the Pulumi component's job-mode objects without PodSecurity: the UID-1000 worker reads its 0400 job Secret (fsGroup) and examples/hello completes", async () => {
  try {
    await installAndRun("pulumi-open", "privileged");
  } finally {
    await remove("pulumi-open");
  }
});
