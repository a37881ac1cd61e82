import { DroverError, routes, userApi } from "@drover/protocol";
import type { FastifyInstance } from "fastify";
import { currentState, deleteState, lockState, unlockState, writeState } from "../store/state.js";
import { getWorkspace } from "../store/workspaces.js";
import type { Callers } from "./auth.js";
import { spooledBody, spoolBodies } from "./bodies.js";
import type { HttpContext } from "./context.js";
import { registrar, type ServeOptions } from "./serve.js";

/** Largest state body accepted. */
export const maxStateBytes = 256 * 1024 * 1024;
/** Largest LockInfo body (LOCK, UNLOCK); terraform's are a few hundred bytes. */
const maxLockInfoBytes = 1024 * 1024;

/**
 * Terraform's `http` state backend on /api/v1/workspaces/:ws/state. Bodies are taken raw so
 * Content-MD5 is checked over the exact bytes terraform sent; a state body is spooled to disk.
 */
export function registerStateRoutes(app: FastifyInstance, http: HttpContext, options: ServeOptions): void {
  const ctx = http.store;
  const serve = registrar(app, userApi, options);
  app.removeAllContentTypeParsers();
  app.addContentTypeParser("*", { parseAs: "buffer", bodyLimit: maxLockInfoBytes }, (_req, body, done) =>
    done(null, body),
  );

  const workspaceOf = async ({ job }: Callers["state"], name: string) => {
    if (job) {
      // A job token learns nothing about other workspaces, not even whether they exist.
      const ws = await getWorkspace(ctx, name).catch(() => undefined);
      if (ws?.id !== job.workspace_id)
        throw new DroverError("forbidden", `this job token is scoped to workspace ${job.workspace_id}, not ${name}`);
      return { ws, job };
    }
    return { ws: await getWorkspace(ctx, name), job };
  };
  const raw = (body: Buffer | undefined): Buffer => body ?? Buffer.alloc(0);

  serve(routes.readState, async ({ params, caller }) => {
    const { ws } = await workspaceOf(caller, params.ws);
    return (await currentState(ctx, ws.id)) ?? null;
  });

  void app.register(async (upload) => {
    upload.removeAllContentTypeParsers();
    spoolBodies(upload, "*", http.uploadDir);
    registrar(upload, userApi, options)(
      routes.writeState,
      { bodyLimit: maxStateBytes },
      async ({ params, query, caller }, req) => {
        const { ws, job } = await workspaceOf(caller, params.ws);
        const body = spooledBody(req);
        if (body.size === 0) throw new DroverError("bad_request", "the state body is empty");
        const md5 = req.headers["content-md5"];
        await writeState(ctx, {
          workspaceId: ws.id,
          body,
          contentMd5: typeof md5 === "string" ? md5 : undefined,
          lockId: query.ID,
          runId: job?.run_id ?? null,
        });
      },
    );
  });

  serve(routes.deleteState, async ({ params, query, caller }) => {
    const { ws, job } = await workspaceOf(caller, params.ws);
    if (job) throw new DroverError("forbidden", "a job may not delete the workspace state");
    await deleteState(ctx, ws.id, query.ID);
  });

  serve(routes.lockState, async ({ params, body, caller }) => {
    const { ws, job } = await workspaceOf(caller, params.ws);
    await lockState(ctx, ws.id, raw(body).toString("utf8"), job?.id ?? null);
  });

  serve(routes.unlockState, async ({ params, body, caller }) => {
    const { ws } = await workspaceOf(caller, params.ws);
    await unlockState(ctx, ws.id, raw(body).toString("utf8"));
  });
}
