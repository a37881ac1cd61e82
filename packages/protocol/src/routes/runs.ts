import { z } from "zod";
import * as s from "../schemas.js";
import {
  bytes,
  created,
  emptyOk,
  id,
  json,
  list,
  logHeaders,
  maxLongPollMs,
  ok,
  page,
  raw,
  route,
  userApi,
  ws,
} from "./define.js";

const lockIdQuery = z.object({ ID: z.string().optional() });

/**
 * Query of GET /api/v1/runs/:id: with `wait` (ms), the answer waits until the run's status
 * differs from `status` (by default the status it has when the request arrives).
 */
export const runWaitQuerySchema = z.object({
  wait: z.coerce.number().int().min(0).max(maxLongPollMs).default(0),
  status: s.runStatusSchema.optional(),
});

/** Query of GET /api/v1/runs/:id/logs. */
export const logQuerySchema = z.object({
  phase: s.phaseSchema.default("plan"),
  offset: z.coerce.number().int().min(0).default(0),
  wait: z.coerce.number().int().min(0).max(maxLongPollMs).default(0),
  limit: z.coerce
    .number()
    .int()
    .min(1)
    .max(8 * 1024 * 1024)
    .default(1024 * 1024),
});

/** terraform's http state backend, and runs: create, follow, confirm or discard, cancel. */
export const runRoutes = {
  readState: route({
    method: "GET",
    path: `${userApi}/workspaces/:ws/state`,
    summary: "terraform http backend: read state (204 when none)",
    auth: "state",
    params: ws,
    response: { ...bytes("application/json"), emptyStatus: 204 },
    errors: ["not_found"],
  }),
  writeState: route({
    method: "POST",
    path: `${userApi}/workspaces/:ws/state`,
    summary: "terraform http backend: write state (?ID=lock id)",
    auth: "state",
    params: ws,
    query: lockIdQuery,
    body: raw("application/json"),
    response: emptyOk,
    errors: ["not_found", "invalid_json", "conflict", "state_locked"],
  }),
  deleteState: route({
    method: "DELETE",
    path: `${userApi}/workspaces/:ws/state`,
    summary: "terraform http backend: delete state",
    auth: "state",
    params: ws,
    query: lockIdQuery,
    response: emptyOk,
    errors: ["not_found", "state_locked"],
  }),
  lockState: route({
    method: "LOCK",
    path: `${userApi}/workspaces/:ws/state`,
    summary: "terraform http backend: lock (LockInfo body; 423 with the holder's)",
    auth: "state",
    params: ws,
    body: raw("application/json"),
    response: emptyOk,
    errors: ["not_found", "invalid_json", "state_locked"],
  }),
  unlockState: route({
    method: "UNLOCK",
    path: `${userApi}/workspaces/:ws/state`,
    summary: "terraform http backend: unlock (LockInfo body)",
    auth: "state",
    params: ws,
    body: raw("application/json"),
    response: emptyOk,
    errors: ["not_found", "invalid_json", "state_locked"],
  }),

  // ---------- runs ----------
  createRun: route({
    method: "POST",
    path: `${userApi}/runs`,
    summary: "Create a run",
    auth: "user",
    body: json(s.createRunSchema),
    response: created(s.runSchema),
    errors: ["not_found"],
  }),
  listRuns: route({
    method: "GET",
    path: `${userApi}/runs`,
    summary: "List runs, newest first (?workspace=&status=&limit=&after=)",
    auth: "user",
    query: s.listRunsQuerySchema,
    response: ok(page(s.runSchema)),
    errors: ["not_found"],
  }),
  getRun: route({
    method: "GET",
    path: `${userApi}/runs/:id`,
    summary: `Show a run; with ?wait=ms (most ${maxLongPollMs}) and &status=, once its status differs from that one`,
    auth: "user",
    params: id,
    query: runWaitQuerySchema,
    response: ok(s.runSchema),
    errors: ["not_found"],
  }),
  confirmRun: route({
    method: "POST",
    path: `${userApi}/runs/:id/confirm`,
    summary: "Apply a planned run",
    auth: "user",
    params: id,
    response: ok(s.runSchema),
    errors: ["not_found", "invalid_transition"],
  }),
  discardRun: route({
    method: "POST",
    path: `${userApi}/runs/:id/discard`,
    summary: "Discard a planned run",
    auth: "user",
    params: id,
    response: ok(s.runSchema),
    errors: ["not_found", "invalid_transition"],
  }),
  cancelRun: route({
    method: "POST",
    path: `${userApi}/runs/:id/cancel`,
    summary: "Cancel a run (?force=true once terraform had its chance)",
    auth: "user",
    params: id,
    query: z.object({ force: z.enum(["true", "false"]).default("false") }),
    response: ok(s.runSchema),
    errors: ["not_found", "invalid_transition"],
  }),
  listRunJobs: route({
    method: "GET",
    path: `${userApi}/runs/:id/jobs`,
    summary: "Jobs of a run (none for an unknown run)",
    auth: "user",
    params: id,
    response: ok(list(s.jobSchema)),
  }),
  runPlan: route({
    method: "GET",
    path: `${userApi}/runs/:id/plan`,
    summary: "Plan JSON of a run (`terraform show -json` of its plan, sensitive values redacted)",
    auth: "user",
    params: id,
    response: bytes("application/json"),
    errors: ["not_found"],
  }),
  runLogs: route({
    method: "GET",
    path: `${userApi}/runs/:id/logs`,
    summary: `Read a phase's log from an offset (?phase=&offset=&wait=&limit=); headers ${logHeaders.nextOffset} and ${logHeaders.complete}`,
    auth: "user",
    params: id,
    query: logQuerySchema,
    response: bytes("application/octet-stream"),
    errors: ["not_found"],
  }),
} as const;
