import type * as k8s from "@pulumi/kubernetes";

// The charts' default requests, limits and emptyDir sizes (charts/*/values.yaml), so a Pulumi
// installation is sized as a Helm one: run pods are Burstable (not BestEffort, which a quota on
// requests refuses and eviction picks first), and every writable emptyDir has a bound.
// test/deploy/pulumi-chart-parity.test.ts compares the two field by field.

type Resources = k8s.types.input.core.v1.ResourceRequirements;

/** Each process's default resources, by the container it runs in. */
export const defaultResources = {
  /** agent-local's agent: it runs terraform itself. */
  agent: {
    requests: { cpu: "500m", memory: "512Mi", "ephemeral-storage": "256Mi" },
    limits: { cpu: "2", memory: "2Gi" },
  },
  controller: { requests: { cpu: "100m", memory: "128Mi", "ephemeral-storage": "64Mi" }, limits: { memory: "512Mi" } },
  worker: { requests: { cpu: "100m", memory: "128Mi", "ephemeral-storage": "64Mi" }, limits: { memory: "512Mi" } },
  runner: { requests: { cpu: "500m", memory: "512Mi", "ephemeral-storage": "1Gi" }, limits: { memory: "2Gi" } },
  init: { requests: { cpu: "10m", memory: "16Mi", "ephemeral-storage": "16Mi" }, limits: { memory: "64Mi" } },
  nodeWorker: { requests: { cpu: "500m", memory: "512Mi", "ephemeral-storage": "64Mi" }, limits: { memory: "2Gi" } },
} satisfies Record<string, Resources>;

/** emptyDir size limits, in MiB (the cache settings are scaled from them). */
export const emptyDirMb = { tmp: 1024, localData: 4096, localCache: 20_480, taskCache: 1024, runDir: 10_240 };

/** `1024` → `"1Gi"`, `100` → `"100Mi"`: the form the charts write. */
export function mib(mb: number): string {
  return mb % 1024 === 0 ? `${mb / 1024}Gi` : `${mb}Mi`;
}

// The charts' agent.providerCache / moduleCache / binaryCache defaults, in MiB.
const cache = { providerMb: 16_384, providerEnabled: true, moduleMb: 2048, moduleEnabled: false, binaryMb: 5120 };

/**
 * The cache settings of a process that keeps the caches. On an emptyDir of `volumeMb` the soft
 * limits of the caches in use are scaled down together to 4/5 of it (the rest holds downloads
 * being unpacked), so the agent evicts before kubelet evicts the pod; on a hostPath (undefined)
 * they stay as given. The same arithmetic as the charts' `drover.cacheEnv`.
 */
export function cacheEnv(volumeMb: number | undefined): k8s.types.input.core.v1.EnvVar[] {
  let { providerMb: p, moduleMb: m, binaryMb: b } = cache;
  if (volumeMb !== undefined) {
    const room = Math.trunc((volumeMb * 4) / 5);
    const sum = (cache.providerEnabled ? p : 0) + (cache.moduleEnabled ? m : 0) + b;
    const scale = (x: number) => Math.max(1, Math.trunc((x * room) / sum));
    if (sum > room) [p, m, b] = [scale(p), scale(m), scale(b)];
  }
  return [
    { name: "DROVER_AGENT_PROVIDER_CACHE_ENABLED", value: String(cache.providerEnabled) },
    { name: "DROVER_AGENT_PROVIDER_CACHE_SIZE_LIMIT_MB", value: String(p) },
    { name: "DROVER_AGENT_MODULE_CACHE_ENABLED", value: String(cache.moduleEnabled) },
    { name: "DROVER_AGENT_MODULE_CACHE_SIZE_LIMIT_MB", value: String(m) },
    { name: "DROVER_AGENT_BINARY_CACHE_SIZE_LIMIT_MB", value: String(b) },
  ];
}
