import { z } from "zod";
import * as s from "../schemas.js";
import { agentApi, id, json, maxLongPollMs, noContent, ok, raw, route } from "./define.js";

const waitQuery = z.object({ wait: z.coerce.number().int().min(0).max(maxLongPollMs).default(0) });

/*
 * The VCS agents' half of the agent protocol: the same session as run agents (register, heartbeat,
 * deregister), then leased tasks instead of jobs. A session of a `runs` pool is refused here, as
 * a `vcs` pool's session is refused jobs (forbidden).
 */
export const vcsAgentRoutes = {
  pollVcsTask: route({
    method: "POST",
    path: `${agentApi}/vcs/tasks/next`,
    summary: "VCS agent: long-poll for the next task of its pool (?wait=ms)",
    auth: "session",
    query: waitQuery,
    response: ok(s.vcsTaskPollResponseSchema),
    errors: ["forbidden"],
  }),
  renewVcsTask: route({
    method: "POST",
    path: `${agentApi}/vcs/tasks/:id/lease`,
    summary: "VCS agent: renew a task's lease",
    auth: "session",
    params: id,
    body: json(s.vcsTaskAttemptSchema),
    response: ok(s.vcsTaskLeaseSchema),
    errors: ["forbidden", "not_found", "stale_attempt"],
  }),
  completeVcsTask: route({
    method: "POST",
    path: `${agentApi}/vcs/tasks/:id/complete`,
    summary: "VCS agent: a task's result (checked against its operation's schema) or its error",
    auth: "session",
    params: id,
    body: json(s.completeVcsTaskSchema),
    response: noContent,
    errors: ["forbidden", "not_found", "stale_attempt"],
  }),
  uploadVcsArchive: route({
    method: "PUT",
    path: `${agentApi}/vcs/tasks/:id/archive`,
    summary: "VCS agent: a fetch task's tar.gz (?attempt=), checked and stored like a CLI upload",
    auth: "session",
    params: id,
    query: s.vcsTaskAttemptSchema,
    body: raw("application/gzip"),
    response: noContent,
    errors: ["forbidden", "not_found", "stale_attempt", "payload_too_large", "invalid_archive"],
  }),
  forwardVcsWebhook: route({
    method: "POST",
    path: `${agentApi}/vcs/webhooks`,
    summary: "VCS agent: a webhook delivery it verified with the connection's secret, forwarded",
    auth: "session",
    body: json(s.forwardedDeliverySchema),
    response: noContent,
    errors: ["forbidden", "not_found"],
  }),
} as const;
