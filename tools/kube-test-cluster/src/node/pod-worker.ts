/**
 * Kubelet for one pod: volumes, then init containers in order, then all containers
 * at once, each as a local process; restart policy with CrashLoopBackOff; image
 * failures (InvalidImageName, ErrImagePull/ImagePullBackOff) and config errors
 * (CreateContainerConfigError) as waiting reasons; graceful stop on deletion
 * (SIGTERM, grace period, SIGKILL); OOM kill, node-pressure eviction and the pod's
 * own activeDeadlineSeconds. Every change is written to the pod's status.
 */
import { randomBytes } from "node:crypto";
import { lstatSync, mkdirSync, readdirSync } from "node:fs";
import { quantity } from "../controllers/scheduler.js";
import { join, posix } from "node:path";
import type { EventRecorder, EventType } from "../api/events.js";
import type { ObjectApi } from "../api/object-api.js";
import { StatusError } from "../api/status-error.js";
import type { JsonObject, KObject } from "../api/types.js";
import { isObject, isoNow } from "../api/types.js";
import type { ContainerUser, Isolation, Mount } from "./container-process.js";
import { ContainerProcess } from "./container-process.js";
import { ContainerConfigError, expand, resolveEnv } from "./env.js";
import type { ImageCatalog } from "./images.js";
import { normalizeImage } from "./images.js";
import { ContainerLog } from "./log-store.js";
import type { PreparedVolume, VolumeContext } from "./volumes.js";
import { prepareVolume, VolumeError } from "./volumes.js";
import type { ExecTarget } from "./probes.js";
import { probeTiming, runProbe } from "./probes.js";

export const annotationOomKill = "test-cluster.drover.dev/oom-kill";
export const annotationEvictAfterMs = "test-cluster.drover.dev/evict-after-ms";

export interface NodeTimings {
  /**
   * Time in ErrImagePull before ImagePullBackOff, and the first back-off before the next pull; the
   * back-off doubles per failed pull up to 32× (Kubernetes: 10 s, doubling to 5 min).
   */
  imagePullBackoffMs: number;
  /** First CrashLoopBackOff delay; doubles per restart (Kubernetes: 10 s). */
  crashLoopBackoffMs: number;
  /** Retry interval for missing Secrets/ConfigMaps (mounts and env). */
  configRetryMs: number;
  /** Interval of the kubelet's emptyDir usage check (sizeLimit eviction); Kubernetes: 10 s housekeeping. */
  evictionCheckMs: number;
  /** Length of one second in probe settings (initialDelaySeconds, periodSeconds; not timeoutSeconds); Kubernetes: 1000. */
  probeSecondMs: number;
  /**
   * Length of one second in readiness probe settings only (default: probeSecondMs). A short one
   * makes Ready follow a container's health quickly, while liveness and startup keep their real
   * pace, so a container slow to start on a busy machine is not killed for it.
   */
  readinessProbeSecondMs?: number;
}

export interface WorkerContext {
  api: ObjectApi;
  events: EventRecorder;
  images: ImageCatalog;
  timings: NodeTimings;
  nodeName: string;
  isolation: Isolation;
  /**
   * The address kubelet probes and the downward API gives as the pod's (and host's) IP: the
   * loopback of the cluster's IP family, where a listener bound to the other family is refused.
   */
  podIP: string;
  baseEnv: Record<string, string>;
  /** KUBERNETES_SERVICE_HOST/PORT and friends, which kubelet gives every container. */
  serviceEnv(): Record<string, string>;
  volumeContext(podDir: string): VolumeContext;
  podDir(uid: string): string;
  registerLog(uid: string, container: string, restart: number, log: ContainerLog): void;
  onError(e: unknown): void;
}

type State = JsonObject;

interface Runtime {
  name: string;
  image: string;
  init: boolean;
  /** A native sidecar: an init container with `restartPolicy: Always`. */
  sidecar: boolean;
  /** Called each time the container's process has started. */
  onStarted?: () => void;
  spec: JsonObject;
  state: State;
  lastState: State;
  restartCount: number;
  ready: boolean;
  started: boolean;
  containerID?: string;
  proc?: ContainerProcess;
  oomKilled: boolean;
}

type StopReason = "deleted" | "evicted" | "deadline";

const managedConditions = ["PodReadyToStartContainers", "Initialized", "Ready", "ContainersReady", "PodScheduled"];
const evictionMessage = "The node was low on resource: memory. Threshold quantity: 100Mi, available: 10Mi. ";

function arr(v: unknown): JsonObject[] {
  return Array.isArray(v) ? v.filter(isObject) : [];
}

export class PodWorker {
  readonly uid: string;
  readonly ns: string;
  readonly name: string;
  private readonly spec: JsonObject;
  private readonly restartPolicy: string;
  private readonly inits: Runtime[];
  private readonly mains: Runtime[];
  private readonly conditions = new Map<string, JsonObject>();
  private readonly abort = new AbortController();
  private readonly timers: NodeJS.Timeout[] = [];
  private phase = "Pending";
  private reason: string | undefined;
  private message: string | undefined;
  private startTime: string | undefined;
  private stopReason: StopReason | undefined;
  private killTimer: NodeJS.Timeout | undefined;
  private killAt = Infinity;
  /** The regular containers have ended: sidecars are being stopped, not restarted. */
  private sidecarsEnding = false;
  private volumes = new Map<string, PreparedVolume>();
  /** Why the kubelet evicted the pod, when not memory pressure (emptyDir over its sizeLimit). */
  private evictionWhy: string | undefined;
  finished = false;
  done: Promise<void> = Promise.resolve();

  constructor(
    private readonly ctx: WorkerContext,
    private pod: KObject,
  ) {
    this.uid = pod.metadata.uid ?? "";
    this.ns = pod.metadata.namespace ?? "default";
    this.name = pod.metadata.name ?? "";
    this.spec = isObject(pod.spec) ? pod.spec : {};
    this.restartPolicy = String(this.spec.restartPolicy ?? "Always");
    const mk = (c: JsonObject, init: boolean): Runtime => ({
      name: String(c.name ?? ""),
      image: String(c.image ?? ""),
      init,
      sidecar: init && c.restartPolicy === "Always",
      spec: c,
      state: {
        waiting: { reason: init || arr(this.spec.initContainers).length > 0 ? "PodInitializing" : "ContainerCreating" },
      },
      lastState: {},
      restartCount: 0,
      ready: false,
      started: false,
      oomKilled: false,
    });
    this.inits = arr(this.spec.initContainers).map((c) => mk(c, true));
    this.mains = arr(this.spec.containers).map((c) => mk(c, false));
  }

  start(): void {
    this.done = this.run().catch((e: unknown) => this.ctx.onError(e));
  }

  get stopping(): boolean {
    return this.stopReason !== undefined;
  }

  private setCondition(type: string, status: boolean, reason?: string, message?: string): void {
    const prev = this.conditions.get(type);
    const s = status ? "True" : "False";
    if (prev && prev.status === s && prev.reason === reason) return;
    this.conditions.set(type, {
      type,
      status: s,
      lastProbeTime: null,
      lastTransitionTime: isoNow(),
      ...(reason ? { reason } : {}),
      ...(message ? { message } : {}),
    });
  }

  private event(type: EventType, reason: string, message: string, container?: Runtime): void {
    const fieldPath = container
      ? `spec.${container.init ? "initContainers" : "containers"}{${container.name}}`
      : undefined;
    this.ctx.events.record("kubelet", this.ctx.nodeName, this.pod, type, reason, message, fieldPath);
  }

  /** Waits `ms`, ending early when the pod stops (or `also` aborts). */
  private sleep(ms: number, also?: AbortSignal): Promise<void> {
    return new Promise((resolve) => {
      if (this.abort.signal.aborted || also?.aborted) return resolve();
      const done = (): void => {
        clearTimeout(timer);
        this.abort.signal.removeEventListener("abort", done);
        also?.removeEventListener("abort", done);
        resolve();
      };
      const timer = setTimeout(done, ms);
      timer.unref();
      this.abort.signal.addEventListener("abort", done, { once: true });
      also?.addEventListener("abort", done, { once: true });
    });
  }

  private containerStatus(c: Runtime): JsonObject {
    return {
      name: c.name,
      state: c.state,
      lastState: c.lastState,
      ready: c.ready,
      restartCount: c.restartCount,
      image: c.image,
      imageID: c.containerID ? `${normalizeImage(c.image)}@sha256:${"0".repeat(64)}` : "",
      ...(c.containerID ? { containerID: `containerd://${c.containerID}` } : {}),
      started: c.started,
    };
  }

  private status(existing: JsonObject): JsonObject {
    // Conditions others set (DisruptionTarget from the eviction API) are kept; ours replace theirs.
    const own = [...managedConditions, "DisruptionTarget"]
      .map((t) => this.conditions.get(t))
      .filter((c): c is JsonObject => c !== undefined);
    const kept = arr(existing.conditions).filter(
      (c) => !own.some((o) => o.type === c.type) && !managedConditions.includes(String(c.type)),
    );
    const conds = [...kept, ...own];
    return {
      phase: this.phase,
      conditions: conds,
      ...(this.reason ? { reason: this.reason } : {}),
      ...(this.message ? { message: this.message } : {}),
      hostIP: this.ctx.podIP,
      hostIPs: [{ ip: this.ctx.podIP }],
      podIP: this.ctx.podIP,
      podIPs: [{ ip: this.ctx.podIP }],
      ...(this.startTime ? { startTime: this.startTime } : {}),
      ...(this.inits.length > 0 ? { initContainerStatuses: this.inits.map((c) => this.containerStatus(c)) } : {}),
      containerStatuses: [...this.mains]
        .sort((a, b) => a.name.localeCompare(b.name))
        .map((c) => this.containerStatus(c)),
      qosClass: String(existing.qosClass ?? "BestEffort"),
    };
  }

  /** Writes the computed status to the pod (if it is still this pod). */
  private sync(): void {
    const t = this.ctx.api.type("", "pods");
    const cur = this.ctx.api.tryGet(t, this.ns, this.name);
    if (!cur || cur.metadata.uid !== this.uid) return;
    try {
      const updated = this.ctx.api.mutate(
        t,
        this.ns,
        this.name,
        (p) => {
          p.status = this.status(isObject(p.status) ? p.status : {});
        },
        "status",
      );
      if (updated) this.pod = updated;
    } catch (e) {
      if (!(e instanceof StatusError)) throw e;
    }
  }

  private async run(): Promise<void> {
    this.startTime = isoNow();
    this.setCondition("PodReadyToStartContainers", false);
    this.setCondition(
      "Initialized",
      this.inits.length === 0,
      this.inits.length > 0 ? "ContainersNotInitialized" : undefined,
      this.inits.length > 0
        ? `containers with incomplete status: [${this.inits.map((c) => c.name).join(" ")}]`
        : undefined,
    );
    this.setCondition(
      "Ready",
      false,
      "ContainersNotReady",
      `containers with unready status: [${this.mains.map((c) => c.name).join(" ")}]`,
    );
    this.setCondition(
      "ContainersReady",
      false,
      "ContainersNotReady",
      `containers with unready status: [${this.mains.map((c) => c.name).join(" ")}]`,
    );
    this.setCondition("PodScheduled", true);
    this.sync();
    await this.prepareVolumes();
    if (this.stopping) return this.finish();
    this.setCondition("PodReadyToStartContainers", true);
    this.sync();
    this.watchEmptyDirLimits();
    const ads = this.spec.activeDeadlineSeconds;
    if (typeof ads === "number") this.later(ads * 1000, () => this.stop("deadline", 0));
    const sidecars: Promise<void>[] = [];
    for (const c of this.inits) {
      if (c.sidecar) {
        // A sidecar only has to start before the next container does; it keeps running.
        const loop = this.runSidecar(c);
        sidecars.push(loop);
        const started = await Promise.race([
          new Promise<boolean>((r) => (c.onStarted = () => r(true))),
          loop.then(() => false),
        ]);
        if (!started) return this.endSidecars(sidecars);
        continue;
      }
      const ok = await this.runUntilDone(c);
      if (!ok) return this.endSidecars(sidecars);
    }
    if (this.inits.length > 0) {
      this.setCondition("Initialized", true);
      for (const c of this.mains) c.state = { waiting: { reason: "ContainerCreating" } };
      this.sync();
    }
    await Promise.all(this.mains.map((c) => this.runUntilDone(c)));
    return this.endSidecars(sidecars);
  }

  /** A sidecar restarts whenever it exits (its own restartPolicy, not the pod's) until the pod ends. */
  private async runSidecar(c: Runtime): Promise<void> {
    while (!this.stopping && !this.sidecarsEnding) {
      const code = await this.runOnce(c);
      if (code === undefined || this.stopping || this.sidecarsEnding) return;
      const backoff = this.ctx.timings.crashLoopBackoffMs * 2 ** Math.min(c.restartCount, 5);
      c.lastState = c.state;
      c.state = {
        waiting: {
          reason: "CrashLoopBackOff",
          message: `back-off ${Math.ceil(backoff / 1000)}s restarting failed container=${c.name} pod=${this.name}_${this.ns}(${this.uid})`,
        },
      };
      this.sync();
      await this.sleep(backoff);
      c.restartCount++;
    }
  }

  /**
   * Once the regular containers have ended (or the pod stops), the sidecars get SIGTERM and,
   * after the pod's grace period, SIGKILL; the pod's phase then follows the other containers.
   */
  private async endSidecars(sidecars: Promise<void>[]): Promise<void> {
    if (sidecars.length > 0) {
      this.sidecarsEnding = true;
      const running = this.inits.filter((c) => c.sidecar && c.proc?.running);
      for (const c of running) {
        this.event("Normal", "Killing", `Stopping container ${c.name}`, c);
        c.proc?.signal("SIGTERM");
      }
      const grace =
        typeof this.spec.terminationGracePeriodSeconds === "number" ? this.spec.terminationGracePeriodSeconds : 30;
      const kill = setTimeout(() => running.forEach((c) => c.proc?.killGroup()), grace * 1000);
      kill.unref();
      await Promise.all(sidecars);
      clearTimeout(kill);
    }
    this.finish();
  }

  /** emptyDir sizeLimit: the kubelet's periodic usage check evicts the pod once a volume exceeds it. */
  private watchEmptyDirLimits(): void {
    const limited = arr(this.spec.volumes).filter((v) => isObject(v.emptyDir) && v.emptyDir.sizeLimit !== undefined);
    if (limited.length === 0) return;
    const check = (): void => {
      if (this.stopping || this.finished) return;
      for (const v of limited) {
        const dir = this.volumes.get(String(v.name))?.hostPath;
        const limit = String((v.emptyDir as JsonObject).sizeLimit);
        if (dir && diskUsage(dir) > quantity(limit)) {
          this.evictionWhy = `Usage of EmptyDir volume "${String(v.name)}" exceeds the limit "${limit}". `;
          this.stop("evicted", 0);
          return;
        }
      }
      this.later(this.ctx.timings.evictionCheckMs, check);
    };
    this.later(this.ctx.timings.evictionCheckMs, check);
  }

  private later(ms: number, fn: () => void): void {
    const t = setTimeout(fn, ms);
    t.unref();
    this.timers.push(t);
  }

  private async prepareVolumes(): Promise<void> {
    const dir = this.ctx.podDir(this.uid);
    mkdirSync(dir, { recursive: true });
    const vctx = this.ctx.volumeContext(dir);
    while (!this.stopping) {
      try {
        const out = new Map<string, PreparedVolume>();
        for (const v of arr(this.spec.volumes)) out.set(String(v.name), prepareVolume(vctx, this.pod, v));
        this.volumes = out;
        return;
      } catch (e) {
        if (!(e instanceof VolumeError)) throw e;
        this.event("Warning", "FailedMount", e.message);
        await this.sleep(this.ctx.timings.configRetryMs);
      }
    }
  }

  private async runUntilDone(c: Runtime): Promise<boolean> {
    while (!this.stopping) {
      const code = await this.runOnce(c);
      if (code === undefined) return false;
      if (code === 0 && (this.restartPolicy !== "Always" || c.init)) return true;
      if (this.restartPolicy === "Never" || this.stopping) return false;
      const backoff = this.ctx.timings.crashLoopBackoffMs * 2 ** Math.min(c.restartCount, 5);
      c.lastState = c.state;
      c.state = {
        waiting: {
          reason: "CrashLoopBackOff",
          message: `back-off ${Math.ceil(backoff / 1000)}s restarting failed container=${c.name} pod=${this.name}_${this.ns}(${this.uid})`,
        },
      };
      this.event(
        "Warning",
        "BackOff",
        `Back-off restarting failed container ${c.name} in pod ${this.name}_${this.ns}(${this.uid})`,
        c,
      );
      this.sync();
      await this.sleep(backoff);
      c.restartCount++;
    }
    return false;
  }

  /** Pulls, configures and runs the container once; its exit code, or undefined if stopped first. */
  private async runOnce(c: Runtime): Promise<number | undefined> {
    // A fixed retry made every stuck pod rewrite its status twice a second, which with a few
    // hundred of them (a bench's unpullable pods) loaded the API and every watcher.
    let failedPulls = 0;
    while (!this.stopping) {
      const pull = this.ctx.images.pull(c.image);
      if (pull.ok) break;
      if (pull.reason === "InvalidImageName") {
        c.state = { waiting: { reason: "InvalidImageName", message: pull.message } };
        this.event("Warning", "InspectFailed", pull.message, c);
        this.event("Warning", "Failed", "Error: InvalidImageName", c);
        this.sync();
        while (!this.stopping) await this.sleep(this.ctx.timings.configRetryMs);
        return undefined;
      }
      this.event("Normal", "Pulling", `Pulling image "${c.image}"`, c);
      this.event("Warning", "Failed", `Failed to pull image "${c.image}": ${pull.message}`, c);
      this.event("Warning", "Failed", "Error: ErrImagePull", c);
      c.state = { waiting: { reason: "ErrImagePull", message: pull.message } };
      this.sync();
      await this.sleep(this.ctx.timings.imagePullBackoffMs);
      if (this.stopping) return undefined;
      c.state = {
        waiting: {
          reason: "ImagePullBackOff",
          message: `Back-off pulling image "${c.image}": ErrImagePull: ${pull.message}`,
        },
      };
      this.event("Normal", "BackOff", `Back-off pulling image "${c.image}"`, c);
      this.event("Warning", "Failed", "Error: ImagePullBackOff", c);
      this.sync();
      await this.sleep(this.ctx.timings.imagePullBackoffMs * 2 ** Math.min(failedPulls++, 5));
    }
    if (this.stopping) return undefined;
    this.event("Normal", "Pulled", `Container image "${c.image}" already present on machine`, c);
    let env: Record<string, string> | undefined;
    let user: ContainerUser | undefined;
    let argv: string[] = [];
    const image = this.ctx.images.config(c.image);
    const podman = this.ctx.images.podman(c.image);
    while (!this.stopping) {
      try {
        user = effectiveUser(this.spec, c.spec, image.user);
        checkNonRoot(this.spec, c.spec, user, image.user, `${this.name}_${this.ns}(${this.uid})`, c.name);
        // A user without a home in the image (any but root here) gets HOME=/, as runtimes do.
        const home: Record<string, string> = user.uid !== 0 && this.ctx.baseEnv.HOME === "/root" ? { HOME: "/" } : {};
        // A real container starts from its image's environment alone (podman sets HOME from the image's passwd).
        const base = podman ? {} : { ...this.ctx.baseEnv, ...home };
        env = resolveEnv(
          this.ctx.api,
          this.pod,
          c.spec,
          { ...base, HOSTNAME: this.name, ...this.ctx.serviceEnv(), ...(image.env ?? {}) },
          this.ctx.podIP,
        );
        const command = Array.isArray(c.spec.command) ? c.spec.command.map(String) : undefined;
        const args = Array.isArray(c.spec.args) ? c.spec.args.map(String) : undefined;
        argv = [...(command ?? image.entrypoint ?? []), ...(args ?? (command ? [] : (image.cmd ?? [])))].map((a) =>
          expand(a, env ?? {}),
        );
        const standIn = podman ? undefined : image.executables?.[argv[0] ?? ""];
        if (standIn !== undefined) argv[0] = standIn;
        if (argv.length === 0)
          throw new ContainerConfigError(
            "no command specified (the test cluster knows no entrypoint for this image; set command or register the image)",
          );
        break;
      } catch (e) {
        if (!(e instanceof ContainerConfigError)) throw e;
        c.state = {
          waiting: {
            reason: e.message.startsWith("no command") ? "CreateContainerError" : "CreateContainerConfigError",
            message: e.message,
          },
        };
        this.event("Warning", "Failed", `Error: ${e.message}`, c);
        this.sync();
        await this.sleep(this.ctx.timings.configRetryMs);
      }
    }
    if (this.stopping || !env) return undefined;
    const mounts: Mount[] = [];
    for (const m of arr(c.spec.volumeMounts)) {
      const vol = this.volumes.get(String(m.name));
      if (!vol) continue;
      let host = vol.hostPath;
      const sub =
        typeof m.subPath === "string" && m.subPath !== ""
          ? m.subPath
          : typeof m.subPathExpr === "string"
            ? expand(m.subPathExpr, env)
            : "";
      if (sub !== "") {
        host = join(host, posix.normalize(sub).replace(/^(\.\.\/)+/, ""));
        if (!vol.readOnly) mkdirSync(host, { recursive: true });
      }
      mounts.push({
        hostPath: host,
        containerPath: String(m.mountPath),
        readOnly: vol.readOnly || m.readOnly === true,
      });
    }
    for (const path of podman ? [] : (image.paths ?? [])) {
      if (mounts.some((m) => under(path, m.containerPath)))
        mounts.push({ hostPath: path, containerPath: path, readOnly: true });
    }
    for (const path of podman ? (image.podmanMounts ?? []) : [])
      mounts.push({ hostPath: path, containerPath: path, readOnly: true });
    c.containerID = randomBytes(32).toString("hex");
    const log = new ContainerLog();
    this.ctx.registerLog(this.uid, c.name, c.restartCount, log);
    const proc = new ContainerProcess({
      argv,
      env,
      workingDir:
        typeof c.spec.workingDir === "string" && c.spec.workingDir !== ""
          ? c.spec.workingDir
          : (image.workingDir ?? "/"),
      mounts,
      rootDir: join(this.ctx.podDir(this.uid), "roots", `${c.name}-${c.restartCount}`),
      isolation: this.ctx.isolation,
      ...(user ? { user } : {}),
      readOnlyRoot: isObject(c.spec.securityContext) && c.spec.securityContext.readOnlyRootFilesystem === true,
      ...(podman
        ? {
            podman: {
              ...podman,
              name: `ktc-${this.name}-${c.name}-${c.restartCount}-${c.containerID.slice(0, 8)}`.replace(
                /[^a-zA-Z0-9_.-]/g,
                "-",
              ),
            },
          }
        : {}),
      onOutput: (d) => log.append(d),
    });
    c.proc = proc;
    this.event("Normal", "Created", `Created container: ${c.name}`, c);
    const startedAt = isoNow();
    try {
      await proc.started;
    } catch (e) {
      await proc.exited;
      log.close();
      const message = e instanceof Error ? e.message : String(e);
      c.state = {
        terminated: {
          exitCode: 128,
          reason: "StartError",
          message,
          startedAt: "1970-01-01T00:00:00Z",
          finishedAt: isoNow(),
          containerID: `containerd://${c.containerID}`,
        },
      };
      this.event("Warning", "Failed", `Error: failed to create containerd task: ${message}`, c);
      this.sync();
      return 128;
    }
    c.state = { running: { startedAt } };
    c.onStarted?.();
    const probes = c.init
      ? {}
      : {
          startup: objOrUndef(c.spec.startupProbe),
          liveness: objOrUndef(c.spec.livenessProbe),
          readiness: objOrUndef(c.spec.readinessProbe),
        };
    c.started = probes.startup === undefined;
    c.ready = !c.init && c.started && probes.readiness === undefined;
    this.event("Normal", "Started", `Started container ${c.name}`, c);
    if (this.stopping) proc.signal("SIGTERM");
    this.updateReadiness();
    if (this.phase === "Pending" && !c.init) this.phase = "Running";
    this.sync();
    this.armSimulations(c);
    const probing = new AbortController();
    const execTarget: ExecTarget = { wrap: (cmd) => ({ argv: proc.execArgv(cmd, user), env: env ?? {} }) };
    if (!c.init) this.startProbes(c, proc, probes, execTarget, probing.signal);
    const exit = await proc.exited;
    probing.abort();
    log.close();
    const exitCode = c.oomKilled ? 137 : exit.exitCode;
    c.state = {
      terminated: {
        exitCode,
        reason: c.oomKilled ? "OOMKilled" : exitCode === 0 ? "Completed" : "Error",
        startedAt,
        finishedAt: isoNow(),
        containerID: `containerd://${c.containerID}`,
      },
    };
    c.ready = false;
    c.started = false;
    c.proc = undefined;
    this.updateReadiness();
    this.sync();
    return exitCode;
  }

  /**
   * The startup probe first (the others wait for it); then liveness and readiness side
   * by side. A failed startup or liveness probe kills the container (SIGTERM, SIGKILL
   * after the grace period), which then restarts per restartPolicy; readiness only
   * flips the container's (and so the pod's) Ready condition.
   */
  private startProbes(
    c: Runtime,
    proc: ContainerProcess,
    probes: { startup?: JsonObject; liveness?: JsonObject; readiness?: JsonObject },
    target: ExecTarget,
    signal: AbortSignal,
  ): void {
    const active = (): boolean => !signal.aborted && !this.stopping;
    const kill = (kind: string, probe: JsonObject): void => {
      this.event("Normal", "Killing", `Container ${c.name} failed ${kind} probe, will be restarted`, c);
      proc.signal("SIGTERM");
      const grace =
        typeof probe.terminationGracePeriodSeconds === "number"
          ? probe.terminationGracePeriodSeconds
          : typeof this.spec.terminationGracePeriodSeconds === "number"
            ? this.spec.terminationGracePeriodSeconds
            : 30;
      const t = setTimeout(() => proc.killGroup(), grace * 1000);
      t.unref();
      signal.addEventListener("abort", () => clearTimeout(t), { once: true });
    };
    const loop = async (
      kind: "Startup" | "Liveness" | "Readiness",
      probe: JsonObject,
      onResult: (ok: boolean, successes: number, failures: number) => boolean,
    ): Promise<void> => {
      const t = probeTiming(probe);
      const sec =
        kind === "Readiness"
          ? (this.ctx.timings.readinessProbeSecondMs ?? this.ctx.timings.probeSecondMs)
          : this.ctx.timings.probeSecondMs;
      await this.sleep(t.initialDelaySeconds * sec, signal);
      let successes = 0;
      let failures = 0;
      while (active()) {
        // timeoutSeconds stays in real seconds: a scaled-down timeout would fail healthy probes on a busy machine.
        const r = await runProbe(probe, c.spec, target, Math.max(1, t.timeoutSeconds) * 1000, this.ctx.podIP);
        if (!active()) return;
        if (r.ok) {
          successes++;
          failures = 0;
        } else {
          failures++;
          successes = 0;
          this.event("Warning", "Unhealthy", `${kind} probe failed: ${r.message}`, c);
        }
        if (!onResult(r.ok, successes, failures)) return;
        await this.sleep(Math.max(1, t.periodSeconds) * sec, signal);
      }
    };
    const afterStartup = (): void => {
      if (probes.liveness) {
        const p = probes.liveness;
        const threshold = probeTiming(p).failureThreshold;
        void loop("Liveness", p, (_ok, _s, failures) => {
          if (failures < threshold) return true;
          kill("liveness", p);
          return false;
        }).catch((e: unknown) => this.ctx.onError(e));
      }
      if (probes.readiness) {
        const p = probes.readiness;
        const { successThreshold, failureThreshold } = probeTiming(p);
        void loop("Readiness", p, (ok, successes, failures) => {
          const ready = ok ? successes >= successThreshold || c.ready : !(failures >= failureThreshold) && c.ready;
          if (ready !== c.ready) {
            c.ready = ready;
            this.updateReadiness();
            this.sync();
          }
          return true;
        }).catch((e: unknown) => this.ctx.onError(e));
      }
    };
    if (!probes.startup) return afterStartup();
    const sp = probes.startup;
    const threshold = probeTiming(sp).failureThreshold;
    void loop("Startup", sp, (ok, _s, failures) => {
      if (ok) {
        c.started = true;
        c.ready = probes.readiness === undefined;
        this.updateReadiness();
        this.sync();
        afterStartup();
        return false;
      }
      if (failures < threshold) return true;
      kill("startup", sp);
      return false;
    }).catch((e: unknown) => this.ctx.onError(e));
  }

  private armSimulations(c: Runtime): void {
    const ann = this.pod.metadata.annotations ?? {};
    for (const entry of (ann[annotationOomKill] ?? "")
      .split(",")
      .map((s) => s.trim())
      .filter((s) => s !== "")) {
      const [name, ms] = entry.split("=");
      if (name === c.name) this.later(Number(ms ?? 0), () => this.oom(c.name));
    }
    const evictAfter = ann[annotationEvictAfterMs];
    if (evictAfter !== undefined && !c.init) this.later(Number(evictAfter), () => this.stop("evicted", 0));
  }

  private updateReadiness(): void {
    const unready = this.mains.filter((c) => !c.ready).map((c) => c.name);
    if (unready.length === 0) {
      this.setCondition("ContainersReady", true);
      this.setCondition("Ready", true);
    } else {
      const msg = `containers with unready status: [${unready.join(" ")}]`;
      this.setCondition("ContainersReady", false, "ContainersNotReady", msg);
      this.setCondition("Ready", false, "ContainersNotReady", msg);
    }
  }

  private finish(): void {
    if (this.finished) return;
    this.finished = true;
    for (const t of this.timers) clearTimeout(t);
    if (this.killTimer) clearTimeout(this.killTimer);
    const exited = (c: Runtime): JsonObject | undefined =>
      isObject(c.state.terminated) ? c.state.terminated : undefined;
    if (this.stopReason === "evicted") {
      const message = this.evictionWhy ?? evictionMessage;
      this.phase = "Failed";
      this.reason = "Evicted";
      this.message = message;
      this.conditions.set("DisruptionTarget", {
        type: "DisruptionTarget",
        status: "True",
        lastProbeTime: null,
        lastTransitionTime: isoNow(),
        reason: "TerminationByKubelet",
        message,
      });
      this.event("Warning", "Evicted", message);
    } else if (this.stopReason === "deadline") {
      this.phase = "Failed";
      this.reason = "DeadlineExceeded";
      this.message = "Pod was active on the node longer than the specified deadline";
      this.event("Warning", "DeadlineExceeded", this.message);
    } else if (this.inits.some((c) => !c.sidecar && exited(c) && exited(c)?.exitCode !== 0)) {
      this.phase = "Failed";
    } else if (this.mains.every((c) => exited(c)?.exitCode === 0)) {
      this.phase = "Succeeded";
    } else {
      this.phase = "Failed";
    }
    const why = this.phase === "Succeeded" ? "PodCompleted" : "PodFailed";
    this.setCondition("ContainersReady", false, why);
    this.setCondition("Ready", false, why);
    this.sync();
    if (this.stopReason === "deleted") this.removePod();
  }

  /** Kubelet's final delete (grace 0) once containers are gone. */
  removePod(): void {
    const t = this.ctx.api.type("", "pods");
    try {
      this.ctx.api.delete(t, this.ns, this.name, { gracePeriodSeconds: 0, preconditions: { uid: this.uid } });
    } catch (e) {
      if (!(e instanceof StatusError)) throw e;
    }
  }

  /** Stops the pod: SIGTERM now, SIGKILL after `graceSeconds` (shortened by later calls). */
  stop(reason: StopReason, graceSeconds: number): void {
    if (this.finished) {
      if (reason === "deleted") this.removePod();
      return;
    }
    if (!this.stopReason) {
      this.stopReason = reason;
      this.abort.abort();
      for (const c of [...this.inits, ...this.mains]) {
        if (c.proc?.running) {
          this.event("Normal", "Killing", `Stopping container ${c.name}`, c);
          c.proc.signal("SIGTERM");
        }
      }
    } else if (reason === "evicted" || reason === "deadline") {
      this.stopReason = reason;
    }
    const at = Date.now() + graceSeconds * 1000;
    if (at < this.killAt) {
      this.killAt = at;
      if (this.killTimer) clearTimeout(this.killTimer);
      const killAll = (): void => {
        for (const c of [...this.inits, ...this.mains]) c.proc?.killGroup();
      };
      if (graceSeconds <= 0) killAll();
      else {
        this.killTimer = setTimeout(killAll, graceSeconds * 1000);
        this.killTimer.unref();
      }
    }
  }

  /** Kills the container as the kernel OOM killer would; false if it is not running. */
  oom(container: string): boolean {
    const c = [...this.inits, ...this.mains].find((x) => x.name === container);
    if (!c?.proc?.running) return false;
    c.oomKilled = true;
    c.proc.killGroup();
    return true;
  }
}

/** Bytes used by files under `dir` (apparent sizes, as `du` would sum them). */
function diskUsage(dir: string): number {
  let total = 0;
  const walk = (p: string): void => {
    let st;
    try {
      st = lstatSync(p);
    } catch {
      return;
    }
    if (st.isDirectory()) for (const e of readdirSync(p)) walk(join(p, e));
    else total += st.size;
  };
  walk(dir);
  return total;
}

function objOrUndef(v: unknown): JsonObject | undefined {
  return isObject(v) ? v : undefined;
}

function num(v: unknown): number | undefined {
  return typeof v === "number" && Number.isInteger(v) ? v : undefined;
}

/**
 * The user a container runs as: its securityContext, else the pod's, else the image's
 * USER ("uid[:gid]"), else root; supplementary groups are supplementalGroups plus fsGroup.
 */
export function effectiveUser(pod: JsonObject, container: JsonObject, imageUser: string | undefined): ContainerUser {
  const psc = isObject(pod.securityContext) ? pod.securityContext : {};
  const csc = isObject(container.securityContext) ? container.securityContext : {};
  const [iu, ig] = (imageUser ?? "").split(":");
  const uid = num(csc.runAsUser) ?? num(psc.runAsUser) ?? (iu && /^\d+$/.test(iu) ? Number(iu) : 0);
  const gid = num(csc.runAsGroup) ?? num(psc.runAsGroup) ?? (ig && /^\d+$/.test(ig) ? Number(ig) : 0);
  const groups = [
    ...(Array.isArray(psc.supplementalGroups)
      ? psc.supplementalGroups.filter((g): g is number => typeof g === "number")
      : []),
    ...(num(psc.fsGroup) !== undefined ? [num(psc.fsGroup) as number] : []),
  ];
  return { uid, gid, groups: [...new Set(groups)] };
}

/** runAsNonRoot as kubelet verifies it before creating the container. */
function checkNonRoot(
  pod: JsonObject,
  container: JsonObject,
  user: ContainerUser,
  imageUser: string | undefined,
  podRef: string,
  name: string,
): void {
  const psc = isObject(pod.securityContext) ? pod.securityContext : {};
  const csc = isObject(container.securityContext) ? container.securityContext : {};
  const nonRoot = csc.runAsNonRoot ?? psc.runAsNonRoot;
  if (nonRoot !== true) return;
  const explicit = num(csc.runAsUser) ?? num(psc.runAsUser);
  const iu = (imageUser ?? "").split(":")[0] ?? "";
  if (explicit === undefined && iu !== "" && !/^\d+$/.test(iu))
    throw new ContainerConfigError(
      `container has runAsNonRoot and image has non-numeric user (${iu}), cannot verify user is non-root (pod: "${podRef}", container: ${name})`,
    );
  if (user.uid === 0)
    throw new ContainerConfigError(
      `container has runAsNonRoot and image will run as root (pod: "${podRef}", container: ${name})`,
    );
}

/** Whether `path` lies strictly below the directory `dir`. */
function under(path: string, dir: string): boolean {
  const d = posix.normalize(dir).replace(/\/$/, "");
  return posix.normalize(path).startsWith(`${d}/`);
}
