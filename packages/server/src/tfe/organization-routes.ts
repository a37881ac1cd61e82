import type { FastifyInstance } from "fastify";
import type { HttpContext } from "../http/context.js";
import { JsonApiError, many, one, type ResourceObject } from "./jsonapi.js";
import { noContent, ok, tfeApi, tfeRoute, type TfeRegistrar } from "./serve.js";

/** Discovery, the ping whose headers go-tfe reads, the caller's account, and the one organization. */
export const organizationRoutes = {
  ping: tfeRoute({ method: "GET", path: `${tfeApi}/ping`, summary: "API version headers", auth: "none" }),
  accountDetails: tfeRoute({
    method: "GET",
    path: `${tfeApi}/account/details`,
    summary: "The caller (terraform login checks its token with it)",
    auth: "user",
  }),
  organization: tfeRoute({
    method: "GET",
    path: `${tfeApi}/organizations/:org`,
    summary: "The organization",
    auth: "user",
  }),
  entitlementSet: tfeRoute({
    method: "GET",
    path: `${tfeApi}/organizations/:org/entitlement-set`,
    summary: "What the organization may do: remote operations and state storage",
    // terraform_remote_state asks it too, with a run's job token (decision 0072).
    auth: "reader",
  }),
  runQueue: tfeRoute({
    method: "GET",
    path: `${tfeApi}/organizations/:org/runs/queue`,
    summary: "The organization's queued runs",
    auth: "user",
  }),
  capacity: tfeRoute({
    method: "GET",
    path: `${tfeApi}/organizations/:org/capacity`,
    summary: "The organization's run capacity",
    auth: "user",
  }),
};

/** `/.well-known/terraform.json`, outside /api/v2. */
export const discoveryPath = "/.well-known/terraform.json";

/**
 * Service discovery. No `versions.v1` (the remote backend would fetch version constraints from
 * it) and no `login.v1`: without it `terraform login` sends the user to the web UI's token page.
 */
export const discoveryDocument = {
  "tfe.v2": `${tfeApi}/`,
  "tfe.v2.1": `${tfeApi}/`,
  "tfe.v2.2": `${tfeApi}/`,
  "state.v2": `${tfeApi}/`,
};

/** The organization a path names: Drover serves one, named by DROVER_TFE_ORGANIZATION. */
export function checkOrganization(http: HttpContext, org: string | undefined): string {
  if (org !== http.tfe.organization)
    throw new JsonApiError(
      404,
      "not found",
      `no organization ${JSON.stringify(org)} (this server's is ${JSON.stringify(http.tfe.organization)})`,
    );
  return org;
}

export function organizationResource(name: string): ResourceObject {
  return {
    id: name,
    type: "organizations",
    attributes: {
      name,
      "external-id": name,
      permissions: { "can-create-workspace": true, "can-update": false, "can-destroy": false },
    },
  };
}

export function registerOrganizationRoutes(serve: TfeRegistrar, http: HttpContext): void {
  serve(organizationRoutes.ping, async () => noContent);
  serve(organizationRoutes.accountDetails, async ({ caller }) =>
    ok(
      one({
        id: caller.tokenId,
        type: "users",
        attributes: { username: caller.tokenId, "is-service-account": false },
      }),
    ),
  );
  serve(organizationRoutes.organization, async ({ params }) =>
    ok(one(organizationResource(checkOrganization(http, params.org)))),
  );
  serve(organizationRoutes.entitlementSet, async ({ params }) => {
    const org = checkOrganization(http, params.org);
    return ok(
      one({
        id: org,
        type: "entitlement-sets",
        attributes: {
          operations: true,
          "state-storage": true,
          "private-module-registry": false,
          sentinel: false,
          teams: false,
          "vcs-integrations": false,
        },
      }),
    );
  });
  serve(organizationRoutes.runQueue, async ({ params }) => {
    checkOrganization(http, params.org);
    const pagination = { "current-page": 1, "next-page": null, "prev-page": null, "total-pages": 1, "total-count": 0 };
    return ok(many([], pagination));
  });
  serve(organizationRoutes.capacity, async ({ params }) => {
    const org = checkOrganization(http, params.org);
    return ok(one({ id: org, type: "organization-capacity", attributes: { pending: 0, running: 0 } }));
  });
}

/** Serves the discovery document (go-tfe refuses any media type but application/json). */
export function registerDiscovery(app: FastifyInstance): void {
  app.get(discoveryPath, async (_req, reply) => reply.type("application/json").send(discoveryDocument));
}
