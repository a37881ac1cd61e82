import { routes, userApi } from "@drover/protocol";
import type { FastifyInstance } from "fastify";
import {
  createVcsConnection,
  deleteVcsConnection,
  getVcsConnection,
  listVcsConnections,
} from "../store/vcs-connections.js";
import { getWorkspaceVcs } from "../store/workspace-vcs.js";
import { linkWithWebhook, unlinkWithWebhook, type WebhookContext } from "../vcs/webhooks.js";
import { vcsClient } from "@drover/vcs";
import type { HttpContext } from "./context.js";
import { registrar, type ServeOptions } from "./serve.js";

/** VCS connections and workspaces' repository links under /api/v1. */
export function registerVcsRoutes(app: FastifyInstance, http: HttpContext, options: ServeOptions): void {
  const ctx = http.store;
  const serve = registrar(app, userApi, options);
  serve(routes.createVcsConnection, async ({ body }) => createVcsConnection(ctx, body));
  serve(routes.listVcsConnections, async () => ({ items: await listVcsConnections(ctx) }));
  serve(routes.getVcsConnection, async ({ params }) => getVcsConnection(ctx, params.connection));
  serve(routes.deleteVcsConnection, async ({ params }) => deleteVcsConnection(ctx, params.connection));
  const hooks: WebhookContext = {
    ctx,
    log: app.log,
    publicUrl: () => http.publicUrl(),
    client: http.vcsClient ?? ((endpoint) => vcsClient(endpoint)),
  };
  serve(routes.linkWorkspaceVcs, async ({ params, body }) => linkWithWebhook(hooks, params.ws, body));
  serve(routes.getWorkspaceVcs, async ({ params }) => getWorkspaceVcs(ctx, params.ws));
  serve(routes.unlinkWorkspaceVcs, async ({ params }) => unlinkWithWebhook(hooks, params.ws));
}
