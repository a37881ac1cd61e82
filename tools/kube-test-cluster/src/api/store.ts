/**
 * The cluster's storage: every object of every type in one map, one global
 * resourceVersion counter (like etcd's revision), and a bounded history of changes
 * that watches resume from. A watch asking for a version older than the history
 * holds gets 410 Gone, as when etcd has compacted.
 */
import type { KObject } from "./types.js";
import { clone } from "./types.js";

export type WatchEventType = "ADDED" | "MODIFIED" | "DELETED";

export interface StoreEvent {
  type: WatchEventType;
  /** `group/resource` of the object. */
  typeKey: string;
  rv: number;
  object: KObject;
  /** The object before this change (MODIFIED and DELETED). */
  previous?: KObject;
}

export type StoreListener = (event: StoreEvent) => void;

export class Store {
  private revision = 1;
  private readonly objects = new Map<string, KObject>();
  private readonly byUid = new Map<string, { typeKey: string; key: string }>();
  private readonly history: StoreEvent[] = [];
  /** Highest revision no longer in the history; watches from below it are Gone. */
  private compactedThrough = 0;
  private readonly listeners = new Set<StoreListener>();

  constructor(private readonly historyLimit: number) {}

  static key(typeKey: string, namespace: string | undefined, name: string): string {
    return `${typeKey}|${namespace ?? ""}|${name}`;
  }

  get currentRevision(): number {
    return this.revision;
  }

  get oldestResumable(): number {
    return this.compactedThrough;
  }

  get(typeKey: string, namespace: string | undefined, name: string): KObject | undefined {
    const o = this.objects.get(Store.key(typeKey, namespace, name));
    return o && clone(o);
  }

  /** Looks an object up by uid, whatever its type. */
  getByUid(uid: string): { typeKey: string; object: KObject } | undefined {
    const ref = this.byUid.get(uid);
    const o = ref && this.objects.get(ref.key);
    return ref && o ? { typeKey: ref.typeKey, object: clone(o) } : undefined;
  }

  /** Objects of a type, optionally in one namespace, sorted by namespace then name. */
  list(typeKey: string, namespace?: string): KObject[] {
    return this.select(typeKey, namespace, () => true);
  }

  /**
   * The objects of `list` that `match` (which must only read what it is given): only those are
   * copied. Controllers look for a few pods among many on every event; copying every pod each
   * time made a namespace of a few hundred pods stall the whole cluster for hundreds of ms.
   */
  select(typeKey: string, namespace: string | undefined, match: (o: Readonly<KObject>) => boolean): KObject[] {
    const prefix = namespace === undefined ? `${typeKey}|` : `${typeKey}|${namespace}|`;
    const out: KObject[] = [];
    for (const [k, o] of this.objects) if (k.startsWith(prefix) && match(o)) out.push(clone(o));
    return out.sort((a, b) =>
      `${a.metadata.namespace ?? ""}/${a.metadata.name ?? ""}`.localeCompare(
        `${b.metadata.namespace ?? ""}/${b.metadata.name ?? ""}`,
      ),
    );
  }

  /** Every object of every type (for the garbage collector). */
  *entries(): Generator<{ typeKey: string; object: KObject }> {
    for (const [k, o] of this.objects) yield { typeKey: k.slice(0, k.indexOf("|")), object: o };
  }

  /** Writes an object (ADDED if new, else MODIFIED) and stamps the next resourceVersion. */
  put(typeKey: string, object: KObject): KObject {
    const name = object.metadata.name ?? "";
    const key = Store.key(typeKey, object.metadata.namespace, name);
    const previous = this.objects.get(key);
    const stored = clone(object);
    this.revision++;
    stored.metadata.resourceVersion = String(this.revision);
    this.objects.set(key, stored);
    if (stored.metadata.uid) this.byUid.set(stored.metadata.uid, { typeKey, key });
    this.record({
      type: previous ? "MODIFIED" : "ADDED",
      typeKey,
      rv: this.revision,
      object: stored,
      ...(previous ? { previous } : {}),
    });
    return clone(stored);
  }

  /** Removes an object; the DELETED event carries it with a fresh resourceVersion. */
  remove(typeKey: string, namespace: string | undefined, name: string): KObject | undefined {
    const key = Store.key(typeKey, namespace, name);
    const previous = this.objects.get(key);
    if (!previous) return undefined;
    this.objects.delete(key);
    if (previous.metadata.uid) this.byUid.delete(previous.metadata.uid);
    this.revision++;
    const gone = clone(previous);
    gone.metadata.resourceVersion = String(this.revision);
    this.record({ type: "DELETED", typeKey, rv: this.revision, object: gone, previous });
    return clone(gone);
  }

  /**
   * Events after `rv` (exclusive) for replay, or undefined when `rv` is older than the
   * retained history (the caller answers 410 Gone).
   */
  since(rv: number): StoreEvent[] | undefined {
    if (rv < this.compactedThrough) return undefined;
    return this.history.filter((e) => e.rv > rv);
  }

  subscribe(listener: StoreListener): () => void {
    this.listeners.add(listener);
    return () => this.listeners.delete(listener);
  }

  /** Drops history up to the current revision, so any older resume point is Gone. */
  compact(): void {
    this.history.length = 0;
    this.compactedThrough = this.revision;
  }

  private record(event: StoreEvent): void {
    this.history.push(event);
    while (this.history.length > this.historyLimit) {
      const dropped = this.history.shift();
      if (dropped) this.compactedThrough = dropped.rv;
    }
    for (const l of [...this.listeners]) l(event);
  }
}
