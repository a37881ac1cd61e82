/** Empties a Terminating namespace, then removes it. */
import type { ObjectApi } from "../api/object-api.js";
import { StatusError } from "../api/status-error.js";
import { WorkQueue } from "./work-queue.js";

export class NamespaceController {
  private readonly queue: WorkQueue;
  private readonly unsubscribe: () => void;

  constructor(
    private readonly api: ObjectApi,
    private readonly retryMs: number,
    onError: (key: string, e: unknown) => void,
  ) {
    this.queue = new WorkQueue((ns) => this.process(ns), onError);
    this.unsubscribe = api.store.subscribe((e) => {
      if (e.typeKey === "/namespaces" && e.type !== "DELETED" && e.object.metadata.deletionTimestamp)
        this.queue.add(e.object.metadata.name ?? "");
    });
  }

  private process(name: string): void {
    const nsType = this.api.type("", "namespaces");
    const ns = this.api.tryGet(nsType, undefined, name);
    if (!ns || !ns.metadata.deletionTimestamp) return;
    let remaining = 0;
    for (const t of this.api.resources.all()) {
      if (!t.namespaced) continue;
      for (const o of this.api.store.list(`${t.group}/${t.resource}`, name)) {
        remaining++;
        if (o.metadata.deletionTimestamp) continue;
        try {
          this.api.delete(t, name, o.metadata.name ?? "", { propagationPolicy: "Background" });
        } catch (e) {
          if (!(e instanceof StatusError)) throw e;
        }
      }
    }
    if (remaining > 0) {
      this.queue.addAfter(name, this.retryMs);
      return;
    }
    this.api.removeNow(nsType, ns);
  }

  async close(): Promise<void> {
    this.unsubscribe();
    await this.queue.close();
  }
}
