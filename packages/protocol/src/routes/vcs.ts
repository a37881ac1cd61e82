import { z } from "zod";
import * as s from "../schemas.js";
import { accepted, created, json, list, maxLongPollMs, noContent, ok, raw, route, userApi, ws } from "./define.js";

const connection = z.object({ connection: z.string() });

/** Query of GET …/deliveries/:delivery: how long to wait for the delivery to be processed. */
export const vcsDeliveryWaitQuerySchema = z.object({
  wait: z.coerce.number().int().min(0).max(maxLongPollMs).default(0),
});

/** VCS connections, and the link of a workspace to a repository branch whose new commits it runs. */
export const vcsRoutes = {
  createVcsConnection: route({
    method: "POST",
    path: `${userApi}/vcs-connections`,
    summary:
      "Connect a VCS (GitHub or GitLab) by token, or GitHub as a GitHub App; secrets are write-only, the webhook secret shown this once",
    auth: "user",
    body: json(s.createVcsConnectionSchema),
    response: created(s.createdVcsConnectionSchema),
    errors: ["already_exists"],
  }),
  listVcsConnections: route({
    method: "GET",
    path: `${userApi}/vcs-connections`,
    summary: "List VCS connections (never their tokens)",
    auth: "user",
    response: ok(list(s.vcsConnectionSchema)),
  }),
  getVcsConnection: route({
    method: "GET",
    path: `${userApi}/vcs-connections/:connection`,
    summary: "Show a VCS connection (id or name)",
    auth: "user",
    params: connection,
    response: ok(s.vcsConnectionSchema),
    errors: ["not_found"],
  }),
  deleteVcsConnection: route({
    method: "DELETE",
    path: `${userApi}/vcs-connections/:connection`,
    summary: "Delete a VCS connection no workspace is linked through",
    auth: "user",
    params: connection,
    response: noContent,
    errors: ["not_found", "conflict"],
  }),
  linkWorkspaceVcs: route({
    method: "PUT",
    path: `${userApi}/workspaces/:ws/vcs`,
    summary:
      "Link a workspace to a repository branch: its new commits start runs; registers the repository's webhook, or answers what to register",
    auth: "user",
    params: ws,
    body: json(s.linkWorkspaceVcsSchema),
    response: ok(s.workspaceVcsSchema),
    errors: ["not_found"],
  }),
  getWorkspaceVcs: route({
    method: "GET",
    path: `${userApi}/workspaces/:ws/vcs`,
    summary: "Show a workspace's repository link",
    auth: "user",
    params: ws,
    response: ok(s.workspaceVcsSchema),
    errors: ["not_found"],
  }),
  unlinkWorkspaceVcs: route({
    method: "DELETE",
    path: `${userApi}/workspaces/:ws/vcs`,
    summary: "Unlink a workspace from its repository",
    auth: "user",
    params: ws,
    response: noContent,
    errors: ["not_found"],
  }),
  listVcsDeliveries: route({
    method: "GET",
    path: `${userApi}/vcs-connections/:connection/deliveries`,
    summary: "A VCS connection's webhook deliveries, newest first, with what each did per linked workspace",
    auth: "user",
    params: connection,
    query: s.listVcsDeliveriesQuerySchema,
    response: ok(list(s.vcsDeliverySchema)),
    errors: ["not_found"],
  }),
  getVcsDelivery: route({
    method: "GET",
    path: `${userApi}/vcs-connections/:connection/deliveries/:delivery`,
    summary: `Show one webhook delivery (its id as the webhook's answer gave it); with ?wait=ms (most ${maxLongPollMs}), once it is processed`,
    auth: "user",
    params: z.object({ connection: z.string(), delivery: z.string() }),
    query: vcsDeliveryWaitQuerySchema,
    response: ok(s.vcsDeliverySchema),
    errors: ["not_found"],
  }),
  receiveVcsWebhook: route({
    method: "POST",
    path: `${userApi}/vcs/:connection/webhook`,
    summary:
      "A VCS's webhook delivery, proven by X-Hub-Signature-256 (GitHub) or X-Gitlab-Token (GitLab); answered at once, acted on after",
    auth: "none",
    params: connection,
    body: raw("application/json"),
    response: accepted(s.webhookAcceptedSchema),
    errors: ["not_found", "unauthorized", "payload_too_large"],
  }),
} as const;
