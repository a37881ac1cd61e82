/** Records core/v1 Events the way kubelet and controllers do, folding repeats into `count`. */
import { randomBytes } from "node:crypto";
import type { ObjectApi } from "./object-api.js";
import { StatusError } from "./status-error.js";
import type { KObject } from "./types.js";
import { isoNow } from "./types.js";

export type EventType = "Normal" | "Warning";

export class EventRecorder {
  private readonly seen = new Map<string, string>();

  constructor(private readonly api: ObjectApi) {}

  record(
    component: string,
    host: string | undefined,
    involved: KObject,
    type: EventType,
    reason: string,
    message: string,
    fieldPath?: string,
  ): void {
    const ns = involved.metadata.namespace ?? "default";
    const t = this.api.type("", "events");
    const dedupe = `${involved.metadata.uid ?? ""}|${reason}|${message}|${fieldPath ?? ""}`;
    const now = isoNow();
    const existing = this.seen.get(dedupe);
    try {
      if (
        existing &&
        this.api.mutate(t, ns, existing, (e) => {
          e.count = (typeof e.count === "number" ? e.count : 1) + 1;
          e.lastTimestamp = now;
        })
      )
        return;
      const name = `${involved.metadata.name ?? "unknown"}.${randomBytes(8).toString("hex")}`;
      this.api.create(
        t,
        ns,
        {
          metadata: { name, namespace: ns },
          involvedObject: {
            kind: involved.kind,
            namespace: involved.metadata.namespace,
            name: involved.metadata.name,
            uid: involved.metadata.uid,
            apiVersion: involved.apiVersion,
            resourceVersion: involved.metadata.resourceVersion,
            ...(fieldPath ? { fieldPath } : {}),
          },
          reason,
          message,
          source: { component, ...(host ? { host } : {}) },
          firstTimestamp: now,
          lastTimestamp: now,
          count: 1,
          type,
          eventTime: null,
          reportingComponent: component,
          reportingInstance: host ?? "",
        },
        { system: true },
      );
      this.seen.set(dedupe, name);
    } catch (e) {
      // Events are best effort, as in Kubernetes: a namespace being deleted refuses them.
      if (!(e instanceof StatusError)) throw e;
    }
  }
}
