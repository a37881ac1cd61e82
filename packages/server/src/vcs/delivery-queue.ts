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
 * The order and the claims of webhook deliveries' work: one delivery at a time, in the order
 * found. A delivery is claimed for a claim TTL and the claim renewed while its work goes on;
 * every TTL the queue takes back the deliveries whose claim lapsed, so the work of a server that
 * died (kill -9, a lost node) is done by whichever server sharing the database looks next.
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
  private chain: Promise<void> = Promise.resolve();
  /** Deliveries in the chain and not yet started: queued once, however often they are found. */
  private readonly queued = new Set<string>();
  private timer: NodeJS.Timeout | undefined;

  constructor(private readonly o: DeliveryQueueOptions) {}

  /** Queues a stored delivery's work. */
  enqueue(deliveryId: string): void {
    if (this.queued.has(deliveryId)) return;
    this.queued.add(deliveryId);
    this.chain = this.chain.then(() => {
      this.queued.delete(deliveryId);
      return this.process(deliveryId).catch((err: unknown) => {
        if (!this.o.signal.aborted)
          this.o.log.error({ err, delivery: deliveryId }, "acting on a webhook delivery failed");
      });
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
  idle(): Promise<void> {
    return this.chain;
  }

  /** Stops looking for lapsed claims; resolves when the work under way has ended. */
  async stop(): Promise<void> {
    clearInterval(this.timer);
    await this.chain;
  }

  private async takeBack(): Promise<void> {
    const lapsed = await reclaimLapsedVcsDeliveries(this.o.ctx);
    if (lapsed.length > 0)
      this.o.log.warn(
        { deliveries: lapsed },
        "webhook deliveries whose server died while acting on them are taken up again",
      );
    for (const id of await unclaimedVcsDeliveries(this.o.ctx)) this.enqueue(id);
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
