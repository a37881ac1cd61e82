import {
  ListWatch,
  Watch,
  type KubeConfig,
  type KubernetesListObject,
  type KubernetesObject,
} from "@kubernetes/client-node";
import { KubeApiError, kubeApiError } from "./api-errors.js";

/**
 * Where a list may be served from: the first from the API server's watch cache
 * (`resourceVersion: "0"`, no etcd read), a relist from it too but never older than what this
 * informer has already seen (so no recent object looks deleted), as client-go's reflector does.
 */
export type ListFrom = { resourceVersion: "0" } | { resourceVersion: string; resourceVersionMatch: "NotOlderThan" };

/** What an informer tells its owner. */
export interface InformerOptions<T extends KubernetesObject> {
  kc: KubeConfig;
  /** Names the resource in logs and metrics ("jobs", "pods"). */
  name: string;
  /** The collection's API path, e.g. `/api/v1/namespaces/<ns>/pods`. */
  path: string;
  /** Lists the collection with the selectors, passing `from` on. */
  list: (from: ListFrom) => Promise<KubernetesListObject<T>>;
  labelSelector?: string;
  fieldSelector?: string;
  onEvent: (type: "ADDED" | "MODIFIED" | "DELETED", obj: T) => void;
  /** A list or watch failed; the informer resumes after `retryInMs`. */
  onError: (err: unknown, retryInMs: number) => void;
  /** Aborting stops the informer for good. */
  signal: AbortSignal;
  /**
   * Each watch asks the server to end it after this long (`timeoutSeconds`); one not ended by
   * `watchDeadlineMs(watchTimeoutSeconds)` is dropped and everything re-listed.
   */
  watchTimeoutSeconds: number;
}

/** When a watch asked to end after `timeoutSeconds` is given up: half as long again, 1–60 s more. */
export function watchDeadlineMs(timeoutSeconds: number): number {
  return timeoutSeconds * 1000 + Math.min(60_000, Math.max(1000, timeoutSeconds * 500));
}

/** A list (already a KubeApiError) or watch failure, naming what was watched. */
function described(err: unknown, name: string, path: string): unknown {
  if (err instanceof KubeApiError || err instanceof WatchDeadlineError) return err;
  const e = err as { statusCode?: unknown; message?: unknown };
  // client-node's Watch keeps only the status line of a refused watch, not its Status body.
  if (typeof e.statusCode === "number")
    return new KubeApiError(
      `watch ${name} at ${path}`,
      e.statusCode,
      String(e.message),
      "the API server refused the watch",
      { cause: err },
    );
  return kubeApiError(`watch ${name} at ${path}`, err);
}

/**
 * A watch past its deadline. It carries 410 because ListWatch re-lists only after a 410: events
 * a stalled connection withheld are lost to a resumed watch, so the view must be listed anew.
 */
class WatchDeadlineError extends Error {
  readonly statusCode = 410;
  constructor(name: string, ms: number) {
    super(
      `the watch of ${name} was still open ${Math.round(ms / 1000)} s after it asked the API server to end it (no events or end arrived): dropped; re-listing`,
    );
  }
}

/** A running informer: its cache and whether it is synced. */
export interface Informer<T extends KubernetesObject> {
  /** Listed, and a watch is open (false from a failure until the next successful watch). */
  readonly synced: boolean;
  get(name: string, namespace?: string): T | undefined;
  list(namespace?: string): readonly T[];
}

/**
 * client-node's ListWatch with what it leaves to its caller: it lists, then watches from the
 * list's resourceVersion, resumes from the last seen version when a watch ends, relists only
 * on 410 Gone, and reports objects missing from a relist as deletions (so what was deleted
 * while no watch was open is still seen). Here: errors restart it after a backoff (0.5 s
 * doubling to 30 s), each watch has a deadline (`watchTimeoutSeconds`, then a re-list when the
 * server did not end it), and `synced` tracks whether its view is current.
 */
export function startInformer<T extends KubernetesObject>(o: InformerOptions<T>): Informer<T> {
  let listed = false;
  let synced = false;
  // The newest resourceVersion seen (list, event or bookmark): where a relist may start from.
  let seen = "";
  let delay = 500;
  // A failed watch attempt calls `done(err)` before `watch()` returns: synced only when it did not.
  const deadlineMs = watchDeadlineMs(o.watchTimeoutSeconds);
  const watch = {
    watch: async (...[path, params, cb, done]: Parameters<Watch["watch"]>) => {
      let failed = false;
      let ended = false;
      // Set once the response headers came: the deadline may fire before (a server that never answers).
      const request: { ac?: AbortController } = {};
      // client-node's Watch keeps the request's abort to itself until the headers arrive, but
      // each watch gets its own agent from the kubeconfig: destroying it closes the socket of
      // a request still waiting for its headers, which would otherwise stay open for good.
      const connection: { agent?: { destroy(): void } } = {};
      const config = {
        getCurrentCluster: () => o.kc.getCurrentCluster(),
        applyToFetchOptions: async (opts: Parameters<KubeConfig["applyToFetchOptions"]>[0]) => {
          const init = await o.kc.applyToFetchOptions(opts);
          connection.agent = init.agent as { destroy(): void } | undefined;
          return init;
        },
      } as KubeConfig;
      const real = new Watch(config);
      const close = () => {
        request.ac?.abort();
        connection.agent?.destroy();
      };
      // Stopping the informer closes a watch still waiting for its headers, too.
      o.signal.addEventListener("abort", close, { once: true });
      const end = (err: unknown) => {
        if (ended) return;
        ended = true;
        clearTimeout(deadline);
        o.signal.removeEventListener("abort", close);
        if (err) failed = true;
        done(err);
      };
      // client-node's Watch has no deadline of its own, not even for the response headers: a
      // server that never answers or never ends the stream would leave this view stale forever.
      const deadline = setTimeout(() => {
        // ListWatch re-lists at once after a 410 and reports nothing: report it here.
        const err = new WatchDeadlineError(o.name, deadlineMs);
        synced = false;
        o.onError(err, 0);
        end(err);
        close();
      }, deadlineMs);
      deadline.unref();
      // Bookmarks move a quiet watch's resourceVersion on, so it resumes instead of meeting 410 and a relist.
      const record: typeof cb = (phase, obj: { metadata?: { resourceVersion?: string } } | undefined, watchObj) => {
        if (phase !== "ERROR" && obj?.metadata?.resourceVersion) seen = obj.metadata.resourceVersion;
        cb(phase, obj, watchObj);
      };
      const ac = await real.watch(
        path,
        { ...params, allowWatchBookmarks: true, timeoutSeconds: o.watchTimeoutSeconds },
        record,
        end,
      );
      request.ac = ac;
      if (!failed && listed) {
        synced = true;
        delay = 500;
      }
      if (o.signal.aborted || ended) close();
      return ac;
    },
  } as Watch;
  const lw = new ListWatch<T>(
    o.path,
    watch,
    async () => {
      const result = await o.list(
        seen === "" ? { resourceVersion: "0" } : { resourceVersion: seen, resourceVersionMatch: "NotOlderThan" },
      );
      seen = result.metadata?.resourceVersion ?? seen;
      listed = true;
      return result;
    },
    false,
    o.labelSelector,
    o.fieldSelector,
  );
  lw.on("add", (obj) => o.onEvent("ADDED", obj));
  lw.on("update", (obj) => o.onEvent("MODIFIED", obj));
  lw.on("delete", (obj) => o.onEvent("DELETED", obj));
  lw.on("error", (err: unknown) => {
    synced = false;
    if (o.signal.aborted) return;
    const wait = delay;
    delay = Math.min(30_000, delay * 2);
    o.onError(described(err, o.name, o.path), wait);
    const timer = setTimeout(() => {
      o.signal.removeEventListener("abort", cancel);
      if (!o.signal.aborted) void lw.start();
    }, wait);
    const cancel = () => clearTimeout(timer);
    o.signal.addEventListener("abort", cancel, { once: true });
  });
  o.signal.addEventListener("abort", () => void lw.stop(), { once: true });
  void lw.start();
  return {
    get synced() {
      return synced && !o.signal.aborted;
    },
    get: (name, namespace) => lw.get(name, namespace),
    list: (namespace) => lw.list(namespace),
  };
}
