import { routes, userApi, type VcsConnection } from "@drover/protocol";
import type { FastifyInstance } from "fastify";
import {
  createVcsConnection,
  deleteVcsConnection,
  getVcsConnection,
  listVcsConnections,
  vcsWebhookSecret,
  type StoredVcsConnection,
} from "../store/vcs-connections.js";
import { getVcsDelivery, listVcsDeliveries } from "../store/vcs-deliveries.js";
import { waitForEvent } from "../events.js";
import { requestSignal } from "./auth.js";
import { getWorkspaceVcs } from "../store/workspace-vcs.js";
import { linkWithWebhook, unlinkWithWebhook, webhookUrl, type WebhookContext } from "../vcs/webhook-registration.js";
import { vcsClient } from "@drover/vcs";
import type { HttpContext } from "./context.js";
import { registrar, type ServeOptions } from "./serve.js";
import { registerVcsWebhookRoute } from "./vcs-webhook-routes.js";

/** VCS connections, their webhook deliveries and workspaces' repository links under /api/v1. */
export function registerVcsRoutes(app: FastifyInstance, http: HttpContext, options: ServeOptions): void {
  const ctx = http.store;
  const serve = registrar(app, userApi, options);
  const shown = (c: StoredVcsConnection): VcsConnection => ({
    ...c,
    webhookUrl: webhookUrl(http.publicUrl(), c.name),
  });
  serve(routes.createVcsConnection, async ({ body }) => {
    const created = await createVcsConnection(ctx, body);
    return { ...shown(created), webhookSecret: await vcsWebhookSecret(ctx, created.id) };
  });
  serve(routes.listVcsConnections, async () => ({ items: (await listVcsConnections(ctx)).map(shown) }));
  serve(routes.getVcsConnection, async ({ params }) => shown(await getVcsConnection(ctx, params.connection)));
  serve(routes.deleteVcsConnection, async ({ params }) => deleteVcsConnection(ctx, params.connection));
  serve(routes.listVcsDeliveries, async ({ params, query }) => ({
    items: await listVcsDeliveries(ctx, params.connection, query.limit),
  }));
  serve(routes.getVcsDelivery, async ({ params, query }, _req, reply) => {
    const signal = requestSignal(reply, http.shutdown);
    const deadline = Date.now() + query.wait;
    for (;;) {
      // Subscribe before reading, so its end in between wakes us.
      const left = Math.max(0, deadline - Date.now());
      const wake = waitForEvent(ctx.events, "vcs-delivery-processed", params.delivery, left, signal);
      const delivery = await getVcsDelivery(ctx, params.connection, params.delivery);
      if (delivery.status === "processed" || Date.now() >= deadline || signal.aborted) {
        wake.cancel();
        return delivery;
      }
      await wake.promise;
    }
  });
  const hooks: WebhookContext = {
    ctx,
    log: app.log,
    publicUrl: () => http.publicUrl(),
    client: http.vcsClient ?? ((endpoint) => vcsClient(endpoint)),
    agentTaskMs: http.vcsAgentTaskMs ?? 300_000,
  };
  serve(routes.linkWorkspaceVcs, async ({ params, body }) => linkWithWebhook(hooks, params.ws, body));
  serve(routes.getWorkspaceVcs, async ({ params }) => getWorkspaceVcs(ctx, params.ws));
  serve(routes.unlinkWorkspaceVcs, async ({ params }) => unlinkWithWebhook(hooks, params.ws));
  registerVcsWebhookRoute(app, http, options, http.vcsWebhooks);
}
