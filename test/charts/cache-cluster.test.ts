import assert from "node:assert/strict";
import { mkdirSync, mkdtempSync, readdirSync, readFileSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { after, before, test } from "node:test";
import { routes } from "@drover/protocol";
import { runLog, startStack, writeConfig, type Stack } from "../support/stack.js";
import { providerConfig, startProviderRegistry, type TestRegistry } from "../support/provider-registry.js";
import {
  applyRendered,
  assertRanFromImages,
  chartImages,
  kubectlOut,
  namespace,
  repo,
  runnerValues,
  template,
  type ChartImages,
} from "../support/chart-cluster.js";
import { eventually, fastTimings, startTestCluster, type TestCluster } from "../kube/cluster.js";

// The provider cache in Kubernetes, through the installed charts on the test cluster:
// agent-k8s in node mode (each node's worker fills `<dataHome>/cache`, every run pod of the
// node mounts it read-only) and agent-job with `persistence.cache.enabled` (one claim shared by
// every task pod: their workers fill it, each guarded by the store's cross-process locks; the
// runners mount it read-only). Runs trying to write into the cache are refused by the filesystem.
// DROVER_TEST_CACHE_ROUNDS=10 repeats the node-mode round. Where podman runs here,
// workers and agents are containers of the locally built drover image and run pods' runners of
// the runner image (chartImages); the registry's CA reaches both through agent.caBundle, and the
// test providers (Node scripts behind launchers, with their plugin TLS key pair) need the host's
// `node` and this checkout, which the test cluster's node mounts read-only into runner containers.

const three = [
  { type: "alpha", version: "1.0.0" },
  { type: "beta", version: "2.1.0" },
  { type: "gamma", version: "0.3.0" },
];

/**
 * Runs racing for the node's empty cache at once. Each is a pod of two containers here, so a wide
 * round costs minutes of CPU; four race as the twelve did (the store's own test races 12 inits).
 */
const nodeRound = 4;

let cluster: TestCluster;
let stack: Stack;
let registry: TestRegistry;
let scratch: string;
let images: ChartImages;
/** The node-mode worker's data home (the chart's prepare step makes it), removed after the cluster. */
let nodeHome: string | undefined;

before(
  async () => {
    scratch = join(repo, "test", "dist", ".chart-cache");
    mkdirSync(scratch, { recursive: true });
    images = await chartImages(scratch, { runnerMounts: [repo, process.execPath] });
    cluster = await startTestCluster({ timings: fastTimings, hostPaths: "real", ...images.options });
    stack = await startStack();
    // Runners have their own /tmp (an emptyDir, or the runner image's): the registry's files (the
    // launchers and the providers' TLS key pair they name) must live in the checkout runners see.
    const tmp = process.env.TMPDIR;
    process.env.TMPDIR = scratch;
    try {
      registry = await startProviderRegistry(three.map((p) => ({ type: p.type, versions: [p.version] })));
    } finally {
      if (tmp === undefined) delete process.env.TMPDIR;
      else process.env.TMPDIR = tmp;
    }
  },
  { timeout: 20 * 60_000 },
);

after(async () => {
  await stack?.stop();
  await cluster?.close();
  await registry?.close();
  if (scratch) rmSync(scratch, { recursive: true, force: true });
  // Once the cluster is closed: no worker writes into it any more.
  if (nodeHome) rmSync(nodeHome, { recursive: true, force: true });
});

/** The chart values both installs share: the test images, the registry's CA for workers and runners. */
function common(): string[] {
  return [
    "--set",
    `agent.url=${stack.server.url}`,
    "--set",
    "image.tag=test",
    // Pods share this machine's network here: no health port, so no two processes bind one.
    "--set",
    "agent.healthPort=0",
    "--set-file",
    `agent.caBundle=${registry.caFile}`,
    ...runnerValues(images),
  ];
}

/** A configuration needing the three providers whose plan shows the h1 hashes of its lock file. */
function lockShowingConfig(workspace: string): string {
  return `${providerConfig(registry, three, workspace)}\noutput "locked" { value = regexall("h1:[A-Za-z0-9+/=]+", file(".terraform.lock.hcl")) }\n`;
}

/** Starts `n` plan-only runs at once in fresh workspaces; checks each lock file and that the providers came from the cache. */
async function round(prefix: string, n: number, diagnose: () => Promise<string>): Promise<void> {
  const runs = await Promise.all(
    Array.from({ length: n }, async (_, i) => {
      const ws = `${prefix}-${i}`;
      assert.equal(
        (await stack.server.api(routes.createWorkspace, { body: { name: ws, pool: stack.pool } })).status,
        201,
      );
      return stack.startRun(writeConfig(scratch, ws, { "main.tf": lockShowingConfig(ws) }), ws, ["--plan-only"]);
    }),
  );
  const expected = three.map((p) => registry.h1(p.type, p.version)).sort();
  for (const runId of runs) {
    const run = await stack
      .waitForRun(runId, ["planned_and_finished", "errored", "failed"], 600_000)
      .catch(async (e: Error) => assert.fail(`${e.message}\n${await diagnose()}`));
    const log = await runLog(stack.server, runId, "plan");
    assert.equal(run.status, "planned_and_finished", `${run.errorMessage}\n${log}\n${await diagnose()}`);
    assert.match(log, /providers from the agent's cache: /);
    const locked = [...new Set([...log.matchAll(/"(h1:[A-Za-z0-9+/=]+)"/g)].map((m) => m[1] as string))].sort();
    assert.deepEqual(locked, expected, `run ${runId}: the lock file's h1 hashes\n${log}`);
  }
}

/**
 * A plan+apply in `pool` whose provisioner tries to write into the cache, which the runner sees
 * at `runnerCacheDir` and this process at `localCacheDir`; each attempt must be refused.
 */
async function writeAttempts(
  workspace: string,
  pool: string,
  runnerCacheDir: string,
  localCacheDir: string,
): Promise<void> {
  const rel = join("providers", "mirror", registry.host, "drover", "alpha", "1.0.0", "linux_amd64");
  const entry = join(runnerCacheDir, rel);
  const binary = "terraform-provider-alpha_v1.0.0";
  const attempts = [
    `echo planted >> ${entry}/${binary}`,
    `touch ${entry}/planted`,
    `mkdir ${join(runnerCacheDir, "providers", "mirror", "planted")}`,
    `chmod u+w ${entry}/${binary}`,
    `rm -rf ${entry}`,
  ];
  const command = attempts
    .map((c, i) => `( ${c} ) 2>/dev/null && echo WRITE${i}:ok || echo WRITE${i}:refused`)
    .join("; ");
  assert.equal(
    (await stack.server.api(routes.createWorkspace, { body: { name: workspace, pool, autoApply: true } })).status,
    201,
  );
  const dir = writeConfig(scratch, workspace, {
    "main.tf": `${providerConfig(registry, three.slice(0, 1), workspace)}\nresource "alpha_thing" "probe" {\n  input = "probe"\n  provisioner "local-exec" {\n    command = ${JSON.stringify(command)}\n  }\n}\n`,
  });
  const runId = await stack.startRun(dir, workspace, ["--auto-apply"]);
  const run = await stack.waitForRun(runId, ["applied", "errored", "failed"], 300_000);
  const log = await runLog(stack.server, runId, "apply");
  assert.equal(run.status, "applied", `${run.errorMessage}\n${log}`);
  for (let i = 0; i < attempts.length; i++)
    assert.match(log, new RegExp(`WRITE${i}:refused`), `${attempts[i]} was not refused:\n${log}`);
  const local = join(localCacheDir, rel);
  assert.ok(!readFileSync(join(local, binary), "utf8").includes("planted"));
  assert.ok(!readdirSync(local).includes("planted"));
}

test(
  "agent-k8s node mode: 4 concurrent runs needing the same 3 providers on one node all plan with correct lock files, each provider downloaded once; runs cannot write the node's cache",
  { timeout: 20 * 60_000 },
  async () => {
    const ns = "drover-cache-nodes";
    const since = new Date();
    await namespace(cluster, ns, "privileged");
    const home = mkdtempSync(join(tmpdir(), "drover-cache-node-"));
    rmSync(home, { recursive: true });
    nodeHome = home;
    try {
      const rendered = template(
        "agent-k8s",
        ns,
        [
          ...common(),
          "--set",
          `agent.token=${stack.poolToken}`,
          "--set",
          `agent.concurrency=${nodeRound}`,
          "--set",
          `workerDaemonSet.dataHome=${home}`,
          "--set",
          "workerDaemonSet.prepareDataHome=true",
        ],
        { release: "cache", crds: true },
      );
      const applied = await applyRendered(cluster, ns, rendered);
      assert.equal(applied.code, 0, applied.out);
      const diagnose = async () =>
        `${(await kubectlOut(cluster, ["get", "pods,events", "-n", ns, "-o", "wide"])).out}\n${(await kubectlOut(cluster, ["logs", "-n", ns, "-l", "app.kubernetes.io/component=worker", "--tail=60"])).out}`;
      await eventually(
        "the controller to register",
        async () =>
          (await stack.server.api(routes.listAgents, { query: { pool: stack.pool } })).body.items.some(
            (a: any) => a.driver === "kubernetes" && a.status !== "offline",
          ),
        60_000,
      ).catch(async (e: Error) => assert.fail(`${e.message}\n${await diagnose()}`));
      const rounds = Number(process.env.DROVER_TEST_CACHE_ROUNDS ?? "1");
      const downloadsBefore = three.map((p) => registry.downloads.get(registry.archiveName(p.type, p.version)) ?? 0);
      for (let r = 0; r < rounds; r++) await round(`node-${r}`, nodeRound, diagnose);
      three.forEach((p, i) =>
        assert.equal(
          (registry.downloads.get(registry.archiveName(p.type, p.version)) ?? 0) - (downloadsBefore[i] ?? 0),
          1,
          `${p.type} downloaded once on the node in ${rounds} round(s) of ${nodeRound} runs`,
        ),
      );
      await writeAttempts("node-write", stack.pool, join(home, "cache"), join(home, "cache"));
      await assertRanFromImages(cluster, images, since, [
        ["drover", "controller"],
        ["drover", "prepare-data-home"],
        ["drover", "worker"],
        ["drover", "drover-init"],
        ["runner", "runner"],
      ]);
    } finally {
      await kubectlOut(cluster, ["delete", "namespace", ns, "--wait=false"]);
    }
  },
);

test(
  "agent-job with persistence.cache.enabled: concurrent task pods share one claim, each provider downloaded once; runners cannot write it",
  { timeout: 20 * 60_000 },
  async () => {
    const ns = "drover-cache-job";
    const since = new Date();
    await namespace(cluster, ns, "restricted");
    await stack.server.api(routes.createPool, { body: { name: "cache-job" } });
    const token = (
      await stack.server.api(routes.createPoolToken, { params: { pool: "cache-job" }, body: { description: "job" } })
    ).body.token as string;
    const rendered = template(
      "agent-job",
      ns,
      [
        ...common(),
        "--set",
        `agent.token=${token}`,
        "--set",
        "agent.concurrency=4",
        "--set",
        "persistence.cache.enabled=true",
      ],
      { release: "cache", crds: true },
    );
    const applied = await applyRendered(cluster, ns, rendered);
    assert.equal(applied.code, 0, applied.out);
    const diagnose = async () => {
      const pods = (await kubectlOut(cluster, ["get", "pods", "-n", ns, "-o", "name"])).out
        .split("\n")
        .filter((p) => p.includes("drover-run"));
      const logs = await Promise.all(
        pods.map(
          async (p) => `${p}:\n${(await kubectlOut(cluster, ["logs", "-n", ns, p, "-c", "worker", "--tail=60"])).out}`,
        ),
      );
      return `${(await kubectlOut(cluster, ["get", "pods,events", "-n", ns, "-o", "wide"])).out}\n${logs.join("\n")}`;
    };
    await eventually(
      "the controller to register",
      async () =>
        (await stack.server.api(routes.listAgents, { query: { pool: "cache-job" } })).body.items.some(
          (a: any) => a.status !== "offline",
        ),
      60_000,
    ).catch(async (e: Error) => assert.fail(`${e.message}\n${await diagnose()}`));
    const downloadsBefore = three.map((p) => registry.downloads.get(registry.archiveName(p.type, p.version)) ?? 0);
    const runs = await Promise.all(
      Array.from({ length: 4 }, async (_, i) => {
        const ws = `job-${i}`;
        assert.equal(
          (await stack.server.api(routes.createWorkspace, { body: { name: ws, pool: "cache-job" } })).status,
          201,
        );
        return stack.startRun(writeConfig(scratch, ws, { "main.tf": lockShowingConfig(ws) }), ws, ["--plan-only"]);
      }),
    );
    for (const runId of runs) {
      const run = await stack
        .waitForRun(runId, ["planned_and_finished", "errored", "failed"], 600_000)
        .catch(async (e: Error) => assert.fail(`${e.message}\n${await diagnose()}`));
      const log = await runLog(stack.server, runId, "plan");
      assert.equal(run.status, "planned_and_finished", `${run.errorMessage}\n${log}\n${await diagnose()}`);
      assert.match(log, /providers from the agent's cache: /);
    }
    const downloads = three.map(
      (p, i) => (registry.downloads.get(registry.archiveName(p.type, p.version)) ?? 0) - (downloadsBefore[i] ?? 0),
    );
    assert.deepEqual(downloads, [1, 1, 1], `each provider downloaded once for 4 task pods\n${await diagnose()}`);
    // The test cluster keeps a claim's files in <dataDir>/pvc/<namespace>/<claim>.
    await writeAttempts(
      "job-write",
      "cache-job",
      "/var/lib/drover/cache",
      join(cluster.dataDir, "pvc", ns, "cache-agent-job-cache"),
    );
    await assertRanFromImages(cluster, images, since, [
      ["drover", "controller"],
      ["drover", "drover-init"],
      ["drover", "worker"],
      ["runner", "runner"],
    ]);
  },
);
