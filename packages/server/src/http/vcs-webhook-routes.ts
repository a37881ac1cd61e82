import { DroverError, maxWebhookBytes, routes, userApi, type VcsProvider } from "@drover/protocol";
import type { StoreContext } from "../store/context.js";
import type { FastifyInstance, FastifyReply, FastifyRequest } from "fastify";
import { getVcsConnection, vcsWebhookSecret, type StoredVcsConnection } from "../store/vcs-connections.js";
import { recordVcsDelivery } from "../store/vcs-deliveries.js";
import { deliveryHeaders, headersMayProve, verifyDelivery } from "@drover/vcs";
import { parseEvent, type WebhookEvent } from "../vcs/webhook-events.js";
import type { HttpContext, WebhookQueue } from "./context.js";
import { registrar, type ServeOptions } from "./serve.js";

const connections = new WeakMap<FastifyRequest, { connection: StoredVcsConnection; secret: string }>();

/** The 401 of a delivery without the connection's proof. */
function unproven(provider: VcsProvider): DroverError {
  return new DroverError(
    "unauthorized",
    provider === "github"
      ? "X-Hub-Signature-256 is missing or is not the HMAC of this body with the connection's webhook secret"
      : "X-Gitlab-Token is missing or is not the connection's webhook secret",
  );
}

function summaryOf(e: WebhookEvent): string {
  switch (e.kind) {
    case "push":
      return `push to ${e.branch} at ${e.after.slice(0, 12)} (${e.repository})`;
    case "pull_request":
      return `pull request #${e.number} ${e.headBranch} → ${e.baseBranch} at ${e.headSha.slice(0, 12)} (${e.repository})`;
    case "ignored":
      return `ignored: ${e.reason}`;
  }
}

/**
 * Stores a verified delivery once per delivery id and queues its work (a replay queues nothing):
 * the server's own webhook route and the deliveries VCS agents forward both end here.
 */
export async function storeDelivery(
  ctx: StoreContext,
  queue: WebhookQueue | undefined,
  connection: { id: string; provider: VcsProvider },
  headers: { event: string; deliveryId: string },
  raw: Buffer,
): Promise<{ id: string; duplicate: boolean }> {
  const { event, parsed } = parseEvent(connection.provider, headers.event, raw);
  const stored = await recordVcsDelivery(ctx, {
    connectionId: connection.id,
    deliveryId: headers.deliveryId,
    event,
    summary: summaryOf(parsed),
    work: JSON.stringify(parsed),
  });
  if (!stored.duplicate) queue?.enqueue(stored.id, connection.id);
  return stored;
}

/**
 * The webhook endpoint: no Drover token, the provider's proof instead. The connection is looked
 * up before the body is read, so a sender that does not know one learns nothing else (one 404
 * body for every miss) and sends no body into memory; so is as much of the proof as the headers
 * hold (GitLab's token, the form of GitHub's signature).
 */
export function registerVcsWebhookRoute(
  app: FastifyInstance,
  http: HttpContext,
  options: ServeOptions,
  queue: WebhookQueue | undefined,
): void {
  const ctx = http.store;
  void app.register(async (scope) => {
    scope.removeAllContentTypeParsers();
    scope.addContentTypeParser("*", { parseAs: "buffer", bodyLimit: maxWebhookBytes }, (_req, body, done) =>
      done(null, body),
    );
    const known = async (req: FastifyRequest, reply: FastifyReply) => {
      const name = (req.params as { connection?: string }).connection ?? "";
      const conn = await getVcsConnection(ctx, name).catch((err: unknown) => {
        if (err instanceof DroverError && err.code === "not_found") return undefined;
        throw err;
      });
      if (!conn) throw new DroverError("not_found", "not found");
      const secret = await vcsWebhookSecret(ctx, conn.id);
      // Refused before the body is read: a sender without the proof gets no body into memory.
      if (!headersMayProve(conn.provider, secret, req.headers)) {
        void reply.header("connection", "close");
        throw unproven(conn.provider);
      }
      connections.set(req, { connection: conn, secret });
    };
    registrar(scope, userApi, options)(
      routes.receiveVcsWebhook,
      { bodyLimit: maxWebhookBytes, onRequest: known },
      async ({ body }, req, reply) => {
        const entry = connections.get(req);
        if (!entry) throw new DroverError("not_found", "not found");
        const { connection: conn, secret } = entry;
        const raw = body ?? Buffer.alloc(0);
        if (!verifyDelivery(conn.provider, secret, req.headers, raw)) throw unproven(conn.provider);
        const stored = await storeDelivery(ctx, queue, conn, deliveryHeaders(conn.provider, req.headers, raw), raw);
        void reply.header("cache-control", "no-store");
        return { delivery: stored.id, duplicate: stored.duplicate };
      },
    );
  });
}
