import { bytes, created, json, noContent, ok, route, userApi } from "./define.js";
import * as s from "../schemas.js";

/** The cookie that carries a browser session. */
export const webSessionCookie = "drover_session";
/**
 * Events of the live stream (`GET /api/v1/events`, server-sent events); each carries an id only,
 * and the page re-reads what changed.
 */
export const liveEvents = {
  /** A run changed status (data: the run id). */
  run: "run",
  /** A job's log grew or ended (data: the job id). */
  log: "log",
  /** Agents registered, went away or changed (data: an agent id, or a key for all). */
  agents: "agents",
  /** Events may have been missed: re-read everything shown (data: empty). */
  resync: "resync",
} as const;

/** The header that carries a browser session's CSRF token. */
export const csrfHeader = "x-drover-csrf";

/**
 * Browser sign-in: a user API token is exchanged for a session cookie (HttpOnly, SameSite=Strict),
 * which then stands for that token on the user API. A request sent with the cookie that changes
 * anything must carry the session's CSRF token in the `x-drover-csrf` header.
 */
export const webRoutes = {
  createWebSession: route({
    method: "POST",
    path: `${userApi}/web/session`,
    summary: "Sign in a browser with an API token (sets the session cookie)",
    auth: "none",
    body: json(s.webSignInSchema),
    response: created(s.webSessionSchema),
    errors: ["unauthorized", "token_revoked", "forbidden"],
  }),
  getWebSession: route({
    method: "GET",
    path: `${userApi}/web/session`,
    summary: "The browser session of the cookie, with its CSRF token",
    auth: "user",
    response: ok(s.webSessionSchema),
  }),
  deleteWebSession: route({
    method: "DELETE",
    path: `${userApi}/web/session`,
    summary: "Sign the browser out (ends the session, clears the cookie)",
    auth: "user",
    response: noContent,
  }),
  liveEvents: route({
    method: "GET",
    path: `${userApi}/events`,
    summary: "Live changes as server-sent events (run, log, agents, resync), for pages that follow them",
    auth: "user",
    response: bytes("text/event-stream"),
  }),
};
