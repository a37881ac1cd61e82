import * as k8s from "@pulumi/kubernetes";
import * as pulumi from "@pulumi/pulumi";
import { strategicMerge } from "./strategic-merge.js";

/** How the agent runs jobs: as local processes in its pods, or one Kubernetes Job per run phase. */
export type AgentMode = "local" | "job";
export type ShutdownMode = "graceful" | "drain" | "force";

/** Inputs of a Drover agent installation. */
export interface DroverAgentArgs {
  /** Namespace to install into. */
  namespace: string;
  /** Create the namespace (default true). */
  createNamespace?: boolean;
  /** `local` (a Deployment of `drover agent run`) or `job` (a controller launching Jobs). */
  mode?: AgentMode;
  /** The pool token (drv_p_…); stored as a Pulumi secret and a Kubernetes Secret. */
  token: pulumi.Input<string>;
  /** Server URL; optional because the pool token embeds it. */
  url?: pulumi.Input<string>;
  /** The drover image (agent, controller and worker). */
  image?: string;
  imagePullPolicy?: "Always" | "IfNotPresent" | "Never";
  /** The image that runs terraform in job mode (its entrypoint must be the exec-loop). */
  runnerImage?: string;
  /** Agent pods (local mode) or controller pods (job mode). */
  replicas?: number;
  /** Jobs in flight per agent pod (local: ≤ 5) or per controller (job). */
  concurrency?: number;
  /** Extra environment of the agent; keys the component sets itself are refused. */
  env?: Record<string, pulumi.Input<string>>;
  resources?: k8s.types.input.core.v1.ResourceRequirements;
  /** PEM bundle added to the agent's trust store (mounted from a Secret). */
  caBundle?: pulumi.Input<string>;
  /** Create a Prometheus Operator ServiceMonitor for the agent's /metrics. */
  enableServiceMonitor?: boolean;
  shutdownMode?: ShutdownMode;
  terminationGracePeriodSeconds?: number;
  /**
   * A pod (metadata + spec) strategically merged into run pods: the task pods in job mode,
   * the agent pods in local mode.
   */
  podTemplate?: { metadata?: Record<string, unknown>; spec?: Record<string, unknown> };
}

const minimumGrace: Record<ShutdownMode, number> = { graceful: 30, drain: 120, force: 10 };
const reservedEnv = new Set([
  "DROVER_URL",
  "DROVER_TOKEN",
  "DROVER_TOKEN_FILE",
  "DROVER_AGENT_DRIVER",
  "DROVER_AGENT_CONCURRENCY",
  "DROVER_AGENT_NAME",
  "DROVER_AGENT_WORKER_ON_STOP_ACTION",
  "DROVER_AGENT_GRACE_PERIOD_SECONDS",
  "DROVER_CA_CERT",
  "DROVER_AGENT_KUBERNETES_TASK_TEMPLATE",
  "DROVER_AGENT_DATA_DIR",
  "DROVER_AGENT_CACHE_DIR",
  "DROVER_AGENT_HEALTH_PORT",
]);

/** Rejects settings that would produce a broken installation, with one clear message. */
export function validateArgs(args: DroverAgentArgs): void {
  const mode = args.shutdownMode ?? "graceful";
  const grace = args.terminationGracePeriodSeconds ?? 120;
  if (grace < minimumGrace[mode]) {
    throw new Error(`terminationGracePeriodSeconds ${grace} is too short for shutdownMode ${mode}: it needs at least ${minimumGrace[mode]}`);
  }
  for (const key of Object.keys(args.env ?? {})) {
    if (reservedEnv.has(key)) throw new Error(`env ${key} is set by the component itself; use the matching argument instead`);
  }
  if ((args.mode ?? "local") === "local" && (args.concurrency ?? 1) > 5) throw new Error("concurrency of a local agent is at most 5");
}

const securityContext: k8s.types.input.core.v1.SecurityContext = {
  runAsNonRoot: true,
  runAsUser: 1000,
  runAsGroup: 1000,
  allowPrivilegeEscalation: false,
  readOnlyRootFilesystem: true,
  capabilities: { drop: ["ALL"] },
  seccompProfile: { type: "RuntimeDefault" },
};

/** A Drover agent on Kubernetes, in local or job mode. */
export class DroverAgent extends pulumi.ComponentResource {
  readonly namespace: pulumi.Output<string>;
  readonly deployment: k8s.apps.v1.Deployment;
  readonly tokenSecret: k8s.core.v1.Secret;
  readonly service: k8s.core.v1.Service;
  readonly taskTemplate: k8s.apiextensions.CustomResource | undefined;

  constructor(name: string, args: DroverAgentArgs, opts?: pulumi.ComponentResourceOptions) {
    super("drover:kubernetes:Agent", name, {}, opts);
    validateArgs(args);
    const mode = args.mode ?? "local";
    const image = args.image ?? "ghcr.io/drover-dev/drover:0.1.0";
    const labels = { "app.kubernetes.io/name": "drover-agent", "app.kubernetes.io/instance": name, "app.kubernetes.io/component": mode === "job" ? "controller" : "agent" };
    const parent = { parent: this };

    const ns = args.createNamespace === false ? undefined : new k8s.core.v1.Namespace(`${name}-ns`, { metadata: { name: args.namespace } }, parent);
    this.namespace = ns ? ns.metadata.name : pulumi.output(args.namespace);
    const inNs = { ...parent, dependsOn: ns ? [ns] : [] };
    const metadata = (suffix: string) => ({ name: `${name}-${suffix}`, namespace: this.namespace, labels });

    this.tokenSecret = new k8s.core.v1.Secret(`${name}-token`, { metadata: metadata("token"), type: "Opaque", stringData: { token: pulumi.secret(args.token) } }, inNs);
    const ca = args.caBundle
      ? new k8s.core.v1.Secret(`${name}-ca`, { metadata: metadata("ca"), type: "Opaque", stringData: { "ca.crt": args.caBundle } }, inNs)
      : undefined;
    const sa = new k8s.core.v1.ServiceAccount(`${name}-sa`, { metadata: metadata(mode === "job" ? "controller" : "agent"), automountServiceAccountToken: mode === "job" }, inNs);

    const grace = args.terminationGracePeriodSeconds ?? 120;
    const env: k8s.types.input.core.v1.EnvVar[] = [
      { name: "DROVER_TOKEN", valueFrom: { secretKeyRef: { name: this.tokenSecret.metadata.name, key: "token" } } },
      { name: "DROVER_AGENT_DRIVER", value: mode === "job" ? "kubernetes" : "local" },
      { name: "DROVER_AGENT_CONCURRENCY", value: String(args.concurrency ?? (mode === "job" ? 10 : 1)) },
      { name: "DROVER_AGENT_NAME", valueFrom: { fieldRef: { fieldPath: "metadata.name" } } },
      { name: "DROVER_AGENT_WORKER_ON_STOP_ACTION", value: args.shutdownMode ?? "graceful" },
      { name: "DROVER_AGENT_GRACE_PERIOD_SECONDS", value: String(grace) },
      { name: "DROVER_AGENT_DATA_DIR", value: "/var/lib/drover/data" },
      { name: "DROVER_AGENT_CACHE_DIR", value: "/var/lib/drover/cache" },
      { name: "DROVER_AGENT_HEALTH_PORT", value: "8080" },
    ];
    if (args.url) env.push({ name: "DROVER_URL", value: args.url });
    if (ca) env.push({ name: "DROVER_CA_CERT", value: "/etc/drover/ca/ca.crt" });
    for (const [k, v] of Object.entries(args.env ?? {})) env.push({ name: k, value: v });

    let taskTemplate: k8s.apiextensions.CustomResource | undefined;
    if (mode === "job") {
      const taskSa = new k8s.core.v1.ServiceAccount(`${name}-task-sa`, { metadata: metadata("task"), automountServiceAccountToken: false }, inNs);
      const role = new k8s.rbac.v1.Role(
        `${name}-controller`,
        {
          metadata: metadata("controller"),
          rules: [
            { apiGroups: ["batch"], resources: ["jobs"], verbs: ["get", "list", "watch", "create", "delete"] },
            { apiGroups: [""], resources: ["pods", "pods/log", "events"], verbs: ["get", "list", "watch"] },
            { apiGroups: [""], resources: ["secrets"], verbs: ["create", "get", "delete"] },
            { apiGroups: ["drover.dev"], resources: ["agenttasks"], verbs: ["get", "list", "watch"] },
            { apiGroups: ["drover.dev"], resources: ["agenttasks/status"], verbs: ["update", "patch"] },
          ],
        },
        inNs,
      );
      new k8s.rbac.v1.RoleBinding(
        `${name}-controller`,
        {
          metadata: metadata("controller"),
          roleRef: { apiGroup: "rbac.authorization.k8s.io", kind: "Role", name: role.metadata.name },
          subjects: [{ kind: "ServiceAccount", name: sa.metadata.name, namespace: this.namespace }],
        },
        inNs,
      );
      const basePod = {
        metadata: { labels: { "app.kubernetes.io/name": "drover-task", "app.kubernetes.io/instance": name } },
        spec: {
          serviceAccountName: taskSa.metadata.name,
          automountServiceAccountToken: false,
          restartPolicy: "Never",
          terminationGracePeriodSeconds: grace,
          containers: [
            { name: "worker", image, args: ["agent", "worker"], securityContext },
            { name: "runner", image: args.runnerImage ?? "ghcr.io/drover-dev/drover-runner:1.11.4", securityContext },
          ],
        },
      };
      taskTemplate = new k8s.apiextensions.CustomResource(
        `${name}-task-template`,
        {
          apiVersion: "drover.dev/v1alpha1",
          kind: "AgentTask",
          metadata: metadata("task-template"),
          spec: {
            jobTemplate: {
              backoffLimit: 0,
              activeDeadlineSeconds: 4 * 60 * 60,
              ttlSecondsAfterFinished: 3600,
              template: strategicMerge(basePod, args.podTemplate ?? {}),
            },
          },
        },
        inNs,
      );
      env.push({ name: "DROVER_AGENT_KUBERNETES_TASK_TEMPLATE", value: `${name}-task-template` });
    }
    this.taskTemplate = taskTemplate;

    const agentPod = {
      metadata: { labels, annotations: { "prometheus.io/scrape": "true", "prometheus.io/port": "8080", "prometheus.io/path": "/metrics" } },
      spec: {
        serviceAccountName: sa.metadata.name,
        terminationGracePeriodSeconds: grace,
        securityContext: { runAsNonRoot: true, runAsUser: 1000, runAsGroup: 1000, fsGroup: 1000, seccompProfile: { type: "RuntimeDefault" } },
        containers: [
          {
            name: mode === "job" ? "controller" : "agent",
            image,
            imagePullPolicy: args.imagePullPolicy ?? "IfNotPresent",
            args: mode === "job" ? ["agent", "controller"] : ["agent", "run"],
            env,
            ports: [{ name: "health", containerPort: 8080 }],
            livenessProbe: { httpGet: { path: "/healthz", port: "health" } },
            readinessProbe: { httpGet: { path: "/readyz", port: "health" } },
            resources: args.resources ?? { requests: { cpu: "100m", memory: "256Mi" } },
            securityContext,
            volumeMounts: [
              { name: "data", mountPath: "/var/lib/drover/data" },
              { name: "cache", mountPath: "/var/lib/drover/cache" },
              { name: "tmp", mountPath: "/tmp" },
              ...(ca ? [{ name: "ca", mountPath: "/etc/drover/ca", readOnly: true }] : []),
            ],
          },
        ],
        volumes: [
          { name: "data", emptyDir: {} },
          { name: "cache", emptyDir: {} },
          { name: "tmp", emptyDir: {} },
          ...(ca ? [{ name: "ca", secret: { secretName: ca.metadata.name } }] : []),
        ],
      },
    };
    this.deployment = new k8s.apps.v1.Deployment(
      `${name}-deployment`,
      {
        metadata: metadata(mode === "job" ? "controller" : "agent"),
        spec: {
          replicas: args.replicas ?? 1,
          selector: { matchLabels: labels },
          template: mode === "local" ? strategicMerge(agentPod, args.podTemplate ?? {}) : agentPod,
        },
      },
      inNs,
    );
    this.service = new k8s.core.v1.Service(
      `${name}-metrics`,
      {
        metadata: { ...metadata("metrics"), annotations: { "prometheus.io/scrape": "true", "prometheus.io/port": "8080", "prometheus.io/path": "/metrics" } },
        spec: { selector: labels, ports: [{ name: "health", port: 8080, targetPort: "health" }] },
      },
      inNs,
    );
    if (args.enableServiceMonitor) {
      new k8s.apiextensions.CustomResource(
        `${name}-servicemonitor`,
        {
          apiVersion: "monitoring.coreos.com/v1",
          kind: "ServiceMonitor",
          metadata: metadata("agent"),
          spec: { selector: { matchLabels: labels }, endpoints: [{ port: "health", path: "/metrics", interval: "30s" }] },
        },
        inNs,
      );
    }
    this.registerOutputs({ namespace: this.namespace });
  }
}
