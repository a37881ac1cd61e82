/**
 * startTestCluster: the API server, controllers (garbage collector, namespaces,
 * Jobs, Deployments, DaemonSets, PDBs, the scheduler) and one node agent per node, on 127.0.0.1 with a random port, plus
 * a kubeconfig for kubectl and @kubernetes/client-node.
 */
import { randomBytes } from "node:crypto";
import { mkdtempSync, rmSync, writeFileSync, mkdirSync } from "node:fs";
import { createServer } from "node:http";
import { createServer as createHttpsServer } from "node:https";
import type { AddressInfo } from "node:net";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { serveCustomResources } from "./api/crds.js";
import { EventRecorder } from "./api/events.js";
import { ApiHttpHandler } from "./api/http-server.js";
import { ObjectApi } from "./api/object-api.js";
import { ResourceRegistry } from "./api/resources.js";
import { StatusError } from "./api/status-error.js";
import { Store } from "./api/store.js";
import { GarbageCollector } from "./controllers/garbage-collector.js";
import type { JobControllerTimings } from "./controllers/job-controller.js";
import { JobController } from "./controllers/job-controller.js";
import { DeploymentController } from "./controllers/deployment-controller.js";
import { NamespaceController } from "./controllers/namespace-controller.js";
import type { Isolation } from "./node/container-process.js";
import { detectIsolation } from "./node/container-process.js";
import type { ImageConfig } from "./node/images.js";
import { ImageCatalog } from "./node/images.js";
import { NodeAgent } from "./node/node-agent.js";
import { DaemonSetController } from "./controllers/daemonset-controller.js";
import { DisruptionController, evictPod } from "./controllers/disruption.js";
import { Scheduler } from "./controllers/scheduler.js";
import type { NodeHooks } from "./api/http-server.js";
import { badRequest } from "./api/status-error.js";
import { isObject } from "./api/types.js";
import type { NodeTimings } from "./node/pod-worker.js";
import { servingCert } from "./tls.js";
import {
  ownerReferencesAdmission,
  podSecurityAdmission,
  rootCaConfigMap,
  serviceAccountAdmission,
} from "./api/admission.js";
import { resourceQuotaAdmission } from "./api/quota-admission.js";
import { sccUidAdmission } from "./api/scc-admission.js";
import { RbacAuthorizer, TokenAuthority } from "./api/auth.js";

export interface ClusterTimings extends NodeTimings, JobControllerTimings {
  /** How often a Terminating namespace is re-checked for remaining objects. */
  namespaceRetryMs: number;
}

export interface NodeOptions {
  name: string;
  labels?: Record<string, string>;
  /** Node taints ({ key, value, effect }). */
  taints?: { key: string; value?: string; effect: "NoSchedule" | "PreferNoSchedule" | "NoExecute" }[];
  /** cpu/memory/pods (default 2, 8Gi, 110). */
  allocatable?: Record<string, string>;
}

export interface TestClusterOptions {
  /** Pods' volumes and roots and the kubeconfig live here; default a fresh temp dir, removed by close(). */
  dataDir?: string;
  /** Watch events retained for resuming; a watch from an older resourceVersion gets 410 Expired. */
  watchHistory?: number;
  /** Interval of BOOKMARK events on watches that allow them. */
  bookmarkIntervalMs?: number;
  /** The server closes every watch after this long (default 30 min, as a real API server's minimum). */
  watchTimeoutMs?: number;
  timings?: Partial<ClusterTimings>;
  /** What images "contain", for containers without `command`. Keyed by image or repository. */
  images?: Record<string, ImageConfig>;
  /**
   * podman's environment (CONTAINERS_CONF and friends): containers of images whose `images`
   * entry names a `podman` image run as real containers (see README, "podman mode").
   */
  podman?: { env: Record<string, string> };
  /** Images (or repositories) whose pull fails (besides any tagged `:pull-fails`). */
  unpullableImages?: string[];
  /** "auto" (default): mount namespaces when permitted, else path rewriting. */
  isolation?: Isolation | "auto";
  /** "mapped" (default): hostPath volumes live under dataDir/host; "real": the host's own paths. */
  hostPaths?: "mapped" | "real";
  /** Name of the (first) node; default ktc-node. */
  nodeName?: string;
  /**
   * The cluster's nodes (default: one, `nodeName`). Each is a Node object with a kubelet;
   * the scheduler places pods among them. hostPath volumes of the first node live under
   * dataDir/host, of the others under dataDir/nodes/<name>/host.
   */
  nodes?: NodeOptions[];
  /** Environment every container starts from (default: PATH of this process). */
  baseEnv?: Record<string, string>;
  /** Namespaces created at start besides default, kube-system, kube-public, kube-node-lease. */
  namespaces?: string[];
  /** Controller and kubelet errors (default: collected in `errors`, printed if KTC_DEBUG is set). */
  onError?: (error: unknown) => void;
  /** Every request (method and URL), for tests asserting on what a client sent. */
  onRequest?: (method: string, url: string) => void;
  /**
   * HTTPS with a self-signed certificate (default when the openssl CLI exists). Over
   * plain HTTP kubectl sends no bearer token, so the token is then not required.
   */
  tls?: boolean;
  /** Version reported at /version. */
  gitVersion?: string;
  /**
   * The IP family of pod and node addresses (default IPv4). Pods share the host's network, so
   * a pod's IP is the family's loopback, 127.0.0.1 or ::1: it is what probes connect to and
   * what `status.podIP` says, so a server listening on IPv4 only fails the probes of an IPv6
   * cluster as it would on a single-stack IPv6 cluster.
   */
  ipFamily?: "IPv4" | "IPv6";
}

export interface TestCluster {
  /** Random id of this cluster; its podman containers carry the label `dev.drover.kube-test-cluster.id=<id>`. */
  id: string;
  /** https://127.0.0.1:<port> (http:// when TLS is off) */
  url: string;
  /** PEM of the self-signed serving certificate (which is its own CA); undefined over HTTP. */
  caCert: string | undefined;
  kubeconfigPath: string;
  token: string;
  dataDir: string;
  isolation: Isolation;
  /** In-process access to the API semantics (for assertions and setup without HTTP). */
  api: ObjectApi;
  /** Every 403 the authorizer gave (user, verb, resource, namespace, name, message): a product run under its chart's RBAC can assert it met none. */
  denials: RbacAuthorizer["denials"];
  /** The pods' and nodes' address: 127.0.0.1, or ::1 with `ipFamily: "IPv6"`. */
  podIP: string;
  /** Errors raised inside controllers and the node agent; tests can assert it stays empty. */
  errors: unknown[];
  /** Environment for running kubectl against the cluster (KUBECONFIG, a private discovery cache). */
  kubectlEnv(): Record<string, string>;
  /** SIGKILLs the container and reports it OOMKilled (exit 137); false if it is not running. */
  simulateOom(namespace: string, pod: string, container: string): boolean;
  /** Node-pressure eviction: the pod is killed and ends Failed, reason Evicted, with DisruptionTarget. */
  evict(namespace: string, pod: string): void;
  setImagePullable(image: string, pullable: boolean): void;
  /** A bearer token of the ServiceAccount (as mounted into its pods), for calling the API as it. */
  serviceAccountToken(namespace: string, name: string): string;
  /** Where a hostPath volume's `path` lives on a simulated node (default the first; the path itself with `hostPaths: "real"`). */
  hostPath(path: string, node?: string): string;
  /** Forgets all watch history: any watch resuming from an earlier resourceVersion gets 410. */
  compactWatchHistory(): void;
  /**
   * Fault: while on, each new watch gets its 200 and headers, then nothing (no events, no end
   * at timeoutSeconds or watchTimeoutMs) until its client closes it. Watches already open and
   * lists are unaffected.
   */
  stallWatches(on: boolean): void;
  /** How many stalled watches their clients still hold open. */
  readonly stalledWatches: number;
  /**
   * Fault: while `match` is set, each new request it matches (method, path with query) is
   * accepted and never answered, not even with response headers, until its client closes it;
   * `undefined` ends the fault (held requests stay held).
   */
  stallRequests(match: ((method: string, url: string) => boolean) | undefined): void;
  /** How many requests held by `stallRequests` or `loseAnswers` their clients still hold open. */
  readonly stalledRequests: number;
  /** Matching requests (undefined: none) are carried out but never answered, as when a reply is lost. */
  loseAnswers(match: ((method: string, url: string) => boolean) | undefined): void;
  close(): Promise<void>;
}

const defaultTimings: ClusterTimings = {
  imagePullBackoffMs: 1000,
  crashLoopBackoffMs: 1000,
  configRetryMs: 500,
  probeSecondMs: 1000,
  evictionCheckMs: 10_000,
  podBackoffMs: 1000,
  namespaceRetryMs: 100,
};

function kubeconfig(url: string, token: string, ca: string | undefined): string {
  return [
    "apiVersion: v1",
    "kind: Config",
    "clusters:",
    "- name: kube-test-cluster",
    "  cluster:",
    `    server: ${url}`,
    ...(ca ? [`    certificate-authority-data: ${Buffer.from(ca).toString("base64")}`] : []),
    "contexts:",
    "- name: kube-test-cluster",
    "  context:",
    "    cluster: kube-test-cluster",
    "    user: kube-test-cluster",
    "    namespace: default",
    "current-context: kube-test-cluster",
    "users:",
    "- name: kube-test-cluster",
    "  user:",
    `    token: ${token}`,
    "",
  ].join("\n");
}

export async function startTestCluster(options: TestClusterOptions = {}): Promise<TestCluster> {
  const ownDir = options.dataDir === undefined;
  const dataDir = options.dataDir ?? mkdtempSync(join(tmpdir(), "kube-test-cluster-"));
  mkdirSync(dataDir, { recursive: true });
  const errors: unknown[] = [];
  const onError =
    options.onError ??
    ((e: unknown) => {
      errors.push(e);
      if (process.env.KTC_DEBUG) console.error("kube-test-cluster:", e);
    });
  const timings: ClusterTimings = { ...defaultTimings, ...(options.timings ?? {}) };
  const token = `ktc-${randomBytes(16).toString("hex")}`;
  const id = randomBytes(8).toString("hex");
  const isolation: Isolation =
    options.isolation === undefined || options.isolation === "auto" ? detectIsolation() : options.isolation;
  const nodeName = options.nodeName ?? "ktc-node";
  const podIP = options.ipFamily === "IPv6" ? "::1" : "127.0.0.1";

  const store = new Store(options.watchHistory ?? 1000);
  const api = new ObjectApi(store, new ResourceRegistry());
  serveCustomResources(api);
  const events = new EventRecorder(api);
  const nsType = api.type("", "namespaces");
  const saType = api.type("", "serviceaccounts");
  const cert = options.tls === false ? undefined : servingCert();
  if (options.tls === true && !cert)
    throw new Error("kube-test-cluster: tls requested but the openssl CLI could not make a certificate");
  const tokens = new TokenAuthority(api, token);
  const authorizer = new RbacAuthorizer(api);
  api.admission.push(
    serviceAccountAdmission(api),
    podSecurityAdmission(api),
    ownerReferencesAdmission(api, authorizer),
  );
  api.admission.push(sccUidAdmission(api), resourceQuotaAdmission(api));
  // The service-account and root-CA publisher controllers' visible effects: a "default"
  // ServiceAccount and the kube-root-ca.crt ConfigMap in every namespace.
  const unsubscribeSa = store.subscribe((e) => {
    if (e.typeKey !== "/namespaces" || e.type !== "ADDED") return;
    const ns = e.object.metadata.name ?? "";
    setImmediate(() => {
      for (const [t, body] of [
        [saType, { metadata: { name: "default" } }],
        [api.type("", "configmaps"), { metadata: { name: rootCaConfigMap }, data: { "ca.crt": cert?.cert ?? "" } }],
      ] as const) {
        try {
          api.create(t, ns, body, { system: true });
        } catch (err) {
          if (!(err instanceof StatusError)) onError(err);
        }
      }
    });
  });
  api.create(
    api.type("rbac.authorization.k8s.io", "clusterroles"),
    undefined,
    {
      metadata: { name: "cluster-admin" },
      rules: [
        { apiGroups: ["*"], resources: ["*"], verbs: ["*"] },
        { nonResourceURLs: ["*"], verbs: ["*"] },
      ],
    },
    { system: true },
  );
  api.create(
    api.type("rbac.authorization.k8s.io", "clusterrolebindings"),
    undefined,
    {
      metadata: { name: "cluster-admin" },
      roleRef: { apiGroup: "rbac.authorization.k8s.io", kind: "ClusterRole", name: "cluster-admin" },
      subjects: [{ apiGroup: "rbac.authorization.k8s.io", kind: "Group", name: "system:masters" }],
    },
    { system: true },
  );
  for (const ns of ["default", "kube-system", "kube-public", "kube-node-lease", ...(options.namespaces ?? [])])
    api.create(nsType, undefined, { metadata: { name: ns } }, { system: true });

  const gc = new GarbageCollector(api, (_k, e) => onError(e));
  const namespaces = new NamespaceController(api, timings.namespaceRetryMs, (_k, e) => onError(e));
  const jobs = new JobController(api, events, timings, (_k, e) => onError(e));
  const deployments = new DeploymentController(api, events, timings.podBackoffMs, (_k, e) => onError(e));
  const daemonSets = new DaemonSetController(api, events, timings.podBackoffMs, (_k, e) => onError(e));
  const disruption = new DisruptionController(api, (_k, e) => onError(e));
  const scheduler = new Scheduler(api, events, (_k, e) => onError(e));
  const images = new ImageCatalog(options.images ?? {}, options.unpullableImages ?? [], options.podman?.env, id);
  const nodeList: NodeOptions[] = options.nodes && options.nodes.length > 0 ? options.nodes : [{ name: nodeName }];
  const hostRoot = (n: string): string =>
    n === nodeList[0]?.name ? join(dataDir, "host") : join(dataDir, "nodes", n, "host");
  const agents = new Map<string, NodeAgent>();
  for (const n of nodeList) {
    agents.set(
      n.name,
      new NodeAgent({
        api,
        events,
        images,
        timings,
        nodeName: n.name,
        ...(n.labels ? { labels: n.labels } : {}),
        ...(n.taints ? { taints: n.taints } : {}),
        ...(n.allocatable ? { allocatable: n.allocatable } : {}),
        isolation,
        podIP,
        dataDir,
        baseEnv: options.baseEnv ?? {
          PATH: process.env.PATH ?? "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
          HOME: "/root",
        },
        apiPort: () => port,
        serviceAccountToken: (ns, name) => tokens.issue(ns, name),
        hostPathRoot: options.hostPaths === "real" ? undefined : hostRoot(n.name),
        onError,
      }),
    );
  }
  const agentFor = (ns: string, pod: string): NodeAgent => {
    const p = api.get(api.type("", "pods"), ns, pod);
    const n = isObject(p.spec) ? String(p.spec.nodeName ?? "") : "";
    const a = agents.get(n);
    if (!a) throw new Error(`pod ${ns}/${pod} is not running on any node`);
    return a;
  };
  const nodeHooks: NodeHooks = {
    streamLog: (pod, container, opts, write, signal) => {
      const a = agents.get(isObject(pod.spec) ? String(pod.spec.nodeName ?? "") : "");
      if (!a)
        throw badRequest(
          `container "${container}" in pod "${pod.metadata.name ?? ""}" is waiting to start: ContainerCreating`,
        );
      return a.streamLog(pod, container, opts, write, signal);
    },
    evict: (ns, name, deleteOptions) => evictPod(api, ns, name, deleteOptions),
  };

  const handler = new ApiHttpHandler(api, nodeHooks, {
    // Over plain HTTP kubectl sends no token: everything is then served as the admin.
    auth: cert ? { authenticate: (t) => tokens.authenticate(t), authorizer } : undefined,
    watchTimeoutMs: options.watchTimeoutMs ?? 30 * 60_000,
    gitVersion: options.gitVersion ?? "v1.32.0",
    bookmarkIntervalMs: options.bookmarkIntervalMs ?? 10_000,
    ...(options.onRequest ? { onRequest: options.onRequest } : {}),
  });
  let port = 0;
  const server = cert
    ? createHttpsServer({ cert: cert.cert, key: cert.key }, handler.handle)
    : createServer(handler.handle);
  await new Promise<void>((resolve, reject) => {
    server.once("error", reject);
    server.listen(0, "127.0.0.1", () => resolve());
  });
  port = (server.address() as AddressInfo).port;
  const url = `${cert ? "https" : "http"}://127.0.0.1:${port}`;
  const kubeconfigPath = join(dataDir, "kubeconfig");
  writeFileSync(kubeconfigPath, kubeconfig(url, token, cert?.cert), { mode: 0o600 });

  let closing: Promise<void> | undefined;
  return {
    id,
    url,
    caCert: cert?.cert,
    kubeconfigPath,
    token,
    dataDir,
    isolation,
    podIP,
    api,
    errors,
    denials: authorizer.denials,
    kubectlEnv: () => ({ KUBECONFIG: kubeconfigPath, KUBECACHEDIR: join(dataDir, "kubectl-cache") }),
    simulateOom: (ns, pod, container) => agentFor(ns, pod).oomKill(ns, pod, container),
    evict: (ns, pod) => agentFor(ns, pod).evictByKubelet(ns, pod),
    serviceAccountToken: (ns, name) => tokens.issue(ns, name),
    hostPath: (p, n) => (options.hostPaths === "real" ? p : join(hostRoot(n ?? nodeList[0]?.name ?? nodeName), p)),
    setImagePullable: (image, pullable) => images.setPullable(image, pullable),
    compactWatchHistory: () => store.compact(),
    stallWatches: (on) => {
      handler.stallWatches = on;
    },
    get stalledWatches() {
      return handler.stalledWatches;
    },
    stallRequests: (match) => {
      handler.stallRequests = match;
    },
    loseAnswers: (match) => {
      handler.loseAnswers = match;
    },
    get stalledRequests() {
      return handler.stalledRequests;
    },
    close() {
      closing ??= (async () => {
        // Stop taking requests, then stop controllers, then kill every container; each step runs even if one fails.
        const steps: (() => Promise<void> | void)[] = [
          () => {
            server.closeAllConnections();
            return new Promise<void>((r) => server.close(() => r()));
          },
          () => unsubscribeSa(),
          () => jobs.close(),
          () => deployments.close(),
          () => daemonSets.close(),
          () => disruption.close(),
          () => scheduler.close(),
          () => namespaces.close(),
          () => gc.close(),
          ...[...agents.values()].map((a) => () => a.close()),
          () => {
            if (ownDir) rmSync(dataDir, { recursive: true, force: true });
          },
        ];
        for (const step of steps) {
          try {
            await step();
          } catch (e) {
            onError(e);
          }
        }
      })();
      return closing;
    },
  };
}
