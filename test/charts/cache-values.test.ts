import assert from "node:assert/strict";
import { spawnSync } from "node:child_process";
import { dirname, join } from "node:path";
import { fileURLToPath, pathToFileURL } from "node:url";
import { describe, test } from "node:test";
import { parseAllDocuments } from "yaml";
import { buildJob, loadNodeWorkerSettings, loadWorkerSettings } from "@drover/agent/kubernetes";
import { helmTemplate } from "../support/helm.js";

// Every cache value of the job charts (agent.providerCache.*, agent.moduleCache.*,
// persistence.cache.*) reaches what it names, and what it reaches is read as the worker reads
// it; the controller keeps the runner's cache mount read-only whatever a template says.
// test/charts/cache-cluster.test.ts runs them on the test cluster.

const repo = join(dirname(fileURLToPath(import.meta.url)), "..", "..", "..");
const { tools } = (await import(pathToFileURL(join(repo, "scripts", "tools.mjs")).href)) as {
  tools(): { helm: string };
};
const token = "drv_p_eyJ1cmwiOiJodHRwczovL2QuZXhhbXBsZSIsInBvb2wiOiJwIn0.c2VjcmV0";

type Obj = { kind: string; metadata: { name: string }; spec?: any };
function render(chart: string, args: string[]): Obj[] {
  const out = helmTemplate([
    "template",
    "rel",
    join(repo, "charts", chart),
    "--namespace",
    "drover",
    "--set",
    `agent.token=${token}`,
    ...args,
  ]);
  return parseAllDocuments(out)
    .map((d) => d.toJSON() as Obj | null)
    .filter((o): o is Obj => o !== null);
}
const task = (objects: Obj[]) => objects.find((o) => o.kind === "AgentTask")!.spec.jobTemplate.template.spec;
const envOf = (c: any): Record<string, string> =>
  Object.fromEntries((c.env ?? []).filter((e: any) => "value" in e).map((e: any) => [e.name, e.value]));
const jobCharts: Array<[string, string[]]> = [
  ["agent-job", []],
  ["agent-k8s", ["--set", "jobWorker=true"]],
];

describe("agent.providerCache and agent.moduleCache", () => {
  for (const [chart, extra] of jobCharts) {
    test(`${chart}: the task pod's worker gets them, and reads them as set`, () => {
      // An emptyDir large enough that the limits pass unscaled (scaling: below).
      const spec = task(
        render(chart, [
          ...extra,
          "--set",
          "persistence.cache.emptyDir.sizeLimit=100Gi",
          "--set",
          "agent.providerCache.enabled=false",
          "--set",
          "agent.providerCache.sizeLimit=3Gi",
          "--set",
          "agent.moduleCache.enabled=true",
          "--set",
          "agent.moduleCache.sizeLimit=700Mi",
          "--set",
          "agent.binaryCache.sizeLimit=300Mi",
          "--set",
          "agent.engines.terraformReleasesUrl=https://mirror.example/terraform",
          "--set",
          "agent.engines.pathFallback=false",
        ]),
      );
      const worker = spec.containers.find((c: any) => c.name === "worker");
      const env = envOf(worker);
      assert.deepEqual(
        [
          env.DROVER_AGENT_PROVIDER_CACHE_ENABLED,
          env.DROVER_AGENT_PROVIDER_CACHE_SIZE_LIMIT_MB,
          env.DROVER_AGENT_MODULE_CACHE_ENABLED,
          env.DROVER_AGENT_MODULE_CACHE_SIZE_LIMIT_MB,
        ],
        ["false", "3072", "true", "700"],
      );
      const read = loadWorkerSettings({ ...env, DROVER_URL: "http://d.example" }).caches;
      assert.deepEqual(read, {
        cacheDir: "/var/lib/drover/cache",
        providerCacheEnabled: false,
        providerCacheSizeLimitMb: 3072,
        moduleCacheEnabled: true,
        moduleCacheSizeLimitMb: 700,
        binaryCacheSizeLimitMb: 300,
        // The fetch guards keep their safe defaults: the charts do not pass them (N4, N14).
        moduleCacheLocalSources: false,
        cacheAllowMetadataAddresses: false,
        engines: { ...read.engines, terraformReleasesUrl: "https://mirror.example/terraform", pathFallback: false },
      });
    });
  }

  test("agent-k8s node mode: each node's worker gets them and keeps its cache in <dataHome>/cache", () => {
    const objects = render("agent-k8s", [
      "--set",
      "agent.providerCache.sizeLimit=2Gi",
      "--set",
      "agent.moduleCache.enabled=true",
      "--set",
      "workerDaemonSet.dataHome=/mnt/drover",
    ]);
    const ds = objects.find((o) => o.kind === "DaemonSet")!;
    const env = envOf(ds.spec.template.spec.containers[0]);
    assert.equal(env.DROVER_AGENT_PROVIDER_CACHE_SIZE_LIMIT_MB, "2048");
    const read = loadNodeWorkerSettings({
      ...env,
      DROVER_AGENT_NODE_NAME: "n",
      DROVER_AGENT_CONTROLLER_NAME: "c",
    }).caches;
    // The node's cache is on its hostPath: nothing is scaled to fit an emptyDir.
    assert.deepEqual(read, {
      cacheDir: "/mnt/drover/cache",
      providerCacheEnabled: true,
      providerCacheSizeLimitMb: 2048,
      moduleCacheEnabled: true,
      moduleCacheSizeLimitMb: 2048,
      binaryCacheSizeLimitMb: 5120,
      moduleCacheLocalSources: false,
      cacheAllowMetadataAddresses: false,
      engines: read.engines,
    });
  });

  for (const [chart, extra] of [...jobCharts, ["agent-local", []] as [string, string[]]]) {
    test(`${chart}: on the cache's own emptyDir the soft limits of the caches in use are scaled to fit 4/5 of it together; on a claim they are as set`, () => {
      const workerEnv = (args: string[]): Record<string, string> => {
        const objects = render(chart, [...extra, ...args]);
        if (chart === "agent-local")
          return envOf(
            objects
              .find((o) => o.kind === "Deployment")!
              .spec.template.spec.containers.find((c: any) => c.name === "agent"),
          );
        return envOf(task(objects).containers.find((c: any) => c.name === "worker"));
      };
      const limits = (env: Record<string, string>) =>
        [
          env.DROVER_AGENT_PROVIDER_CACHE_SIZE_LIMIT_MB,
          env.DROVER_AGENT_MODULE_CACHE_SIZE_LIMIT_MB,
          env.DROVER_AGENT_BINARY_CACHE_SIZE_LIMIT_MB,
        ].map(Number);
      const sizes = [
        "--set",
        "persistence.cache.emptyDir.sizeLimit=1Gi",
        "--set",
        "agent.providerCache.sizeLimit=16Gi",
        "--set",
        "agent.moduleCache.sizeLimit=2Gi",
        "--set",
        "agent.binaryCache.sizeLimit=5Gi",
      ];
      // Defaults of the job charts: a 1Gi emptyDir, 16Gi of providers, 5Gi of engines (modules off).
      const [p, m, b] = limits(workerEnv(sizes));
      assert.ok(p! + b! <= (1024 * 4) / 5, `providers ${p} + engines ${b} fit 4/5 of 1Gi`);
      assert.deepEqual(
        [p, b],
        [Math.floor((16384 * 819) / 21504), Math.floor((5120 * 819) / 21504)],
        "scaled in proportion",
      );
      assert.equal(
        m,
        Math.floor((2048 * 819) / 21504),
        "a cache that is off is not counted, but its limit is scaled alike",
      );
      const withModules = limits(workerEnv([...sizes, "--set", "agent.moduleCache.enabled=true"]));
      assert.ok(withModules[0]! + withModules[1]! + withModules[2]! <= 819);
      // Limits that fit are left alone.
      assert.deepEqual(
        limits(workerEnv([...sizes, "--set", "persistence.cache.emptyDir.sizeLimit=100Gi"])),
        [16384, 2048, 5120],
      );
      const claim =
        chart === "agent-local" ? ["--set", "persistence.enabled=true"] : ["--set", "persistence.cache.enabled=true"];
      assert.deepEqual(limits(workerEnv([...sizes, ...claim])), [16384, 2048, 5120]);
      // What the worker reads: limits its caches' soft limits act on.
      if (chart !== "agent-local")
        assert.equal(
          loadWorkerSettings({ ...workerEnv(sizes), DROVER_URL: "http://d.example" }).caches.providerCacheSizeLimitMb,
          p,
        );
    });
  }

  test("a size that is not a Kubernetes quantity, or is under 1Mi, is refused at render time", () => {
    const refused = (value: string) =>
      spawnSync(
        tools().helm,
        [
          "template",
          "rel",
          join(repo, "charts", "agent-job"),
          "--set",
          `agent.token=${token}`,
          "--set",
          `agent.providerCache.sizeLimit=${value}`,
        ],
        { encoding: "utf8" },
      );
    const r = refused("10GB");
    assert.notEqual(r.status, 0);
    assert.match(r.stderr, /agent.providerCache.sizeLimit must be a Kubernetes quantity such as 20Gi/);
    const small = refused("500k");
    assert.notEqual(small.status, 0);
    assert.match(small.stderr, /agent.providerCache.sizeLimit must be at least 1Mi, got "500k"/);
  });

  for (const [chart, extra] of [...jobCharts, ["agent-local", []] as [string, string[]]]) {
    const claim =
      chart === "agent-local" ? ["--set", "persistence.enabled=true"] : ["--set", "persistence.cache.enabled=true"];
    const cacheEnv = (args: string[]): Record<string, string> => {
      const objects = render(chart, [...extra, ...args]);
      if (chart === "agent-local")
        return envOf(
          objects
            .find((o) => o.kind === "Deployment")!
            .spec.template.spec.containers.find((c: any) => c.name === "agent"),
        );
      return envOf(task(objects).containers.find((c: any) => c.name === "worker"));
    };

    test(`${chart}: every form of a Kubernetes quantity is read as a size (decimal and binary suffixes, plain bytes, exponents, fractions)`, () => {
      const forms: Array<[string, number]> = [
        ["10G", 9536],
        ["1.5Gi", 1536],
        ["1073741824", 1024],
        ["5e9", 4768],
        ["2000M", 1907],
        ["1048576Ki", 1024],
        ["0.5Ti", 524288],
        ["3000000k", 2861],
        ["1T", 953674],
      ];
      for (const [value, mb] of forms) {
        const env = cacheEnv([...claim, "--set-string", `agent.providerCache.sizeLimit=${value}`]);
        assert.equal(env.DROVER_AGENT_PROVIDER_CACHE_SIZE_LIMIT_MB, String(mb), value);
      }
    });

    test(`${chart}: on a claim the cache emptyDir's sizeLimit is not read, so any quantity (or an old value) renders`, () => {
      for (const value of ["10G", "1.5Gi", "20Gi"]) {
        const env = cacheEnv([...claim, "--set", `persistence.cache.emptyDir.sizeLimit=${value}`]);
        assert.equal(env.DROVER_AGENT_BINARY_CACHE_SIZE_LIMIT_MB, "5120", `${value}: nothing is scaled on a claim`);
      }
    });

    test(`${chart}: a cache emptyDir sized 10G or 1.5Gi scales the caches to fit 4/5 of its MiB`, () => {
      const sizes = ["--set", "agent.providerCache.sizeLimit=16Gi", "--set", "agent.binaryCache.sizeLimit=5Gi"];
      for (const [value, mib] of [
        ["10G", 9536],
        ["1.5Gi", 1536],
      ] as const) {
        const env = cacheEnv([...sizes, "--set", `persistence.cache.emptyDir.sizeLimit=${value}`]);
        const room = Math.floor((mib * 4) / 5);
        assert.deepEqual(
          [env.DROVER_AGENT_PROVIDER_CACHE_SIZE_LIMIT_MB, env.DROVER_AGENT_BINARY_CACHE_SIZE_LIMIT_MB].map(Number),
          [Math.floor((16384 * room) / 21504), Math.floor((5120 * room) / 21504)],
          value,
        );
      }
    });
  }
});

describe("persistence.cache", () => {
  for (const [chart, extra] of jobCharts) {
    test(`${chart}: off, each task pod has its own cache emptyDir of emptyDir.sizeLimit; the runner mounts it read-only`, () => {
      const spec = task(render(chart, [...extra, "--set", "persistence.cache.emptyDir.sizeLimit=3Gi"]));
      assert.deepEqual(
        spec.volumes.find((v: any) => v.name === "drover-cache"),
        { name: "drover-cache", emptyDir: { sizeLimit: "3Gi" } },
      );
      const mount = (name: string) =>
        spec.containers.find((c: any) => c.name === name).volumeMounts.find((m: any) => m.name === "drover-cache");
      assert.equal(mount("worker").readOnly, undefined);
      assert.equal(mount("runner").readOnly, true);
      assert.equal(
        mount("runner").mountPath,
        mount("worker").mountPath,
        "at the same path: the run's CLI configuration names it",
      );
    });

    test(`${chart}: on, one claim (created, or claimName) shared by task pods, with its subPath in both mounts`, () => {
      const objects = render(chart, [
        ...extra,
        "--set",
        "persistence.cache.enabled=true",
        "--set",
        "persistence.cache.persistentVolumeClaim.storage=7Gi",
        "--set",
        "persistence.cache.persistentVolumeClaim.accessMode=ReadWriteOnce",
        "--set",
        "persistence.cache.persistentVolumeClaim.subPath=drover",
      ]);
      const pvc = objects.find((o) => o.kind === "PersistentVolumeClaim")!;
      assert.deepEqual([pvc.spec.resources.requests.storage, pvc.spec.accessModes], ["7Gi", ["ReadWriteOnce"]]);
      const spec = task(objects);
      assert.deepEqual(spec.volumes.find((v: any) => v.name === "drover-cache").persistentVolumeClaim, {
        claimName: pvc.metadata.name,
      });
      for (const c of spec.containers.filter((x: any) => x.name === "worker" || x.name === "runner"))
        assert.equal(c.volumeMounts.find((m: any) => m.name === "drover-cache").subPath, "drover", c.name);
      const existing = render(chart, [
        ...extra,
        "--set",
        "persistence.cache.enabled=true",
        "--set",
        "persistence.cache.persistentVolumeClaim.claimName=mine",
      ]);
      assert.equal(existing.filter((o) => o.kind === "PersistentVolumeClaim").length, 0);
      assert.equal(
        task(existing).volumes.find((v: any) => v.name === "drover-cache").persistentVolumeClaim.claimName,
        "mine",
      );
    });
  }

  test("agent-k8s node mode refuses persistence.cache.enabled: each node keeps its own cache in the data home", () => {
    const r = spawnSync(
      tools().helm,
      [
        "template",
        "rel",
        join(repo, "charts", "agent-k8s"),
        "--set",
        `agent.token=${token}`,
        "--set",
        "persistence.cache.enabled=true",
      ],
      { encoding: "utf8" },
    );
    assert.notEqual(r.status, 0);
    assert.match(r.stderr, /persistence.cache.enabled applies to jobWorker: true/);
  });
});

describe("the controller's Job", () => {
  const assignment = {
    jobId: "j",
    runId: "r",
    phase: "plan",
    attempt: 1,
    workspace: { id: "w" },
  } as unknown as Parameters<typeof buildJob>[0];
  const settings = {
    namespace: "ns",
    controllerName: "c",
    serverUrl: "http://s",
    workerImage: "w",
    execLoopPath: "/e",
    stopAction: "graceful",
    gracePeriodSeconds: 120,
    activeDeadlineSeconds: 60,
    ttlSecondsAfterFinished: 60,
  };

  test("the runner's cache mount is read-only even when the template mounts it writable; the worker is told where it is", () => {
    const template = {
      template: {
        spec: {
          volumes: [{ name: "drover-cache", persistentVolumeClaim: { claimName: "shared" } }],
          containers: [
            { name: "worker", volumeMounts: [{ name: "drover-cache", mountPath: "/cache", subPath: "x" }] },
            {
              name: "runner",
              image: "r",
              volumeMounts: [{ name: "drover-cache", mountPath: "/cache", readOnly: false }],
            },
          ],
        },
      },
    };
    const pod = buildJob(assignment, template, settings).spec!.template.spec!;
    const runner = pod.containers.find((c) => c.name === "runner")!;
    const worker = pod.containers.find((c) => c.name === "worker")!;
    assert.deepEqual(
      runner.volumeMounts!.filter((m) => m.name === "drover-cache"),
      [{ name: "drover-cache", mountPath: "/cache", subPath: "x", readOnly: true }],
    );
    assert.equal(worker.env!.find((e) => e.name === "DROVER_AGENT_CACHE_DIR")!.value, "/cache");
  });

  test("without a cache volume in the template the pod gets a 1Gi emptyDir, read-only in the runner", () => {
    const pod = buildJob(assignment, undefined, settings).spec!.template.spec!;
    assert.deepEqual(
      pod.volumes!.find((v) => v.name === "drover-cache"),
      { name: "drover-cache", emptyDir: { sizeLimit: "1Gi" } },
    );
    assert.equal(
      pod.containers.find((c) => c.name === "runner")!.volumeMounts!.find((m) => m.name === "drover-cache")!.readOnly,
      true,
    );
  });

  test("node mode: run pods mount the node's cache read-only at <home>/cache", () => {
    const pod = buildJob(assignment, undefined, { ...settings, nodeHome: "/home/d" }).spec!.template.spec!;
    assert.deepEqual(
      pod.containers[0]!.volumeMounts!.find((m) => m.subPath === "cache"),
      { name: "drover-home", mountPath: "/home/d/cache", subPath: "cache", readOnly: true },
    );
  });
});
