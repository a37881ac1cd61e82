import { ListWatch, Watch, type KubeConfig, type KubernetesListObject, type KubernetesObject } from "@kubernetes/client-node";

/** What an informer tells its owner. */
export interface InformerOptions<T extends KubernetesObject> {
  kc: KubeConfig;
  /** Names the resource in logs and metrics ("jobs", "pods"). */
  name: string;
  /** The collection's API path, e.g. `/api/v1/namespaces/<ns>/pods`. */
  path: string;
  list: () => Promise<KubernetesListObject<T>>;
  labelSelector?: string;
  fieldSelector?: string;
  onEvent: (type: "ADDED" | "MODIFIED" | "DELETED", obj: T) => void;
  /** A list or watch failed; the informer resumes after `retryInMs`. */
  onError: (err: unknown, retryInMs: number) => void;
  /** Aborting stops the informer for good. */
  signal: AbortSignal;
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
 * doubling to 30 s), and `synced` tracks whether its view is current.
 */
export function startInformer<T extends KubernetesObject>(o: InformerOptions<T>): Informer<T> {
  let listed = false;
  let synced = false;
  let delay = 500;
  // A failed watch attempt calls `done(err)` before `watch()` returns: synced only when it did not.
  const real = new Watch(o.kc);
  const watch = {
    watch: async (...[path, params, cb, done]: Parameters<Watch["watch"]>) => {
      let failed = false;
      const ac = await real.watch(path, params, cb, (err: unknown) => {
        if (err) failed = true;
        done(err);
      });
      if (!failed && listed) {
        synced = true;
        delay = 500;
      }
      if (o.signal.aborted) ac.abort();
      return ac;
    },
  } as Watch;
  const lw = new ListWatch<T>(
    o.path,
    watch,
    async () => {
      const result = await o.list();
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
    o.onError(err, wait);
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
