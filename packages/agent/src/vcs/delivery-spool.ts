import { DroverError, messageOf } from "@drover/protocol";
import { createHash } from "node:crypto";
import { mkdir, readdir, readFile, rename, rm, stat, writeFile } from "node:fs/promises";
import { join } from "node:path";
import type { Logger } from "pino";
import { Backoff } from "../session/backoff.js";
import type { Delivery } from "./webhooks.js";

/*
 * Webhook deliveries the VCS agent has verified, kept on disk until the server has taken them. A
 * VCS does not deliver again by itself (GitHub never does; GitLab turns off a hook that keeps
 * failing), so the listener answers 202 once a delivery is on disk, and this forwards it whenever
 * the server can be reached, oldest first, across restarts of the agent. A delivery forwarded
 * twice is stored once: the server keys deliveries by their id.
 */

export interface DeliverySpoolOptions {
  /** `<data dir>/vcs-deliveries`: kept across restarts. */
  dir: string;
  /** Hands one delivery to the server; rejects when it did not take it. */
  forward(delivery: Delivery, signal: AbortSignal): Promise<void>;
  log: Logger;
  /** Bytes the spool may hold; a delivery past them is refused, so the VCS records the failure. */
  maxBytes?: number;
  /** Pauses after a failed forward: from initialMs, doubling to maxMs. */
  retry?: { initialMs: number; maxMs: number };
}

/** What the spool holds of one delivery. */
interface Spooled {
  connection: string;
  event: string;
  deliveryId: string;
  /** The body as received, base64. */
  body: string;
}

const suffix = ".delivery.json";

/** An answer the server will give again however often it is asked: the delivery is dropped. */
function refusedForGood(err: unknown): boolean {
  return (
    err instanceof DroverError && ["bad_request", "not_found", "forbidden", "payload_too_large"].includes(err.code)
  );
}

export class DeliverySpool {
  private readonly stopped = new AbortController();
  private wake: () => void = () => undefined;
  private loop: Promise<void> | undefined;
  private bytes = 0;
  private seq = 0;

  constructor(private readonly o: DeliverySpoolOptions) {}

  /** Makes the folder, drops half-written files of an earlier run, counts what it holds, starts forwarding. */
  async start(): Promise<void> {
    await mkdir(this.o.dir, { recursive: true });
    for (const name of await readdir(this.o.dir)) {
      if (name.startsWith(".")) await rm(join(this.o.dir, name), { force: true });
      else this.bytes += (await stat(join(this.o.dir, name))).size;
    }
    const held = (await this.pending()).length;
    if (held > 0) this.o.log.info({ deliveries: held }, "forwarding webhook deliveries kept from before");
    this.loop = this.forwardLoop();
  }

  /** Keeps a verified delivery until the server has it; false when the spool is full. */
  async accept(delivery: Delivery): Promise<boolean> {
    const spooled: Spooled = { ...delivery, body: delivery.body.toString("base64") };
    const text = JSON.stringify(spooled);
    if (this.bytes + text.length > (this.o.maxBytes ?? 512 * 1024 * 1024)) return false;
    // Named by arrival, so the oldest goes first; written under a dot name, then renamed whole.
    const id = createHash("sha256").update(`${delivery.connection}\0${delivery.deliveryId}`).digest("hex").slice(0, 16);
    const name = `${Date.now().toString().padStart(15, "0")}-${String(this.seq++).padStart(6, "0")}-${id}${suffix}`;
    const temporary = join(this.o.dir, `.${name}`);
    await writeFile(temporary, text);
    await rename(temporary, join(this.o.dir, name));
    this.bytes += text.length;
    this.kick();
    return true;
  }

  /** Forwards at once instead of waiting out a pause (a delivery came, the agent registered). */
  kick(): void {
    this.wake();
  }

  /** Stops forwarding; what is left stays on disk for the next start. */
  async stop(): Promise<void> {
    this.stopped.abort();
    this.wake();
    await this.loop;
  }

  private async pending(): Promise<string[]> {
    // Not the dot names of deliveries still being written: "." sorts before every digit, and one
    // read half-written would be dropped as unreadable before its rename.
    return (await readdir(this.o.dir)).filter((n) => n.endsWith(suffix) && !n.startsWith(".")).sort();
  }

  private async drop(name: string): Promise<void> {
    const path = join(this.o.dir, name);
    const size = await stat(path).then(
      (s) => s.size,
      () => 0,
    );
    await rm(path, { force: true });
    this.bytes = Math.max(0, this.bytes - size);
  }

  /** Resolves after `ms`, or sooner on a kick or the stop. */
  private pause(ms: number | undefined): Promise<void> {
    return new Promise((resolve) => {
      const timer = ms === undefined ? undefined : setTimeout(done, ms);
      function done() {
        clearTimeout(timer);
        resolve();
      }
      this.wake = done;
    });
  }

  private async forwardLoop(): Promise<void> {
    const backoff = new Backoff(this.o.retry ?? { initialMs: 1_000, maxMs: 60_000 });
    while (!this.stopped.signal.aborted) {
      // Set before looking, so a delivery accepted during the look is not slept through.
      const woken = this.pause(undefined);
      const [next] = await this.pending().catch(() => [] as string[]);
      if (next === undefined) {
        await woken;
        continue;
      }
      let delivery: Delivery;
      try {
        const s = JSON.parse(await readFile(join(this.o.dir, next), "utf8")) as Spooled;
        delivery = {
          connection: s.connection,
          event: s.event,
          deliveryId: s.deliveryId,
          body: Buffer.from(s.body, "base64"),
        };
      } catch (err) {
        this.o.log.warn({ file: next, err: messageOf(err) }, "dropped an unreadable kept webhook delivery");
        await this.drop(next);
        continue;
      }
      const where = { connection: delivery.connection, delivery: delivery.deliveryId, event: delivery.event };
      try {
        await this.o.forward(delivery, AbortSignal.any([this.stopped.signal, AbortSignal.timeout(30_000)]));
        await this.drop(next);
        backoff.reset();
        this.o.log.info(where, "webhook forwarded");
      } catch (err) {
        if (this.stopped.signal.aborted) return;
        if (refusedForGood(err)) {
          this.o.log.warn({ ...where, err: messageOf(err) }, "the server refused a webhook delivery; dropped");
          await this.drop(next);
          continue;
        }
        const wait = backoff.next(err);
        this.o.log.warn(
          { ...where, err: messageOf(err), retryInMs: wait },
          "forwarding a webhook delivery failed; kept",
        );
        await this.pause(wait);
      }
    }
  }
}
