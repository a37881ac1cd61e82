import type { Logger } from "pino";
import type { DatabaseHealth } from "../db/health.js";
import type { StoreContext } from "../store/context.js";
import {
  claimVcsDelivery,
  reclaimLapsedVcsDeliveries,
  releaseVcsDelivery,
  renewVcsDeliveryClaim,
  unclaimedVcsDeliveries,
} from "../store/vcs-deliveries.js";

/*
 * The order and the claims of webhook deliveries' work: one delivery of a connection at a time,
 * in the order found; connections side by side, so one whose VCS agents are gone (each relayed
 * fetch waiting out DROVER_VCS_AGENT_TASK_SECONDS) holds up only its own deliveries. A delivery
 * is claimed for a claim TTL and the claim renewed while its work goes on; every TTL the queue
 * takes back the deliveries whose claim lapsed, so the work of a server that died (kill -9, a
 * lost node) is done by whichever server sharing the database looks next.
 */

export interface DeliveryQueueOptions {
  ctx: StoreContext;
  log: Logger;
  /** How long a claim on a delivery lasts unless renewed; also how often lapsed claims are looked for. */
  claimTtlMs: number;
  /** No look for lapsed claims while the database is unavailable (the tracker reports the outage). */
  health: DatabaseHealth;
  /** Aborted when the server stops: nothing more is claimed, and failures are the stop's. */
  signal: AbortSignal;
  /** Acts on a claimed delivery; a throw gives the delivery back. */
  work: (deliveryId: string) => Promise<void>;
}

export class DeliveryQueue {
  /** Each connection's chain of work; a chain that ran dry is dropped. */
  private readonly chains = new Map<string, Promise<void>>();
  /** Deliveries in a chain and not yet started: queued once, however often they are found. */
  private readonly queued = new Set<string>();
  private timer: NodeJS.Timeout | undefined;

  constructor(private readonly o: DeliveryQueueOptions) {}

  /** Queues a stored delivery's work behind the connection's earlier deliveries. */
  enqueue(deliveryId: string, connectionId: string): void {
    if (this.queued.has(deliveryId)) return;
    this.queued.add(deliveryId);
    const chain = (this.chains.get(connectionId) ?? Promise.resolve()).then(() => {
      this.queued.delete(deliveryId);
      return this.process(deliveryId).catch((err: unknown) => {
        if (!this.o.signal.aborted)
          this.o.log.error({ err, delivery: deliveryId }, "acting on a webhook delivery failed");
      });
    });
    this.chains.set(connectionId, chain);
    void chain.then(() => {
      if (this.chains.get(connectionId) === chain) this.chains.delete(connectionId);
    });
  }

  /**
   * Queues the deliveries a stopped server stored but did not act on, and from then on, every
   * claim TTL, those a dead server had claimed.
   */
  async start(): Promise<void> {
    this.timer = setInterval(() => {
      if (this.o.health.state !== "available") return;
      this.takeBack().catch((err: unknown) => {
        if (!this.o.signal.aborted && this.o.health.state === "available")
          this.o.log.warn({ err }, "looking for webhook deliveries of a dead server failed");
      });
    }, this.o.claimTtlMs);
    this.timer.unref();
    await this.takeBack();
  }

  /** Resolves when everything queued so far is done. */
  async idle(): Promise<void> {
    await Promise.all(this.chains.values());
  }

  /** Stops looking for lapsed claims; resolves when the work under way has ended. */
  async stop(): Promise<void> {
    clearInterval(this.timer);
    await this.idle();
  }

  private async takeBack(): Promise<void> {
    const lapsed = await reclaimLapsedVcsDeliveries(this.o.ctx);
    if (lapsed.length > 0)
      this.o.log.warn(
        { deliveries: lapsed },
        "webhook deliveries whose server died while acting on them are taken up again",
      );
    for (const d of await unclaimedVcsDeliveries(this.o.ctx)) this.enqueue(d.id, d.connectionId);
  }

  private async process(id: string): Promise<void> {
    const { ctx, claimTtlMs } = this.o;
    if (this.o.signal.aborted || !(await claimVcsDelivery(ctx, id, claimTtlMs))) return;
    const renewal = setInterval(
      () => void renewVcsDeliveryClaim(ctx, id, claimTtlMs).catch(() => undefined),
      Math.max(1, Math.floor(claimTtlMs / 3)),
    );
    try {
      await this.o.work(id);
    } catch (err) {
      // Left `processing`, the delivery would wait for its claim to lapse: give it back now.
      await releaseVcsDelivery(ctx, id).catch(() => undefined);
      throw err;
    } finally {
      clearInterval(renewal);
    }
  }
}
