/**
 * One node of the cluster: its Node object and a kubelet that runs the pods bound to
 * it (one PodWorker per pod), serves their logs, and performs node-pressure evictions
 * and simulated OOM kills. Binding is the scheduler's (controllers/scheduler.ts).
 */
import { rmSync } from "node:fs";
import { join } from "node:path";
import type { EventRecorder } from "../api/events.js";
import type { LogOptions } from "../api/http-server.js";
import type { ObjectApi } from "../api/object-api.js";
import { badRequest, StatusError } from "../api/status-error.js";
import type { JsonObject, KObject } from "../api/types.js";
import { isObject, isoNow } from "../api/types.js";
import { WorkQueue } from "../controllers/work-queue.js";
import type { Isolation } from "./container-process.js";
import type { ImageCatalog } from "./images.js";
import type { ContainerLog } from "./log-store.js";
import { streamContainerLog } from "./log-store.js";
import type { NodeTimings } from "./pod-worker.js";
import { PodWorker } from "./pod-worker.js";

export interface NodeAgentOptions {
  api: ObjectApi;
  events: EventRecorder;
  images: ImageCatalog;
  timings: NodeTimings;
  nodeName: string;
  /** Extra Node labels, taints and allocatable (default cpu 2, memory 8Gi, pods 110). */
  labels?: Record<string, string>;
  taints?: JsonObject[];
  allocatable?: Record<string, string>;
  isolation: Isolation;
  /** The pods' and the node's address (see WorkerContext.podIP). */
  podIP: string;
  dataDir: string;
  baseEnv: Record<string, string>;
  /** The API server's port once it listens (for KUBERNETES_SERVICE_PORT). */
  apiPort(): number;
  serviceAccountToken(namespace: string, name: string): string;
  /** undefined: hostPath volumes use the real host paths. */
  hostPathRoot: string | undefined;
  onError(e: unknown): void;
}

export class NodeAgent {
  private readonly workers = new Map<string, PodWorker>();
  private readonly logs = new Map<string, ContainerLog>();
  private readonly queue: WorkQueue;
  private readonly unsubscribe: () => void;

  constructor(private readonly o: NodeAgentOptions) {
    this.queue = new WorkQueue(
      (key) => this.process(key),
      (_k, e) => o.onError(e),
    );
    this.unsubscribe = o.api.store.subscribe((e) => {
      if (e.typeKey !== "/pods") return;
      const m = e.object.metadata;
      this.queue.add(`${m.namespace ?? ""}|${m.name ?? ""}|${m.uid ?? ""}`);
    });
    o.api.create(
      o.api.type("", "nodes"),
      undefined,
      {
        metadata: {
          name: o.nodeName,
          labels: {
            "kubernetes.io/hostname": o.nodeName,
            "kubernetes.io/os": "linux",
            "kubernetes.io/arch": "amd64",
            ...(o.labels ?? {}),
          },
        },
        spec: o.taints && o.taints.length > 0 ? { taints: o.taints } : {},
      },
      { system: true },
    );
    const alloc = { cpu: "2", memory: "8Gi", pods: "110", ...(o.allocatable ?? {}) };
    o.api.mutate(
      o.api.type("", "nodes"),
      undefined,
      o.nodeName,
      (n) => {
        const now = isoNow();
        n.status = {
          capacity: alloc,
          allocatable: alloc,
          conditions: [
            {
              type: "Ready",
              status: "True",
              reason: "KubeletReady",
              message: "kubelet is posting ready status",
              lastHeartbeatTime: now,
              lastTransitionTime: now,
            },
          ],
          addresses: [
            { type: "InternalIP", address: o.podIP },
            { type: "Hostname", address: o.nodeName },
          ],
          nodeInfo: {
            kubeletVersion: "v1.32.0",
            containerRuntimeVersion: "ktc://local-processes",
            operatingSystem: "linux",
            architecture: "amd64",
          },
        };
      },
      "status",
    );
  }

  private get pods() {
    return this.o.api.type("", "pods");
  }

  private process(key: string): void {
    const [ns = "", name = "", uid = ""] = key.split("|");
    const pod = this.o.api.tryGet(this.pods, ns, name);
    const worker = this.workers.get(uid);
    if (!pod || pod.metadata.uid !== uid) {
      // Removed (or replaced by a namesake): kill at once.
      if (worker) {
        worker.stop("deleted", 0);
        void worker.done.then(() => this.forget(uid));
      }
      return;
    }
    const spec = isObject(pod.spec) ? pod.spec : {};
    const phase = isObject(pod.status) ? pod.status.phase : undefined;
    if (spec.nodeName !== this.o.nodeName) return;
    if (pod.metadata.deletionTimestamp) {
      if (worker) worker.stop("deleted", pod.metadata.deletionGracePeriodSeconds ?? 0);
      else {
        try {
          this.o.api.delete(this.pods, ns, name, { gracePeriodSeconds: 0, preconditions: { uid } });
        } catch (e) {
          if (!(e instanceof StatusError)) throw e;
        }
      }
      return;
    }
    if (!worker && phase !== "Succeeded" && phase !== "Failed") {
      const w = new PodWorker(
        {
          api: this.o.api,
          events: this.o.events,
          images: this.o.images,
          timings: this.o.timings,
          nodeName: this.o.nodeName,
          isolation: this.o.isolation,
          podIP: this.o.podIP,
          baseEnv: this.o.baseEnv,
          serviceEnv: () => {
            const port = String(this.o.apiPort());
            return {
              KUBERNETES_SERVICE_HOST: "127.0.0.1",
              KUBERNETES_SERVICE_PORT: port,
              KUBERNETES_SERVICE_PORT_HTTPS: port,
              KUBERNETES_PORT: `tcp://127.0.0.1:${port}`,
              KUBERNETES_PORT_443_TCP: `tcp://127.0.0.1:${port}`,
              KUBERNETES_PORT_443_TCP_PROTO: "tcp",
              KUBERNETES_PORT_443_TCP_PORT: port,
              KUBERNETES_PORT_443_TCP_ADDR: "127.0.0.1",
            };
          },
          volumeContext: (podDir) => ({
            api: this.o.api,
            podDir,
            hostPathRoot: this.o.hostPathRoot,
            pvcRoot: join(this.o.dataDir, "pvc"),
            serviceAccountToken: (ns, name) => this.o.serviceAccountToken(ns, name),
          }),
          podDir: (u) => join(this.o.dataDir, "pods", u),
          registerLog: (u, c, r, log) => this.logs.set(`${u}/${c}/${r}`, log),
          onError: this.o.onError,
        },
        pod,
      );
      this.workers.set(uid, w);
      w.start();
    }
  }

  private forget(uid: string): void {
    this.workers.delete(uid);
    for (const k of [...this.logs.keys()]) if (k.startsWith(`${uid}/`)) this.logs.delete(k);
    rmSync(join(this.o.dataDir, "pods", uid), { recursive: true, force: true });
  }

  async streamLog(
    pod: KObject,
    container: string,
    opts: LogOptions,
    write: (chunk: Buffer) => boolean,
    signal: AbortSignal,
  ): Promise<void> {
    const uid = pod.metadata.uid ?? "";
    const status = isObject(pod.status) ? pod.status : {};
    const all = [
      ...(Array.isArray(status.initContainerStatuses) ? status.initContainerStatuses : []),
      ...(Array.isArray(status.containerStatuses) ? status.containerStatuses : []),
    ].filter(isObject);
    const cs = all.find((c) => c.name === container);
    const restart = typeof cs?.restartCount === "number" ? cs.restartCount : 0;
    const log = this.logs.get(`${uid}/${container}/${opts.previous ? restart - 1 : restart}`);
    if (!log) {
      if (opts.previous)
        throw badRequest(`previous terminated container "${container}" in pod "${pod.metadata.name ?? ""}" not found`);
      const waiting = isObject(cs?.state) && isObject(cs.state.waiting) ? (cs.state.waiting as JsonObject) : undefined;
      const reason = String(waiting?.reason ?? "ContainerCreating");
      const why =
        reason === "ImagePullBackOff" || reason === "ErrImagePull"
          ? "trying and failing to pull image"
          : reason === "InvalidImageName"
            ? "invalid image name"
            : reason;
      throw badRequest(`container "${container}" in pod "${pod.metadata.name ?? ""}" is waiting to start: ${why}`);
    }
    await streamContainerLog(log, opts, write, signal);
  }

  private workerFor(ns: string, name: string): PodWorker {
    const pod = this.o.api.get(this.pods, ns, name);
    const w = this.workers.get(pod.metadata.uid ?? "");
    if (!w) throw new Error(`pod ${ns}/${name} is not running on ${this.o.nodeName}`);
    return w;
  }

  /** Node-pressure eviction by the kubelet: the pod is killed and ends Failed/Evicted. */
  evictByKubelet(ns: string, name: string): void {
    this.workerFor(ns, name).stop("evicted", 0);
  }

  oomKill(ns: string, name: string, container: string): boolean {
    return this.workerFor(ns, name).oom(container);
  }

  async close(): Promise<void> {
    this.unsubscribe();
    await this.queue.close();
    for (const w of this.workers.values()) w.stop("deleted", 0);
    await Promise.allSettled([...this.workers.values()].map((w) => w.done));
  }
}
