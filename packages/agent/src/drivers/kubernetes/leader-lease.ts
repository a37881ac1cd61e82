import { messageOf } from "@drover/protocol";
import { randomBytes } from "node:crypto";
import { hostname } from "node:os";
import { setTimeout as sleep } from "node:timers/promises";
import { V1MicroTime, type CoordinationV1Api, type V1Lease } from "@kubernetes/client-node";
import type { Logger } from "pino";
import { KubeApiError } from "./api-errors.js";

/** Timing of a leader lease; production derives all three from one duration (see leaseTimings). */
export interface LeaseTimings {
  /** How long a lease nobody renews blocks the others (the Lease's `leaseDurationSeconds`, in ms). */
  durationMs: number;
  /** How often the holder renews it. */
  renewMs: number;
  /** A holder that could not renew for this long stops leading: well before the others may take it. */
  renewDeadlineMs: number;
}

/** client-go's proportions (15 s / 10 s / 2 s): renew often, give up at 2/3 of the duration. */
export function leaseTimings(durationMs: number): LeaseTimings {
  return {
    durationMs,
    renewMs: Math.max(1, Math.floor(durationMs / 5)),
    renewDeadlineMs: Math.floor((durationMs * 2) / 3),
  };
}

/**
 * Leader election over a `coordination.k8s.io/v1` Lease, so two controllers of one release
 * (a second replica, or the ReplicaSet's replacement of a partitioned pod) never claim work at
 * once. Expiry is judged by the local clock from when this process last saw the record change,
 * never from the holder's timestamps, so clock skew between nodes cannot hand the lease over early.
 * Updates carry the read resourceVersion: of two candidates racing for a free lease one gets 409.
 */
export class LeaderLease {
  /** Unique per process: a restarted pod of the same name is a new candidate. */
  readonly identity = `${hostname()}_${randomBytes(4).toString("hex")}`;
  private observed: { key: string; at: number } | undefined;
  private lastRenew = 0;

  constructor(
    private readonly api: CoordinationV1Api,
    private readonly namespace: string,
    private readonly name: string,
    private readonly timings: LeaseTimings,
    private readonly log: Logger,
    private readonly now: () => number = Date.now,
  ) {}

  /** Resolves once this process holds the lease; rejects only when `signal` aborts. */
  async acquire(signal: AbortSignal): Promise<void> {
    let waitingLogged = false;
    for (;;) {
      signal.throwIfAborted();
      try {
        const holder = await this.tryTake();
        if (holder === this.identity) {
          this.log.info(
            { lease: this.name, identity: this.identity },
            "leader lease acquired: this controller takes work",
          );
          return;
        }
        if (!waitingLogged)
          this.log.info(
            { lease: this.name, holder },
            "another controller of this release holds the leader lease; standing by",
          );
        waitingLogged = true;
      } catch (err) {
        this.log.warn({ lease: this.name, err: messageOf(err) }, "reading or taking the leader lease failed; retrying");
      }
      await sleep(this.timings.renewMs, undefined, { signal });
    }
  }

  /**
   * Renews the lease until `signal` aborts (resolves) or it cannot be renewed within the renew
   * deadline or another process holds it (resolves with the reason: this process must stop
   * taking work at once). Releasing on a clean stop lets a standby take over without waiting.
   */
  async hold(signal: AbortSignal): Promise<string | undefined> {
    this.lastRenew = this.now();
    while (!signal.aborted) {
      try {
        await sleep(this.timings.renewMs, undefined, { signal });
      } catch {
        break;
      }
      try {
        const holder = await this.tryTake();
        if (holder === this.identity) this.lastRenew = this.now();
        else return `the leader lease is held by ${holder ?? "nobody"}`;
      } catch (err) {
        this.log.warn({ lease: this.name, err: messageOf(err) }, "renewing the leader lease failed");
      }
      if (this.now() - this.lastRenew > this.timings.renewDeadlineMs)
        return `the leader lease could not be renewed for ${this.timings.renewDeadlineMs} ms`;
    }
    await this.release();
    return undefined;
  }

  /** Gives the lease up (best effort), so a standby need not wait for it to expire. */
  private async release(): Promise<void> {
    try {
      const lease = await this.api.readNamespacedLease({ name: this.name, namespace: this.namespace });
      if (lease.spec?.holderIdentity !== this.identity) return;
      lease.spec = { ...lease.spec, holderIdentity: "", renewTime: new V1MicroTime(this.now()) };
      await this.api.replaceNamespacedLease({ name: this.name, namespace: this.namespace, body: lease });
    } catch (err) {
      this.log.warn(
        { lease: this.name, err: messageOf(err) },
        "releasing the leader lease failed; a standby takes over when it expires",
      );
    }
  }

  /** One round: creates, renews or takes over the lease where allowed; returns its holder afterwards. */
  private async tryTake(): Promise<string | undefined> {
    const now = this.now();
    let lease: V1Lease;
    try {
      lease = await this.api.readNamespacedLease({ name: this.name, namespace: this.namespace });
    } catch (err) {
      if (!(err instanceof KubeApiError && err.code === 404)) throw err;
      await this.api.createNamespacedLease({
        namespace: this.namespace,
        body: { metadata: { name: this.name }, spec: this.spec(now, 0, now) },
      });
      return this.identity;
    }
    const spec = lease.spec ?? {};
    const holder = spec.holderIdentity || undefined;
    // The record changed since the last look: its holder is alive (or it was just released).
    const key = `${holder ?? ""}|${String(spec.renewTime ?? "")}|${lease.metadata?.resourceVersion ?? ""}`;
    if (this.observed?.key !== key) this.observed = { key, at: now };
    const expired = now - this.observed.at > this.timings.durationMs;
    if (holder !== undefined && holder !== this.identity && !expired) return holder;
    const acquired = holder === this.identity && spec.acquireTime ? new Date(spec.acquireTime).getTime() : now;
    const transitions = (spec.leaseTransitions ?? 0) + (holder === this.identity ? 0 : 1);
    const updated = await this.api.replaceNamespacedLease({
      name: this.name,
      namespace: this.namespace,
      body: { ...lease, spec: this.spec(acquired, transitions, now) },
    });
    this.observed = {
      key: `${this.identity}|${String(updated.spec?.renewTime ?? "")}|${updated.metadata?.resourceVersion ?? ""}`,
      at: now,
    };
    return this.identity;
  }

  private spec(acquired: number, transitions: number, now: number): NonNullable<V1Lease["spec"]> {
    return {
      holderIdentity: this.identity,
      leaseDurationSeconds: Math.max(1, Math.ceil(this.timings.durationMs / 1000)),
      acquireTime: new V1MicroTime(acquired),
      renewTime: new V1MicroTime(now),
      leaseTransitions: transitions,
    };
  }
}
