import { DroverError } from "@drover/protocol";
import type { FastifyInstance, FastifyRequest } from "fastify";
import { z } from "zod";
import { currentState, deleteState, lockState, unlockState, writeState } from "../store/state.js";
import { getWorkspace } from "../store/workspaces.js";
import type { JobRow } from "../store/queue.js";
import { authenticateFirst, callerOf, requireStateCaller } from "./auth.js";
import type { HttpContext } from "./context.js";
import { parse } from "./errors.js";

const params = z.object({ ws: z.string() });

/**
 * Terraform's `http` state backend on /api/v1/workspaces/:ws/state. Bodies are taken raw so
 * Content-MD5 is checked over the exact bytes terraform sent.
 */
export function registerStateRoutes(app: FastifyInstance, http: HttpContext): void {
  const ctx = http.store;
  app.removeAllContentTypeParsers();
  app.addContentTypeParser("*", { parseAs: "buffer", bodyLimit: 256 * 1024 * 1024 }, (_req, body, done) => done(null, body));

  app.addHook("onRequest", authenticateFirst((request) => requireStateCaller(ctx, request)));

  const workspaceOf = async (req: FastifyRequest) => {
    const { job } = callerOf<{ job: JobRow | null }>(req);
    const name = parse(params, req.params, "path").ws;
    if (job) {
      // A job token learns nothing about other workspaces, not even whether they exist.
      const ws = await getWorkspace(ctx, name).catch(() => undefined);
      if (ws?.id !== job.workspace_id) throw new DroverError("forbidden", `this job token is scoped to workspace ${job.workspace_id}, not ${name}`);
      return { ws, job };
    }
    return { ws: await getWorkspace(ctx, name), job };
  };
  const raw = (req: FastifyRequest): Buffer => (Buffer.isBuffer(req.body) ? req.body : Buffer.alloc(0));

  app.get("/workspaces/:ws/state", async (req, reply) => {
    const { ws } = await workspaceOf(req);
    const body = await currentState(ctx, ws.id);
    if (!body) return reply.code(204).send();
    return reply.header("content-type", "application/json").send(body);
  });

  app.post("/workspaces/:ws/state", async (req, reply) => {
    const { ws, job } = await workspaceOf(req);
    const body = raw(req);
    if (body.length === 0) throw new DroverError("bad_request", "the state body is empty");
    const { ID } = parse(z.object({ ID: z.string().optional() }), req.query, "query");
    const md5 = req.headers["content-md5"];
    await writeState(ctx, { workspaceId: ws.id, body, contentMd5: typeof md5 === "string" ? md5 : undefined, lockId: ID, runId: job?.run_id ?? null });
    return reply.code(200).send();
  });

  app.delete("/workspaces/:ws/state", async (req, reply) => {
    const { ws, job } = await workspaceOf(req);
    if (job) throw new DroverError("forbidden", "a job may not delete the workspace state");
    const { ID } = parse(z.object({ ID: z.string().optional() }), req.query, "query");
    await deleteState(ctx, ws.id, ID);
    return reply.code(200).send();
  });

  app.route({
    method: "LOCK",
    url: "/workspaces/:ws/state",
    handler: async (req, reply) => {
      const { ws, job } = await workspaceOf(req);
      await lockState(ctx, ws.id, raw(req).toString("utf8"), job?.id ?? null);
      return reply.code(200).send();
    },
  });

  app.route({
    method: "UNLOCK",
    url: "/workspaces/:ws/state",
    handler: async (req, reply) => {
      const { ws } = await workspaceOf(req);
      await unlockState(ctx, ws.id, raw(req).toString("utf8"));
      return reply.code(200).send();
    },
  });
}
