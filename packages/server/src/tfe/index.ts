import type { FastifyInstance } from "fastify";
import type { HttpContext } from "../http/context.js";
import {
  discoveryPath,
  organizationRoutes,
  registerDiscovery,
  registerOrganizationRoutes,
} from "./organization-routes.js";
import { registerStateRoutes, stateRoutes } from "./state-routes.js";
import { registerStateUploadRoutes, stateUploadRoutes } from "./state-uploads.js";
import { registerWorkspaceRoutes, workspaceRoutes } from "./workspace-routes.js";
import { registerWorkspaceDeleteRoutes, workspaceDeleteRoutes } from "./workspace-delete.js";
import { tfeApi, tfeScope, type TfeRoute } from "./serve.js";
import { configurationVersionRoutes, registerConfigurationVersionRoutes } from "./configuration-versions.js";
import { logRoutes, registerLogRoutes } from "./logs.js";
import { phaseRoutes, registerPhaseRoutes } from "./plans-applies.js";
import { registerRunRoutes, runRoutes } from "./runs.js";

/*
 * The TFE-compatible API terraform's `cloud` block and `backend "remote"` speak (decision 0068),
 * over the same workspaces, state and lock as Drover's own API and `http` backend.
 */

/** Every route of the TFE API, for the route tests (each area's table joins here). */
export const tfeRoutes: readonly TfeRoute[] = [
  ...Object.values(organizationRoutes),
  ...Object.values(workspaceRoutes),
  ...Object.values(workspaceDeleteRoutes),
  ...Object.values(stateRoutes),
  ...Object.values(stateUploadRoutes),
  ...Object.values(configurationVersionRoutes),
  ...Object.values(runRoutes),
  ...Object.values(phaseRoutes),
  ...Object.values(logRoutes),
];

/** Paths outside the tables: the discovery document. */
export const tfeExtraPaths = [discoveryPath] as const;

export function registerTfe(app: FastifyInstance, http: HttpContext): void {
  registerDiscovery(app);
  void app.register(
    async (scope) => {
      const serve = tfeScope(scope, http);
      registerOrganizationRoutes(serve, http);
      registerWorkspaceRoutes(serve, http);
      registerWorkspaceDeleteRoutes(serve, http);
      registerStateRoutes(serve, http);
      registerStateUploadRoutes(serve, http);
      registerConfigurationVersionRoutes(serve, http);
      registerRunRoutes(serve, http);
      registerPhaseRoutes(serve, http);
      registerLogRoutes(serve, http);
    },
    { prefix: tfeApi },
  );
}
