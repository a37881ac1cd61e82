import { maxWebhookBytes, messageOf } from "@drover/protocol";
import { deliveryHeaders, headersMayProve, verifyDelivery } from "@drover/vcs";
import { createServer, type IncomingMessage, type Server, type ServerResponse } from "node:http";
import type { Logger } from "pino";
import type { AgentVcsConnection } from "./config.js";

/*
 * The VCS agent's webhook listener, inside the private network: the VCS delivers here, the agent
 * verifies each delivery with the connection's webhook secret from its own configuration (GitHub's
 * X-Hub-Signature-256, GitLab's X-Gitlab-Token) and keeps only verified ones, on disk, for the
 * server (delivery-spool.ts). The 202 comes once the delivery is kept, whether or not the server
 * can be reached just then.
 */

export interface Delivery {
  connection: string;
  event: string;
  deliveryId: string;
  body: Buffer;
}

export interface WebhookListenerOptions {
  port: number;
  address: string | undefined;
  connections: ReadonlyMap<string, AgentVcsConnection>;
  log: Logger;
  /** Keeps a verified delivery for the server; false when it cannot (the spool is full). */
  accept(delivery: Delivery): Promise<boolean>;
}

/** The delivery's event and id when it carries a valid signature or token for `c`; undefined otherwise. */
export function verifiedDelivery(
  c: AgentVcsConnection,
  req: IncomingMessage,
  body: Buffer,
): { event: string; deliveryId: string } | undefined {
  if (c.webhookSecret === undefined || !verifyDelivery(c.provider, c.webhookSecret, req.headers, body))
    return undefined;
  return deliveryHeaders(c.provider, req.headers, body);
}

function answer(res: ServerResponse, status: number, text: string): void {
  res.writeHead(status, { "content-type": "text/plain; charset=utf-8", connection: "close" });
  res.end(`${text}\n`);
}

async function readBody(req: IncomingMessage): Promise<Buffer | undefined> {
  const chunks: Buffer[] = [];
  let size = 0;
  for await (const chunk of req as AsyncIterable<Buffer>) {
    size += chunk.length;
    if (size > maxWebhookBytes) return undefined;
    chunks.push(chunk);
  }
  return Buffer.concat(chunks);
}

/** Listens for deliveries at `POST /hooks/<connection>`. */
export async function startWebhookListener(o: WebhookListenerOptions): Promise<Server> {
  const server = createServer((req, res) => {
    const refused = (connection: string) => {
      o.log.warn({ connection }, "webhook delivery refused: bad or missing signature");
      answer(res, 401, "bad or missing signature");
    };
    void (async () => {
      const match = /^\/hooks\/([A-Za-z0-9][A-Za-z0-9_.-]*)$/.exec((req.url ?? "").split("?")[0] ?? "");
      const connection = match?.[1] === undefined ? undefined : o.connections.get(match[1]);
      // Unknown connection, or one without a secret: nothing says which.
      if (req.method !== "POST" || !match?.[1] || !connection?.webhookSecret) return answer(res, 404, "not found");
      // As much of the proof as the headers hold is checked before a body is read into memory.
      if (!headersMayProve(connection.provider, connection.webhookSecret, req.headers)) return refused(match[1]);
      const body = await readBody(req);
      if (body === undefined) return answer(res, 413, "delivery too large");
      const verified = verifiedDelivery(connection, req, body);
      if (!verified) return refused(match[1]);
      const where = { connection: match[1], delivery: verified.deliveryId, event: verified.event };
      let kept: boolean;
      try {
        kept = await o.accept({ connection: match[1], ...verified, body });
      } catch (err) {
        o.log.error({ ...where, err: messageOf(err) }, "a webhook delivery could not be kept");
        return answer(res, 503, "the delivery could not be kept; retry");
      }
      if (!kept) {
        o.log.warn(where, "webhook delivery refused: the deliveries kept for the server fill the spool");
        return answer(res, 503, "too many deliveries wait for the Drover server; retry");
      }
      o.log.info(where, "webhook delivery kept for the server");
      answer(res, 202, "accepted");
    })().catch(() => answer(res, 500, "internal error"));
  });
  await new Promise<void>((resolve, reject) => {
    server.once("error", reject);
    const listening = () => {
      server.off("error", reject);
      resolve();
    };
    if (o.address === undefined) server.listen(o.port, listening);
    else server.listen(o.port, o.address, listening);
  });
  return server;
}
