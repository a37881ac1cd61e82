import * as k8s from "@pulumi/kubernetes";
import * as pulumi from "@pulumi/pulumi";
import { minimumGraceSeconds, reservedSettings, type StopAction } from "@drover/protocol";
import { agentTaskCrd } from "./crd.js";
import { cacheEnv, defaultResources, emptyDirMb, mib } from "./sizing.js";
import { strategicMerge } from "./strategic-merge.js";

/**
 * How the agent runs jobs: as local processes in its pods (`local`), one Kubernetes Job per run
 * phase with its own worker container (`job`), or Jobs holding only the runner, driven by a
 * per-node worker DaemonSet (`node`, the agent-k8s chart's default design).
 */
export type AgentMode = "local" | "job" | "node";
/** The agent's stop action. */
export type ShutdownMode = StopAction;

/** Inputs of a Drover agent installation. */
export interface DroverAgentArgs {
  /** Namespace to install into. */
  namespace: string;
  /** Create the namespace (default true). */
  createNamespace?: boolean;
  /** `local` (a Deployment of `drover agent run`), `job` (a controller launching Jobs) or `node` (job + per-node workers). */
  mode?: AgentMode;
  /**
   * Node mode: the nodes' data home (hostPath, type Directory). Each node must have it, owned
   * by UID/GID 1000 (mode 0711), before the worker starts there. Default /var/lib/drover-agent.
   */
  nodeDataHome?: string;
  /**
   * Node mode: where the node workers run, and so the run pods too (they need a worker on their
   * node). Its keys are added to the default `kubernetes.io/os: linux` (the images are Linux images).
   */
  nodeSelector?: Record<string, string>;
  /** The pool token (drv_p_…); stored as a Pulumi secret and a Kubernetes Secret. Or tokenExistingSecret. */
  token?: pulumi.Input<string>;
  /** A Secret of the namespace that already holds the pool token (instead of `token`); key defaults to `token`. */
  tokenExistingSecret?: { name: pulumi.Input<string>; key?: string };
  /** Server URL; optional because the pool token embeds it. */
  url?: pulumi.Input<string>;
  /** The drover image (agent, controller and worker). */
  image?: string;
  imagePullPolicy?: "Always" | "IfNotPresent" | "Never";
  /** The image that runs terraform in job mode (its entrypoint must be the exec-loop). */
  runnerImage?: string;
  /**
   * Agent pods (local mode). Job and node modes run exactly one controller and refuse more:
   * controllers elect a leader (a Lease), so a second would only stand by, never Ready.
   */
  replicas?: number;
  /** Jobs in flight per agent pod (local: ≤ 5) or per controller (job). */
  concurrency?: number;
  /** Extra environment of the agent; keys the component sets itself are refused. */
  env?: Record<string, pulumi.Input<string>>;
  /** The agent's (local) or controller's resources; default as the charts'. */
  resources?: k8s.types.input.core.v1.ResourceRequirements;
  /** PEM bundle added to the trust store of the agent, the task workers and runs (mounted from a Secret). */
  caBundle?: pulumi.Input<string>;
  /** HTTP(S)_PROXY and NO_PROXY for the agent or controller, the task workers and runs. */
  proxy?: { httpProxy?: pulumi.Input<string>; httpsProxy?: pulumi.Input<string>; noProxy?: pulumi.Input<string> };
  /** Annotations of the agent's or controller's ServiceAccount (e.g. cloud workload identity). */
  serviceAccountAnnotations?: Record<string, pulumi.Input<string>>;
  /** Annotations of the task pods' ServiceAccount (job mode): the identity runs use in the cloud. */
  taskServiceAccountAnnotations?: Record<string, pulumi.Input<string>>;
  /**
   * Let runs reach the cloud metadata service (169.254.169.254, fd00:ec2::254): the agent pods in
   * local mode, the task pods otherwise. Default false: a NetworkPolicy denies it, so runs cannot
   * take the node's credentials (it needs a CNI that enforces egress policies).
   */
  allowMetadataService?: boolean;
  /**
   * A PodDisruptionBudget for the agent or controller pods. Refused when no pod could ever be
   * evicted under it (a drain would wait forever), e.g. minAvailable 1 of one replica.
   */
  podDisruptionBudget?: { minAvailable?: number | string; maxUnavailable?: number | string };
  /**
   * Job mode: install the AgentTask CustomResourceDefinition (default true). It is cluster-wide:
   * set false for a second installation in the same cluster, or when the charts installed it.
   * `pulumi destroy` leaves it in the cluster (retainOnDelete), as Helm leaves `crds/`: deleting
   * it would delete every other installation's AgentTasks. Delete it by hand after the last one.
   */
  installCrd?: boolean;
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

// What the component sets itself (from its own arguments) comes from the one settings table.
const reservedEnv = new Set<string>(reservedSettings());
/** Rejects settings that would produce a broken installation, with one clear message. */
export function validateArgs(args: DroverAgentArgs): void {
  const mode = args.shutdownMode ?? "graceful";
  const grace = args.terminationGracePeriodSeconds ?? 120;
  if (grace < minimumGraceSeconds[mode]) {
    throw new Error(
      `terminationGracePeriodSeconds ${grace} is too short for shutdownMode ${mode}: it needs at least ${minimumGraceSeconds[mode]}`,
    );
  }
  for (const key of Object.keys(args.env ?? {})) {
    if (reservedEnv.has(key))
      throw new Error(`env ${key} is set by the component itself; use the matching argument instead`);
  }
  if ((args.mode ?? "local") === "local" && (args.concurrency ?? 1) > 5)
    throw new Error("concurrency of a local agent is at most 5");
  if (args.nodeDataHome !== undefined && !/^\/[^\0]*[^/]$/.test(args.nodeDataHome))
    throw new Error(
      `nodeDataHome must be an absolute path without a trailing slash, got ${JSON.stringify(args.nodeDataHome)}`,
    );
  if ((args.mode === "job" || args.mode === "node") && (args.replicas ?? 1) !== 1) {
    throw new Error(
      `replicas ${args.replicas} in ${args.mode} mode: exactly one controller may run (controllers elect a leader, so a second would only stand by, never Ready). Raise concurrency instead`,
    );
  }
  if ((args.token === undefined) === (args.tokenExistingSecret === undefined))
    throw new Error("set exactly one of token and tokenExistingSecret");
  const pdb = args.podDisruptionBudget;
  if (pdb) {
    if ((pdb.minAvailable === undefined) === (pdb.maxUnavailable === undefined))
      throw new Error("podDisruptionBudget: set exactly one of minAvailable and maxUnavailable");
    const replicas = args.replicas ?? 1;
    if (blocksEveryEviction(pdb, replicas)) {
      throw new Error(
        `podDisruptionBudget ${JSON.stringify(pdb)} of ${replicas} replica(s) lets no pod be evicted, so a node drain would wait forever; use maxUnavailable: 1`,
      );
    }
  }
}

/** Whether a PDB of `replicas` pods allows no voluntary eviction at all. */
function blocksEveryEviction(
  pdb: { minAvailable?: number | string; maxUnavailable?: number | string },
  replicas: number,
): boolean {
  const count = (v: number | string, roundUp: boolean) => {
    if (typeof v === "number") return v;
    const pct = /^(\d+)%$/.exec(v);
    if (!pct) throw new Error(`podDisruptionBudget: ${JSON.stringify(v)} is neither a number nor a percentage`);
    const exact = (Number(pct[1]) * replicas) / 100;
    return roundUp ? Math.ceil(exact) : Math.floor(exact);
  };
  // Kubernetes rounds percentages up for both fields.
  if (pdb.maxUnavailable !== undefined) return count(pdb.maxUnavailable, true) < 1;
  return count(pdb.minAvailable!, true) >= replicas;
}

// The UID and GID are the containers' (as in the charts), so a container of a podTemplate brings its own.
// OnRootMismatch: volume ownership is changed only when the volume's root does not match fsGroup,
// not by a recursive walk of a full cache at every start.
const podSecurityContext: k8s.types.input.core.v1.PodSecurityContext = {
  runAsNonRoot: true,
  fsGroup: 1000,
  fsGroupChangePolicy: "OnRootMismatch",
  seccompProfile: { type: "RuntimeDefault" },
};
// The cloud metadata services' addresses (the charts' drover.metadataPolicy).
const metadataV4 = ["169.254.169.254/32", "100.100.100.200/32", "168.63.129.16/32"];
const metadataV6 = ["fd00:ec2::254/128", "fd20:ce::254/128", "fe80::a9fe:a9fe/128"];
// The images are Linux images; a user's nodeSelector adds its keys next to this one.
const linuxNodes = { "kubernetes.io/os": "linux" };

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
  /** The Secret the component made for `token` (undefined with tokenExistingSecret). */
  readonly tokenSecret: k8s.core.v1.Secret | undefined;
  readonly service: k8s.core.v1.Service;
  readonly taskTemplate: k8s.apiextensions.CustomResource | undefined;

  constructor(name: string, args: DroverAgentArgs, opts?: pulumi.ComponentResourceOptions) {
    super("drover:kubernetes:Agent", name, {}, opts);
    validateArgs(args);
    const mode = args.mode ?? "local";
    // job and node modes both run a controller that launches Jobs.
    const controllerMode = mode !== "local";
    const image = args.image ?? "ghcr.io/drover-dev/drover:0.1.0";
    const labels = {
      "app.kubernetes.io/name": "drover-agent",
      "app.kubernetes.io/instance": name,
      "app.kubernetes.io/component": controllerMode ? "controller" : "agent",
    };
    const taskLabels = { "app.kubernetes.io/name": "drover-task", "app.kubernetes.io/instance": name };
    const parent = { parent: this };

    const ns =
      args.createNamespace === false
        ? undefined
        : new k8s.core.v1.Namespace(`${name}-ns`, { metadata: { name: args.namespace } }, parent);
    this.namespace = ns ? ns.metadata.name : pulumi.output(args.namespace);
    const inNs = { ...parent, dependsOn: ns ? [ns] : [] };
    const metadata = (suffix: string) => ({ name: `${name}-${suffix}`, namespace: this.namespace, labels });

    this.tokenSecret =
      args.token === undefined
        ? undefined
        : new k8s.core.v1.Secret(
            `${name}-token`,
            { metadata: metadata("token"), type: "Opaque", stringData: { token: pulumi.secret(args.token) } },
            inNs,
          );
    const tokenRef = this.tokenSecret
      ? { name: this.tokenSecret.metadata.name, key: "token" }
      : { name: args.tokenExistingSecret!.name, key: args.tokenExistingSecret!.key ?? "token" };
    const ca = args.caBundle
      ? new k8s.core.v1.Secret(
          `${name}-ca`,
          { metadata: metadata("ca"), type: "Opaque", stringData: { "ca.crt": args.caBundle } },
          inNs,
        )
      : undefined;
    const sa = new k8s.core.v1.ServiceAccount(
      `${name}-sa`,
      // The token is mounted by the pod spec that needs it (the controller's), not by every pod of this account.
      {
        metadata: {
          ...metadata(controllerMode ? "controller" : "agent"),
          annotations: args.serviceAccountAnnotations ?? {},
        },
        ...(controllerMode ? {} : { automountServiceAccountToken: false }),
      },
      inNs,
    );
    const proxyEnv: k8s.types.input.core.v1.EnvVar[] = [
      ["HTTP_PROXY", args.proxy?.httpProxy],
      ["HTTPS_PROXY", args.proxy?.httpsProxy],
      ["NO_PROXY", args.proxy?.noProxy],
    ].flatMap(([k, v]) => (v ? [{ name: k as string, value: v }] : []));
    const caMount = { name: "ca", mountPath: "/etc/drover/ca", readOnly: true };

    const grace = args.terminationGracePeriodSeconds ?? 120;
    const env: k8s.types.input.core.v1.EnvVar[] = [
      { name: "DROVER_TOKEN", valueFrom: { secretKeyRef: tokenRef } },
      { name: "DROVER_AGENT_DRIVER", value: controllerMode ? "kubernetes" : "local" },
      { name: "DROVER_AGENT_CONCURRENCY", value: String(args.concurrency ?? (controllerMode ? 10 : 1)) },
      // Job mode: a stable name, so a replaced controller pod finds the Jobs its predecessor
      // launched (they carry this name in their labels). Local agents each register their own.
      controllerMode
        ? { name: "DROVER_AGENT_NAME", value: `${name}-controller` }
        : { name: "DROVER_AGENT_NAME", valueFrom: { fieldRef: { fieldPath: "metadata.name" } } },
      { name: "DROVER_AGENT_WORKER_ON_STOP_ACTION", value: args.shutdownMode ?? "graceful" },
      { name: "DROVER_AGENT_GRACE_PERIOD_SECONDS", value: String(grace) },
      // The controller keeps no cache: its scratch lives in /tmp. A local agent keeps its caches
      // on their own emptyDir, their limits scaled to fit it.
      ...(controllerMode
        ? [
            { name: "DROVER_AGENT_DATA_DIR", value: "/tmp/drover/data" },
            { name: "DROVER_AGENT_CACHE_DIR", value: "/tmp/drover/cache" },
            { name: "DROVER_AGENT_KUBERNETES_NAMESPACE", valueFrom: { fieldRef: { fieldPath: "metadata.namespace" } } },
          ]
        : [
            { name: "DROVER_AGENT_DATA_DIR", value: "/var/lib/drover/data" },
            { name: "DROVER_AGENT_CACHE_DIR", value: "/var/lib/drover/cache" },
            ...cacheEnv(emptyDirMb.localCache),
          ]),
      { name: "DROVER_AGENT_HEALTH_PORT", value: "8080" },
    ];
    if (args.url) env.push({ name: "DROVER_URL", value: args.url });
    if (ca) env.push({ name: "DROVER_CA_CERT", value: "/etc/drover/ca/ca.crt" });
    env.push(...proxyEnv);
    if (controllerMode) env.push({ name: "DROVER_AGENT_KUBERNETES_WORKER_IMAGE", value: image });
    for (const [k, v] of Object.entries(args.env ?? {})) env.push({ name: k, value: v });

    if (!args.allowMetadataService) {
      // Runs may not read cloud instance credentials from the metadata service: a local agent
      // runs them in its own pods, a controller in task pods.
      const suffix = controllerMode ? "task-deny-metadata" : "deny-metadata";
      new k8s.networking.v1.NetworkPolicy(
        `${name}-${suffix}`,
        {
          metadata: metadata(suffix),
          spec: {
            podSelector: { matchLabels: controllerMode ? taskLabels : labels },
            policyTypes: ["Egress"],
            egress: [
              // AWS (IPv4, IPv6 on Nitro), GCE (IPv6), Alibaba Cloud, OpenStack (IPv6) and Azure's WireServer.
              {
                to: [
                  { ipBlock: { cidr: "0.0.0.0/0", except: metadataV4 } },
                  { ipBlock: { cidr: "::/0", except: metadataV6 } },
                ],
              },
              // Some CNIs (Cilium) match neither pods nor nodes by ipBlock: pods of every namespace (an
              // in-cluster server, a proxy, CoreDNS) and DNS on any address (NodeLocal DNS) by their own rules.
              { to: [{ namespaceSelector: {} }] },
              {
                ports: [
                  { port: 53, protocol: "UDP" },
                  { port: 53, protocol: "TCP" },
                ],
              },
            ],
          },
        },
        inNs,
      );
    }

    let taskTemplate: k8s.apiextensions.CustomResource | undefined;
    if (controllerMode) {
      const taskSa = new k8s.core.v1.ServiceAccount(
        `${name}-task-sa`,
        {
          metadata: { ...metadata("task"), annotations: args.taskServiceAccountAnnotations ?? {} },
          automountServiceAccountToken: false,
        },
        inNs,
      );
      // Retained: it is cluster-wide, and deleting it deletes every installation's AgentTasks.
      const crd =
        args.installCrd === false
          ? undefined
          : new k8s.apiextensions.v1.CustomResourceDefinition(
              `${name}-agenttasks-crd`,
              { metadata: agentTaskCrd.metadata, spec: agentTaskCrd.spec },
              { ...parent, retainOnDelete: true },
            );
      const role = new k8s.rbac.v1.Role(
        `${name}-controller`,
        {
          metadata: metadata("controller"),
          rules: [
            // What the controller's code calls, as the charts grant it (test/charts/rbac.test.ts).
            { apiGroups: ["batch"], resources: ["jobs"], verbs: ["get", "list", "watch", "create", "delete"] },
            { apiGroups: [""], resources: ["pods"], verbs: ["list", "watch"] },
            { apiGroups: [""], resources: ["events"], verbs: ["list"] },
            { apiGroups: [""], resources: ["secrets"], verbs: ["get", "create"] },
            // Leader election (create cannot be limited by name).
            { apiGroups: ["coordination.k8s.io"], resources: ["leases"], verbs: ["create"] },
            {
              apiGroups: ["coordination.k8s.io"],
              resources: ["leases"],
              resourceNames: [`${name}-controller-leader`],
              verbs: ["get", "update"],
            },
            // Only its own task template, which it watches (list/watch are allowed by name when they select metadata.name).
            {
              apiGroups: ["drover.dev"],
              resources: ["agenttasks"],
              resourceNames: [`${name}-task-template`],
              verbs: ["get", "list", "watch"],
            },
            // Its Valid condition, set from a dry-run create of the Job it makes.
            {
              apiGroups: ["drover.dev"],
              resources: ["agenttasks/status"],
              resourceNames: [`${name}-task-template`],
              verbs: ["patch"],
            },
            // Node mode: per run, a Role and RoleBinding granting the node workers that run's job Secret only.
            ...(mode === "node"
              ? [{ apiGroups: ["rbac.authorization.k8s.io"], resources: ["roles", "rolebindings"], verbs: ["create"] }]
              : []),
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
      const taskEnv = (extra: k8s.types.input.core.v1.EnvVar[]) => [...proxyEnv, ...(ca ? extra : [])];
      const pullPolicy = args.imagePullPolicy ?? "IfNotPresent";
      const tmp = { name: "tmp", emptyDir: { sizeLimit: mib(emptyDirMb.tmp) } };
      const tmpMount = { name: "tmp", mountPath: "/tmp" };
      const cacheMount = { name: "drover-cache", mountPath: "/var/lib/drover/cache" };
      // A pod's own worker (job mode) fills its cache and serves its metrics; in node mode the
      // node's worker does, and run pods hold only the runner (the controller drops a worker).
      const worker = {
        name: "worker",
        image,
        imagePullPolicy: pullPolicy,
        // tini (the image's entrypoint) reaps terraform's orphaned children; Node.js as PID 1 would not.
        command: ["/usr/bin/tini", "--", "drover"],
        args: ["agent", "worker"],
        securityContext,
        env: [
          { name: "DROVER_AGENT_HEALTH_PORT", value: "8080" },
          ...cacheEnv(emptyDirMb.taskCache),
          ...taskEnv([{ name: "DROVER_CA_CERT", value: "/etc/drover/ca/ca.crt" }]),
        ],
        // Served for scraping, not probed: a failed liveness probe would end the run.
        ports: [{ name: "health", containerPort: 8080 }],
        resources: defaultResources.worker,
        volumeMounts: [tmpMount, cacheMount, ...(ca ? [caMount] : [])],
      };
      const runner = {
        name: "runner",
        image: args.runnerImage ?? "ghcr.io/drover-dev/drover-runner:1.11.4",
        imagePullPolicy: pullPolicy,
        securityContext,
        // terraform writes provider downloads and module archives to /tmp, its CLI state to HOME.
        env: [{ name: "HOME", value: "/tmp" }, ...taskEnv([{ name: "SSL_CERT_FILE", value: "/etc/drover/ca/ca.crt" }])],
        resources: defaultResources.runner,
        volumeMounts: [
          tmpMount,
          ...(mode === "job" ? [{ ...cacheMount, readOnly: true }] : []),
          ...(ca ? [caMount] : []),
        ],
      };
      const basePod = {
        metadata: { labels: taskLabels },
        spec: {
          serviceAccountName: taskSa.metadata.name,
          automountServiceAccountToken: false,
          restartPolicy: "Never",
          terminationGracePeriodSeconds: grace,
          // fsGroup: the worker (UID 1000) reads its job Secret, mounted with mode 0400.
          securityContext: podSecurityContext,
          // Node mode: the nodes the node workers run on, as the agent-k8s chart does.
          nodeSelector: mode === "node" ? { ...linuxNodes, ...args.nodeSelector } : linuxNodes,
          // The controller adds the exec-loop copy command and mounts; image and hardening come from here.
          initContainers: [
            {
              name: "drover-init",
              image,
              imagePullPolicy: pullPolicy,
              resources: defaultResources.init,
              securityContext,
            },
          ],
          containers: mode === "job" ? [worker, runner] : [runner],
          volumes: [
            tmp,
            ...(mode === "job"
              ? [
                  // The run's working directory (configuration, .terraform, providers); the controller mounts it.
                  { name: "drover-run", emptyDir: { sizeLimit: mib(emptyDirMb.runDir) } },
                  { name: "drover-cache", emptyDir: { sizeLimit: mib(emptyDirMb.taskCache) } },
                ]
              : []),
            ...(ca ? [{ name: "ca", secret: { secretName: ca.metadata.name } }] : []),
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
        { ...inNs, dependsOn: [...inNs.dependsOn, ...(crd ? [crd] : [])] },
      );
      env.push({ name: "DROVER_AGENT_KUBERNETES_TASK_TEMPLATE", value: `${name}-task-template` });
      if (mode === "node") {
        const home = args.nodeDataHome ?? "/var/lib/drover-agent";
        const workerSa = this.nodeWorkers(name, args, { image, home, grace, proxyEnv, ca, caMount, metadata, inNs });
        env.push(
          { name: "DROVER_AGENT_NODE_HOME", value: home },
          { name: "DROVER_AGENT_NODE_WORKER_SERVICE_ACCOUNT", value: workerSa },
        );
      }
    }
    this.taskTemplate = taskTemplate;

    const agentPod = {
      metadata: {
        labels,
        annotations: { "prometheus.io/scrape": "true", "prometheus.io/port": "8080", "prometheus.io/path": "/metrics" },
      },
      spec: {
        serviceAccountName: sa.metadata.name,
        automountServiceAccountToken: controllerMode,
        // A controller stops taking jobs at once (its runs belong to their pods); a local agent
        // runs them itself and needs the grace its stop action does.
        terminationGracePeriodSeconds: controllerMode ? 30 : grace,
        securityContext: podSecurityContext,
        containers: [
          {
            name: controllerMode ? "controller" : "agent",
            image,
            imagePullPolicy: args.imagePullPolicy ?? "IfNotPresent",
            args: controllerMode ? ["agent", "controller"] : ["agent", "run"],
            env,
            ports: [{ name: "health", containerPort: 8080 }],
            livenessProbe: {
              httpGet: { path: "/healthz", port: "health" },
              ...(controllerMode ? {} : { periodSeconds: 20 }),
            },
            readinessProbe: {
              httpGet: { path: "/readyz", port: "health" },
              ...(controllerMode ? {} : { periodSeconds: 10 }),
            },
            resources: args.resources ?? (controllerMode ? defaultResources.controller : defaultResources.agent),
            securityContext,
            volumeMounts: [
              ...(controllerMode
                ? []
                : [
                    { name: "data", mountPath: "/var/lib/drover/data" },
                    { name: "cache", mountPath: "/var/lib/drover/cache" },
                  ]),
              { name: "tmp", mountPath: "/tmp" },
              ...(ca ? [caMount] : []),
            ],
          },
        ],
        volumes: [
          ...(controllerMode
            ? []
            : [
                { name: "data", emptyDir: { sizeLimit: mib(emptyDirMb.localData) } },
                { name: "cache", emptyDir: { sizeLimit: mib(emptyDirMb.localCache) } },
              ]),
          { name: "tmp", emptyDir: { sizeLimit: mib(emptyDirMb.tmp) } },
          ...(ca ? [{ name: "ca", secret: { secretName: ca.metadata.name } }] : []),
        ],
      },
    };
    this.deployment = new k8s.apps.v1.Deployment(
      `${name}-deployment`,
      {
        metadata: metadata(controllerMode ? "controller" : "agent"),
        spec: {
          replicas: args.replicas ?? 1,
          // A controller is never started beside its predecessor (it would stand by, not Ready, until the
          // old one released its Lease or the Lease expired).
          strategy: controllerMode
            ? { type: "Recreate" }
            : { type: "RollingUpdate", rollingUpdate: { maxSurge: "25%", maxUnavailable: "50%" } },
          selector: { matchLabels: labels },
          template: mode === "local" ? strategicMerge(agentPod, args.podTemplate ?? {}) : agentPod,
        },
      },
      inNs,
    );
    this.service = new k8s.core.v1.Service(
      `${name}-metrics`,
      {
        metadata: {
          ...metadata("metrics"),
          annotations: {
            "prometheus.io/scrape": "true",
            "prometheus.io/port": "8080",
            "prometheus.io/path": "/metrics",
          },
        },
        spec: { selector: labels, ports: [{ name: "health", port: 8080, targetPort: "health" }] },
      },
      inNs,
    );
    if (args.podDisruptionBudget) {
      new k8s.policy.v1.PodDisruptionBudget(
        `${name}-pdb`,
        { metadata: metadata("pdb"), spec: { ...args.podDisruptionBudget, selector: { matchLabels: labels } } },
        inNs,
      );
    }
    if (args.enableServiceMonitor) {
      new k8s.apiextensions.CustomResource(
        `${name}-servicemonitor`,
        {
          apiVersion: "monitoring.coreos.com/v1",
          kind: "ServiceMonitor",
          metadata: metadata("agent"),
          spec: {
            selector: { matchLabels: labels },
            endpoints: [{ port: "health", path: "/metrics", interval: "30s" }],
          },
        },
        inNs,
      );
    }
    this.registerOutputs({ namespace: this.namespace });
  }

  /**
   * Node mode's per-node workers: a DaemonSet of `drover agent node-worker` with the nodes' data
   * home, under a ServiceAccount that may only read pods (each run's job Secret is granted to it
   * by the controller, per run). Returns that ServiceAccount's name.
   */
  private nodeWorkers(
    name: string,
    args: DroverAgentArgs,
    o: {
      image: string;
      home: string;
      grace: number;
      proxyEnv: k8s.types.input.core.v1.EnvVar[];
      ca: k8s.core.v1.Secret | undefined;
      caMount: k8s.types.input.core.v1.VolumeMount;
      metadata: (suffix: string) => { name: string; namespace: pulumi.Output<string>; labels: Record<string, string> };
      inNs: pulumi.CustomResourceOptions;
    },
  ): string {
    const saName = `${name}-node-worker`;
    const labels = {
      "app.kubernetes.io/name": "drover-agent",
      "app.kubernetes.io/instance": name,
      "app.kubernetes.io/component": "node-worker",
    };
    const meta = { ...o.metadata("node-worker"), labels };
    const sa = new k8s.core.v1.ServiceAccount(
      `${name}-node-worker-sa`,
      { metadata: meta, automountServiceAccountToken: false },
      o.inNs,
    );
    const rules = [{ apiGroups: [""], resources: ["pods"], verbs: ["list", "watch"] }];
    const role = new k8s.rbac.v1.Role(`${name}-node-worker`, { metadata: meta, rules }, o.inNs);
    new k8s.rbac.v1.RoleBinding(
      `${name}-node-worker`,
      {
        metadata: meta,
        roleRef: { apiGroup: "rbac.authorization.k8s.io", kind: "Role", name: role.metadata.name },
        subjects: [{ kind: "ServiceAccount", name: sa.metadata.name, namespace: meta.namespace }],
      },
      o.inNs,
    );
    const env: k8s.types.input.core.v1.EnvVar[] = [
      { name: "DROVER_AGENT_NODE_NAME", valueFrom: { fieldRef: { fieldPath: "spec.nodeName" } } },
      { name: "DROVER_AGENT_KUBERNETES_NAMESPACE", valueFrom: { fieldRef: { fieldPath: "metadata.namespace" } } },
      { name: "DROVER_AGENT_NODE_HOME", value: o.home },
      // It supervises only the run pods of this installation's controller.
      { name: "DROVER_AGENT_CONTROLLER_NAME", value: `${name}-controller` },
      { name: "DROVER_AGENT_HEALTH_PORT", value: "8080" },
      { name: "DROVER_AGENT_WORKER_ON_STOP_ACTION", value: args.shutdownMode ?? "graceful" },
      { name: "DROVER_AGENT_GRACE_PERIOD_SECONDS", value: String(o.grace) },
      // The node's caches, in <home>/cache (a hostPath: not scaled to a volume).
      ...cacheEnv(undefined),
      ...(args.url ? [{ name: "DROVER_URL", value: args.url }] : []),
      ...(o.ca ? [{ name: "DROVER_CA_CERT", value: "/etc/drover/ca/ca.crt" }] : []),
      ...o.proxyEnv,
    ];
    new k8s.apps.v1.DaemonSet(
      `${name}-node-worker`,
      {
        metadata: meta,
        spec: {
          selector: { matchLabels: labels },
          // An upgrade must not restart a worker under runs in progress (they would end errored).
          updateStrategy: { type: "OnDelete" },
          template: {
            // No do-not-evict annotations: cluster-autoscaler and Karpenter ignore them on DaemonSet
            // pods (review I3). Runs are protected by their own pods' annotations.
            metadata: { labels },
            spec: {
              serviceAccountName: sa.metadata.name,
              // The worker lists this node's run pods and reads their job Secrets.
              automountServiceAccountToken: true,
              terminationGracePeriodSeconds: o.grace,
              securityContext: podSecurityContext,
              nodeSelector: { ...linuxNodes, ...args.nodeSelector },
              containers: [
                {
                  name: "worker",
                  image: o.image,
                  imagePullPolicy: args.imagePullPolicy ?? "IfNotPresent",
                  args: ["agent", "node-worker"],
                  env,
                  ports: [{ name: "health", containerPort: 8080 }],
                  livenessProbe: { httpGet: { path: "/healthz", port: "health" } },
                  readinessProbe: { httpGet: { path: "/readyz", port: "health" } },
                  resources: defaultResources.nodeWorker,
                  securityContext,
                  volumeMounts: [
                    // At the node's own path: run pods mount their directory at the same path.
                    { name: "home", mountPath: o.home },
                    { name: "tmp", mountPath: "/tmp" },
                    ...(o.ca ? [o.caMount] : []),
                  ],
                },
              ],
              volumes: [
                { name: "home", hostPath: { path: o.home, type: "Directory" } },
                { name: "tmp", emptyDir: { sizeLimit: mib(emptyDirMb.tmp) } },
                ...(o.ca ? [{ name: "ca", secret: { secretName: o.ca.metadata.name } }] : []),
              ],
            },
          },
        },
      },
      o.inNs,
    );
    return saName;
  }
}
