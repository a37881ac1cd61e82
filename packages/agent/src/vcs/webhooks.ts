import { messageOf } from "@drover/protocol";
import { createHash, createHmac, timingSafeEqual } from "node:crypto";
import { createServer, type IncomingMessage, type Server, type ServerResponse } from "node:http";
import type { Logger } from "pino";
import type { AgentVcsConnection } from "./config.js";

/*
 * The VCS agent's webhook listener, inside the private network: the VCS delivers here, the agent
 * verifies each delivery with the connection's webhook secret from its own configuration (GitHub's
 * X-Hub-Signature-256, GitLab's X-Gitlab-Token), and forwards only verified ones to the server.
 * The answer waits for the server to take the delivery, so a VCS retries one that did not reach it.
 */

/** Largest delivery accepted; its base64 form must fit the server's forward route. */
export const maxDeliveryBytes = 3 * 1024 * 1024;

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
  forward(delivery: Delivery, signal: AbortSignal): Promise<void>;
}

const same = (a: string, b: string) => {
  // Hashed first: equal lengths for timingSafeEqual, and no length leak.
  const h = (s: string) => createHash("sha256").update(s).digest();
  return timingSafeEqual(h(a), h(b));
};

const header = (req: IncomingMessage, name: string): string | undefined => {
  const v = req.headers[name];
  return Array.isArray(v) ? v[0] : v;
};

/** The delivery's event and id when it carries a valid signature or token for `c`; undefined otherwise. */
export function verifiedDelivery(
  c: AgentVcsConnection,
  req: IncomingMessage,
  body: Buffer,
): { event: string; deliveryId: string } | undefined {
  const secret = c.webhookSecret;
  if (secret === undefined) return undefined;
  const fallbackId = createHash("sha256").update(body).digest("hex");
  if (c.provider === "github") {
    const signature = header(req, "x-hub-signature-256");
    const expected = `sha256=${createHmac("sha256", secret).update(body).digest("hex")}`;
    if (signature === undefined || !same(signature, expected)) return undefined;
    return {
      event: header(req, "x-github-event") ?? "unknown",
      deliveryId: header(req, "x-github-delivery") ?? fallbackId,
    };
  }
  const token = header(req, "x-gitlab-token");
  if (token === undefined || !same(token, secret)) return undefined;
  return {
    event: header(req, "x-gitlab-event") ?? "unknown",
    deliveryId: header(req, "x-gitlab-event-uuid") ?? header(req, "x-gitlab-webhook-uuid") ?? fallbackId,
  };
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
    if (size > maxDeliveryBytes) return undefined;
    chunks.push(chunk);
  }
  return Buffer.concat(chunks);
}

/** Listens for deliveries at `POST /hooks/<connection>`. */
export async function startWebhookListener(o: WebhookListenerOptions): Promise<Server> {
  const server = createServer((req, res) => {
    void (async () => {
      const match = /^\/hooks\/([A-Za-z0-9][A-Za-z0-9_.-]*)$/.exec((req.url ?? "").split("?")[0] ?? "");
      const connection = match?.[1] === undefined ? undefined : o.connections.get(match[1]);
      // Unknown connection, or one without a secret: nothing says which.
      if (req.method !== "POST" || !match?.[1] || !connection?.webhookSecret) return answer(res, 404, "not found");
      const body = await readBody(req);
      if (body === undefined) return answer(res, 413, "delivery too large");
      const verified = verifiedDelivery(connection, req, body);
      if (!verified) {
        o.log.warn({ connection: match[1] }, "webhook delivery refused: bad or missing signature");
        return answer(res, 401, "bad or missing signature");
      }
      try {
        await o.forward({ connection: match[1], ...verified, body }, AbortSignal.timeout(10_000));
      } catch (err) {
        o.log.warn({ connection: match[1], delivery: verified.deliveryId, err: messageOf(err) }, "forwarding failed");
        return answer(res, 503, "the Drover server did not take the delivery; retry");
      }
      o.log.info({ connection: match[1], delivery: verified.deliveryId, event: verified.event }, "webhook forwarded");
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
