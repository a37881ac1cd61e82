/**
 * startTestCluster: the API server, controllers (garbage collector, namespaces,
 * Jobs, service accounts) and one node agent, on 127.0.0.1 with a random port, plus
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
import type { NodeTimings } from "./node/pod-worker.js";
import { servingCert } from "./tls.js";
import { ownerReferencesAdmission, podSecurityAdmission, rootCaConfigMap, serviceAccountAdmission } from "./api/admission.js";
import { RbacAuthorizer, TokenAuthority } from "./api/auth.js";

export interface ClusterTimings extends NodeTimings, JobControllerTimings {
  /** How often a Terminating namespace is re-checked for remaining objects. */
  namespaceRetryMs: number;
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
  /** Images (or repositories) whose pull fails (besides any tagged `:pull-fails`). */
  unpullableImages?: string[];
  /** "auto" (default): mount namespaces when permitted, else path rewriting. */
  isolation?: Isolation | "auto";
  /** "mapped" (default): hostPath volumes live under dataDir/host; "real": the host's own paths. */
  hostPaths?: "mapped" | "real";
  nodeName?: string;
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
}

export interface TestCluster {
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
  /** Where a hostPath volume's `path` lives on the simulated node (the path itself with `hostPaths: "real"`). */
  hostPath(path: string): string;
  /** Forgets all watch history: any watch resuming from an earlier resourceVersion gets 410. */
  compactWatchHistory(): void;
  close(): Promise<void>;
}

const defaultTimings: ClusterTimings = {
  imagePullBackoffMs: 1000,
  crashLoopBackoffMs: 1000,
  configRetryMs: 500,
  probeSecondMs: 1000,
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
  const onError = options.onError ?? ((e: unknown) => {
    errors.push(e);
    if (process.env.KTC_DEBUG) console.error("kube-test-cluster:", e);
  });
  const timings: ClusterTimings = { ...defaultTimings, ...(options.timings ?? {}) };
  const token = `ktc-${randomBytes(16).toString("hex")}`;
  const isolation: Isolation = options.isolation === undefined || options.isolation === "auto" ? detectIsolation() : options.isolation;
  const nodeName = options.nodeName ?? "ktc-node";

  const store = new Store(options.watchHistory ?? 1000);
  const api = new ObjectApi(store, new ResourceRegistry());
  serveCustomResources(api);
  const events = new EventRecorder(api);
  const nsType = api.type("", "namespaces");
  const saType = api.type("", "serviceaccounts");
  const cert = options.tls === false ? undefined : servingCert();
  if (options.tls === true && !cert) throw new Error("kube-test-cluster: tls requested but the openssl CLI could not make a certificate");
  const tokens = new TokenAuthority(api, token);
  const authorizer = new RbacAuthorizer(api);
  api.admission.push(serviceAccountAdmission(api), podSecurityAdmission(api), ownerReferencesAdmission(api, authorizer));
  // The service-account and root-CA publisher controllers' visible effects: a "default"
  // ServiceAccount and the kube-root-ca.crt ConfigMap in every namespace.
  const unsubscribeSa = store.subscribe((e) => {
    if (e.typeKey !== "/namespaces" || e.type !== "ADDED") return;
    const ns = e.object.metadata.name ?? "";
    setImmediate(() => {
      for (const [t, body] of [[saType, { metadata: { name: "default" } }], [api.type("", "configmaps"), { metadata: { name: rootCaConfigMap }, data: { "ca.crt": cert?.cert ?? "" } }]] as const) {
        try {
          api.create(t, ns, body, { system: true });
        } catch (err) {
          if (!(err instanceof StatusError)) onError(err);
        }
      }
    });
  });
  api.create(api.type("rbac.authorization.k8s.io", "clusterroles"), undefined, { metadata: { name: "cluster-admin" }, rules: [{ apiGroups: ["*"], resources: ["*"], verbs: ["*"] }, { nonResourceURLs: ["*"], verbs: ["*"] }] }, { system: true });
  api.create(api.type("rbac.authorization.k8s.io", "clusterrolebindings"), undefined, { metadata: { name: "cluster-admin" }, roleRef: { apiGroup: "rbac.authorization.k8s.io", kind: "ClusterRole", name: "cluster-admin" }, subjects: [{ apiGroup: "rbac.authorization.k8s.io", kind: "Group", name: "system:masters" }] }, { system: true });
  for (const ns of ["default", "kube-system", "kube-public", "kube-node-lease", ...(options.namespaces ?? [])]) api.create(nsType, undefined, { metadata: { name: ns } }, { system: true });

  const gc = new GarbageCollector(api, (_k, e) => onError(e));
  const namespaces = new NamespaceController(api, timings.namespaceRetryMs, (_k, e) => onError(e));
  const jobs = new JobController(api, events, timings, (_k, e) => onError(e));
  const deployments = new DeploymentController(api, (_k, e) => onError(e));
  const images = new ImageCatalog(options.images ?? {}, options.unpullableImages ?? []);
  const node = new NodeAgent({
    api,
    events,
    images,
    timings,
    nodeName,
    isolation,
    dataDir,
    baseEnv: options.baseEnv ?? { PATH: process.env.PATH ?? "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin", HOME: "/root" },
    apiPort: () => port,
    serviceAccountToken: (ns, name) => tokens.issue(ns, name),
    hostPathRoot: options.hostPaths === "real" ? undefined : join(dataDir, "host"),
    onError,
  });

  const handler = new ApiHttpHandler(api, node, {
    // Over plain HTTP kubectl sends no token: everything is then served as the admin.
    auth: cert ? { authenticate: (t) => tokens.authenticate(t), authorizer } : undefined,
    watchTimeoutMs: options.watchTimeoutMs ?? 30 * 60_000,
    gitVersion: options.gitVersion ?? "v1.32.0",
    bookmarkIntervalMs: options.bookmarkIntervalMs ?? 10_000,
    ...(options.onRequest ? { onRequest: options.onRequest } : {}),
  });
  let port = 0;
  const server = cert ? createHttpsServer({ cert: cert.cert, key: cert.key }, handler.handle) : createServer(handler.handle);
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
    url,
    caCert: cert?.cert,
    kubeconfigPath,
    token,
    dataDir,
    isolation,
    api,
    errors,
    kubectlEnv: () => ({ KUBECONFIG: kubeconfigPath, KUBECACHEDIR: join(dataDir, "kubectl-cache") }),
    simulateOom: (ns, pod, container) => node.oomKill(ns, pod, container),
    evict: (ns, pod) => node.evictByKubelet(ns, pod),
    serviceAccountToken: (ns, name) => tokens.issue(ns, name),
    hostPath: (p) => (options.hostPaths === "real" ? p : join(dataDir, "host", p)),
    setImagePullable: (image, pullable) => images.setPullable(image, pullable),
    compactWatchHistory: () => store.compact(),
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
          () => namespaces.close(),
          () => gc.close(),
          () => node.close(),
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
