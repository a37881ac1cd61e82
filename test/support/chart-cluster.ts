// What the chart and deploy tests share when they install Drover on the test cluster:
// the drover image mapped to this checkout, kubectl and helm against the cluster, and
// manifests applied in the order `helm install` uses.
import assert from "node:assert/strict";
import { spawn } from "node:child_process";
import { chmodSync, mkdirSync, writeFileSync } from "node:fs";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";
import { droverBin } from "./processes.js";
import { kube, until, type startTestCluster, type TestCluster } from "../kube/cluster.js";
import { ensureImages, podmanOk, podmanUnavailable, type BuiltImages } from "./podman.js";
import type { TestReleaseServer } from "./engine-releases.js";
import { helmTemplate } from "./helm.js";

/** The repository root (this file runs from test/dist/support). */
export const repo = join(dirname(fileURLToPath(import.meta.url)), "..", "..", "..");

/**
 * Probe pacing for the charts' pods on the test cluster. Readiness at a tenth of its real period:
 * a pod's first probe comes before its process listens, and at the real 10 s period every wait
 * for Ready waited up to 10 s more. Liveness (and startup) at 4x their period: a container that
 * takes more than ~20 s to answer on a machine at load 20+ was killed by the charts' liveness
 * probe (period 10 s, 3 failures) and never became Ready; now it has ~80 s.
 */
export const chartProbeTimings = { probeSecondMs: 4000, readinessProbeSecondMs: 100 };

/** Test-cluster back-offs short enough for chart installs to settle quickly, long enough to see a crash loop. */
export const chartTimings = {
  imagePullBackoffMs: 150,
  crashLoopBackoffMs: 500,
  configRetryMs: 100,
  podBackoffMs: 100,
  namespaceRetryMs: 20,
  ...chartProbeTimings,
};

/** The image name the charts and the Pulumi component use for the agent at tag `test`. */

export const droverImage = "ghcr.io/drover-dev/drover:test";

/**
 * The startTestCluster options that make `droverImage` run this checkout: a `drover` shim on
 * the pods' PATH (in test/dist/.bin), as the real image has one, and a stand-in for the image's
 * /usr/bin/tini (it execs its command: no init process is needed for a host process).
 */
export function droverImageOptions(): {
  images: Record<string, { entrypoint: string[]; paths: string[]; executables: Record<string, string> }>;
  baseEnv: Record<string, string>;
} {
  const bin = join(repo, "test", "dist", ".bin");
  mkdirSync(bin, { recursive: true });
  writeFileSync(join(bin, "drover"), `#!/bin/sh\nexec "${process.execPath}" "${droverBin}" "$@"\n`);
  chmodSync(join(bin, "drover"), 0o755);
  writeFileSync(join(bin, "tini"), `#!/bin/sh\n[ "$1" = "--" ] && shift\nexec "$@"\n`);
  chmodSync(join(bin, "tini"), 0o755);
  return {
    images: {
      [droverImage]: {
        entrypoint: ["/usr/bin/tini", "--", "drover"],
        paths: [repo],
        executables: { "/usr/bin/tini": join(bin, "tini") },
      },
    },
    baseEnv: { PATH: `${bin}:${process.env.PATH ?? ""}`, HOME: "/root" },
  };
}

/** The image name the charts and the Pulumi component use for runners at tag `test`. */
export const runnerImage = "ghcr.io/drover-dev/drover-runner:test";

/** How a chart test's cluster runs `droverImage` and `runnerImage`, and what a run pod's runner needs. */
export interface ChartImages {
  /** startTestCluster options (images, and podman or the shim's PATH). */
  options: Pick<Parameters<typeof startTestCluster>[0] & object, "images" | "baseEnv" | "podman">;
  /** The locally built images, when podman runs them; undefined: the host-process shim. */
  built: BuiltImages | undefined;
  /**
   * Environment for the runner container: with the shim it runs on the host, so it is given the
   * host's exec-loop path and an empty terraform CLI config; the real runner image has its own.
   */
  runnerEnv: Record<string, string>;
  /** DROVER_AGENT_EXEC_LOOP_PATH for the controller with the shim (the repository's copy); none with the real image. */
  execLoopPath: string | undefined;
}

/**
 * The locally built drover and runner images as real containers (the test cluster's podman mode)
 * where this machine can run them, else the host-process shim of droverImageOptions().
 * `runnerMounts`: host paths the node mounts read-only into runner containers at their own paths
 * (the shim's runners see the host's files already).
 */
export async function chartImages(shared: string, opts: { runnerMounts?: string[] } = {}): Promise<ChartImages> {
  if (podmanUnavailable() === undefined) {
    const built = await ensureImages();
    const runner = { podman: built.images.runner, ...(opts.runnerMounts ? { podmanMounts: opts.runnerMounts } : {}) };
    return {
      options: {
        podman: { env: built.env },
        images: { [droverImage]: { podman: built.images.drover }, [runnerImage]: runner },
      },
      built,
      runnerEnv: { CHECKPOINT_DISABLE: "1" },
      execLoopPath: undefined,
    };
  }
  mkdirSync(shared, { recursive: true });
  const tfrc = join(shared, "runner.tfrc");
  writeFileSync(tfrc, "");
  return {
    options: droverImageOptions(),
    built: undefined,
    runnerEnv: { TF_CLI_CONFIG_FILE: tfrc, CHECKPOINT_DISABLE: "1" },
    execLoopPath: join(repo, "packages", "agent", "exec-loop", "exec-loop.sh"),
  };
}

/** The task.runner and task.execLoopPath values of agent-job and agent-k8s that run task pods' runners as `images` says. */
export function runnerValues(images: ChartImages): string[] {
  return [
    "--set",
    `task.runner.image=${runnerImage}`,
    ...(images.execLoopPath ? ["--set", `task.execLoopPath=${images.execLoopPath}`] : []),
    ...Object.entries(images.runnerEnv).flatMap(([name, value]) => [
      "--set-string",
      `task.runner.extraEnv.${name}=${value}`,
    ]),
  ];
}

/**
 * agent-local's values that make its agent download terraform from `releases` and trust their
 * test signing key: the drover image carries no terraform (decision 0023). The host-process shim
 * needs none (it finds the host's terraform on PATH).
 */
export function localEngineValues(images: ChartImages, releases: TestReleaseServer): string[] {
  if (!images.built) return [];
  return [
    "--set",
    `agent.engines.terraformReleasesUrl=${releases.base("terraform")}`,
    "--set-file",
    `agent.engines.signingKeys=${releases.keyFile}`,
    "--set",
    `agent.engines.trustedFingerprints=${releases.fingerprint}`,
  ];
}

/** With the built images, asserts that each `[image, container]` ran as a real container of cluster `c` since `since`. */
export async function assertRanFromImages(
  c: TestCluster,
  images: ChartImages,
  since: Date,
  containers: Array<["drover" | "runner", string]>,
): Promise<void> {
  if (!images.built) return;
  const started = await startedContainers(c, since);
  for (const [image, container] of containers) assertStarted(started, images.built.images[image], container);
}

/**
 * The podman containers cluster `c` started since `since`, as `<image> <container name>` lines.
 * Filtered by the cluster's own id: other test files' clusters run at the same time.
 */
export async function startedContainers(c: TestCluster, since: Date): Promise<string> {
  return podmanOk([
    "events",
    "--stream=false",
    "--since",
    since.toISOString(),
    "--filter",
    "event=start",
    "--filter",
    `label=dev.drover.kube-test-cluster.id=${c.id}`,
    "--format",
    "{{.Image}} {{.Name}}",
  ]);
}

/** Asserts that a real container of a pod's `container` (named `ktc-…-<container>-…`) started from `image`. */
export function assertStarted(started: string, image: string, container: string): void {
  assert.match(
    started,
    new RegExp(`^${image.replace(/[.*+?^${}()|[\]\\]/g, "\\$&")} ktc-\\S*-${container}-\\d+-`, "m"),
    `${container} ran from ${image}:\n${started}`,
  );
}

/**
 * kubectl against the cluster with stdout and stderr in one text. Spawned, never spawnSync: the
 * cluster is served by this very process. No time limit of its own (drain and rollout carry theirs).
 */
export function kubectlOut(c: TestCluster, args: string[], input?: string): Promise<{ code: number; out: string }> {
  return new Promise((resolve) => {
    const child = spawn("kubectl", args, { env: { ...process.env, ...c.kubectlEnv() } });
    let out = "";
    child.stdout.on("data", (d: Buffer) => (out += d.toString()));
    child.stderr.on("data", (d: Buffer) => (out += d.toString()));
    child.on("exit", (code) => resolve({ code: code ?? 1, out }));
    child.stdin.end(input ?? "");
  });
}

/** Waits until the AgentTask CRD is served (in `ns`, or cluster-wide without one). */
export async function agentTasksServed(c: TestCluster, ns?: string): Promise<void> {
  const path =
    ns === undefined ? "/apis/drover.dev/v1alpha1/agenttasks" : `/apis/drover.dev/v1alpha1/namespaces/${ns}/agenttasks`;
  await until(
    "the CRD served",
    () => kube(c, "GET", path),
    (r) => r.status === 200,
    30_000,
  );
}

/** Applies the AgentTask CRD the charts ship, as `helm install` applies it first, and waits until it is served. */
export async function applyAgentTaskCrd(c: TestCluster, ns?: string): Promise<void> {
  const r = await kubectlOut(c, ["apply", "-f", join(repo, "deploy", "kubernetes", "agenttasks.drover.dev.yaml")]);
  assert.equal(r.code, 0, r.out);
  await agentTasksServed(c, ns);
}

/** Applies rendered manifests as `helm install` would: CRDs first and served, then the rest into `ns`. */
export async function applyRendered(
  c: TestCluster,
  ns: string,
  rendered: string,
): Promise<{ code: number; out: string }> {
  const docs = rendered.split(/^---$/m).filter((d) => /\bkind:/.test(d));
  const crds = docs.filter((d) => /^kind: CustomResourceDefinition$/m.test(d));
  const rest = docs.filter((d) => !crds.includes(d));
  let out = "";
  if (crds.length > 0) {
    const r = await kubectlOut(c, ["apply", "-f", "-"], crds.join("\n---\n"));
    out += r.out;
    if (r.code !== 0) return { code: r.code, out };
    await agentTasksServed(c, ns);
  }
  const r = await kubectlOut(c, ["apply", "-n", ns, "-f", "-"], rest.join("\n---\n"));
  return { code: r.code, out: out + r.out };
}

/**
 * `helm template` of charts/<chart> into `ns`. The release is named after the chart (`d-job`
 * for agent-job) with its CRDs included unless `release`/`crds` say otherwise.
 */
export function template(
  chart: string,
  ns: string,
  args: string[],
  opts: { release?: string; crds?: boolean } = {},
): string {
  const release = opts.release ?? chart.replace("agent-", "d-");
  const crds = (opts.crds ?? true) ? ["--include-crds"] : [];
  return helmTemplate(["template", release, join(repo, "charts", chart), "--namespace", ns, ...crds, ...args]);
}

/**
 * `helm template` of agent-k8s with the controller's health port at `controllerPort` and the
 * worker DaemonSet's at the next one: every pod here shares this machine's network (the test
 * cluster has no network namespaces), so the two may not listen on one port as on a real node.
 */
export function templateAgentK8s(ns: string, controllerPort: number, args: string[]): string {
  const rendered = template("agent-k8s", ns, ["--set", `agent.healthPort=${controllerPort}`, ...args]);
  return rendered
    .split(/^---$/m)
    .map((d) => (/^kind: DaemonSet$/m.test(d) ? d.replaceAll(String(controllerPort), String(controllerPort + 1)) : d))
    .join("---");
}

/** Creates namespace `name`, enforcing the PodSecurity `level` when one is given. */
export async function namespace(
  c: TestCluster,
  name: string,
  level?: "restricted" | "baseline" | "privileged",
): Promise<void> {
  const labels = level ? { "pod-security.kubernetes.io/enforce": level } : undefined;
  const r = await kube(c, "POST", "/api/v1/namespaces", { metadata: { name, ...(labels ? { labels } : {}) } });
  assert.equal(r.status, 201, JSON.stringify(r.body));
}

/** The Prometheus Operator's ServiceMonitor and PodMonitor CRDs, so charts with their monitors on apply. */
export async function createServiceMonitorCrd(c: TestCluster): Promise<void> {
  // agent-k8s renders a PodMonitor for its node workers next to the ServiceMonitor.
  for (const kind of ["ServiceMonitor", "PodMonitor"]) {
    const singular = kind.toLowerCase();
    await kube(c, "POST", "/apis/apiextensions.k8s.io/v1/customresourcedefinitions", {
      apiVersion: "apiextensions.k8s.io/v1",
      kind: "CustomResourceDefinition",
      metadata: { name: `${singular}s.monitoring.coreos.com` },
      spec: {
        group: "monitoring.coreos.com",
        scope: "Namespaced",
        names: { kind, plural: `${singular}s`, singular, listKind: `${kind}List` },
        versions: [
          {
            name: "v1",
            served: true,
            storage: true,
            schema: { openAPIV3Schema: { type: "object", "x-kubernetes-preserve-unknown-fields": true } },
          },
        ],
      },
    });
  }
}

/** Whether a pod's Ready condition is True. */
export const isReady = (p: any): boolean =>
  (p?.status?.conditions ?? []).some((c: any) => c.type === "Ready" && c.status === "True");
