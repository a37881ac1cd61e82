import { routes, userApi } from "@drover/protocol";
import type { FastifyInstance } from "fastify";
import {
  createVcsConnection,
  deleteVcsConnection,
  getVcsConnection,
  listVcsConnections,
} from "../store/vcs-connections.js";
import { getWorkspaceVcs, linkWorkspaceVcs, unlinkWorkspaceVcs } from "../store/workspace-vcs.js";
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
  serve(routes.linkWorkspaceVcs, async ({ params, body }) => linkWorkspaceVcs(ctx, params.ws, body));
  serve(routes.getWorkspaceVcs, async ({ params }) => getWorkspaceVcs(ctx, params.ws));
  serve(routes.unlinkWorkspaceVcs, async ({ params }) => unlinkWorkspaceVcs(ctx, params.ws));
}
