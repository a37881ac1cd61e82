/**
 * ownerReferences garbage collection: dependents of a removed owner are deleted
 * (Background), Foreground deletion waits for dependents to go before the owner does,
 * and Orphan strips the owner reference from dependents before the owner goes.
 */
import type { ObjectApi } from "../api/object-api.js";
import type { ResourceType } from "../api/resources.js";
import { StatusError } from "../api/status-error.js";
import type { KObject } from "../api/types.js";
import { WorkQueue } from "./work-queue.js";

export class GarbageCollector {
  private readonly queue: WorkQueue;
  private readonly unsubscribe: () => void;

  constructor(
    private readonly api: ObjectApi,
    onError: (key: string, e: unknown) => void,
  ) {
    this.queue = new WorkQueue((key) => this.process(key), onError);
    this.unsubscribe = api.store.subscribe((e) => {
      const meta = e.object.metadata;
      if (e.type === "DELETED") {
        if (meta.uid) this.queue.add(`gone|${meta.uid}`);
        for (const r of meta.ownerReferences ?? []) this.queue.add(`owner|${r.uid}`);
        return;
      }
      if (meta.deletionTimestamp && (meta.finalizers ?? []).some((f) => f === "orphan" || f === "foregroundDeletion"))
        this.queue.add(`owner|${meta.uid ?? ""}`);
      if (e.type === "ADDED" && (meta.ownerReferences ?? []).length > 0) this.queue.add(`dangling|${meta.uid ?? ""}`);
    });
  }

  private typeOf(typeKey: string): ResourceType | undefined {
    const slash = typeKey.indexOf("/");
    return this.api.resources.get(typeKey.slice(0, slash), typeKey.slice(slash + 1));
  }

  private dependents(uid: string): { t: ResourceType; object: KObject }[] {
    const out: { t: ResourceType; object: KObject }[] = [];
    for (const { typeKey, object } of this.api.store.entries()) {
      if (!(object.metadata.ownerReferences ?? []).some((r) => r.uid === uid)) continue;
      const t = this.typeOf(typeKey);
      if (t) out.push({ t, object });
    }
    return out;
  }

  private deleteQuietly(t: ResourceType, o: KObject, policy: "Background" | "Foreground"): void {
    if (o.metadata.deletionTimestamp) return;
    try {
      this.api.delete(t, o.metadata.namespace, o.metadata.name ?? "", {
        propagationPolicy: policy,
        preconditions: { uid: o.metadata.uid ?? "" },
      });
    } catch (e) {
      if (!(e instanceof StatusError && (e.code === 404 || e.code === 409))) throw e;
    }
  }

  private dropOwner(t: ResourceType, o: KObject, ownerUids: Set<string>): void {
    this.api.mutate(t, o.metadata.namespace, o.metadata.name ?? "", (cur) => {
      const refs = (cur.metadata.ownerReferences ?? []).filter((r) => !ownerUids.has(r.uid));
      if (refs.length > 0) cur.metadata.ownerReferences = refs;
      else delete cur.metadata.ownerReferences;
    });
  }

  private process(key: string): void {
    const [kind, uid = ""] = key.split("|");
    if (kind === "gone") {
      // The owner is gone: dependents without another live owner go too.
      for (const { t, object } of this.dependents(uid)) {
        const live = (object.metadata.ownerReferences ?? []).filter(
          (r) => r.uid !== uid && this.api.store.getByUid(r.uid),
        );
        if (live.length === 0) this.deleteQuietly(t, object, "Background");
        else this.dropOwner(t, object, new Set([uid]));
      }
      return;
    }
    if (kind === "dangling") {
      const found = this.api.store.getByUid(uid);
      if (!found) return;
      const refs = found.object.metadata.ownerReferences ?? [];
      const missing = refs.filter((r) => !this.api.store.getByUid(r.uid));
      const t = this.typeOf(found.typeKey);
      if (!t || missing.length === 0) return;
      if (missing.length === refs.length) this.deleteQuietly(t, found.object, "Background");
      else this.dropOwner(t, found.object, new Set(missing.map((r) => r.uid)));
      return;
    }
    // An owner being deleted with the orphan or foregroundDeletion finalizer.
    const found = this.api.store.getByUid(uid);
    if (!found || !found.object.metadata.deletionTimestamp) return;
    const t = this.typeOf(found.typeKey);
    if (!t) return;
    const owner = found.object;
    const finalizers = owner.metadata.finalizers ?? [];
    const deps = this.dependents(uid);
    let remove: string | undefined;
    if (finalizers.includes("orphan")) {
      for (const d of deps) this.dropOwner(d.t, d.object, new Set([uid]));
      remove = "orphan";
    } else if (finalizers.includes("foregroundDeletion")) {
      for (const d of deps) this.deleteQuietly(d.t, d.object, "Foreground");
      if (deps.length === 0) remove = "foregroundDeletion";
    }
    if (remove) {
      const drop = remove;
      this.api.mutate(t, owner.metadata.namespace, owner.metadata.name ?? "", (cur) => {
        cur.metadata.finalizers = (cur.metadata.finalizers ?? []).filter((f) => f !== drop);
      });
    }
  }

  async close(): Promise<void> {
    this.unsubscribe();
    await this.queue.close();
  }
}
