import { agentApi, DroverError, maxWebhookBytes, routes } from "@drover/protocol";
import type { FastifyInstance } from "fastify";

import {
  completeVcsTask,
  pollForVcsTask,
  relayedConnection,
  renewVcsTask,
  storeVcsArchive,
} from "../store/vcs-tasks.js";
import { requestSignal } from "./auth.js";
import { isBodyFile, spoolBodies } from "./bodies.js";
import type { HttpContext } from "./context.js";
import { registrar, type ServeOptions } from "./serve.js";
import { storeDelivery } from "./vcs-webhook-routes.js";

/** The VCS agents' routes under /api/agent/v1/vcs: leased tasks, fetch archives, forwarded webhooks. */
export function registerVcsAgentRoutes(app: FastifyInstance, http: HttpContext, options: ServeOptions): void {
  const ctx = http.store;
  const serve = registrar(app, agentApi, options);
  app.addHook("onRequest", async () => http.markActivity());

  serve(routes.pollVcsTask, async ({ query: { wait }, caller: agent }, _req, reply) => {
    const jittered = Math.round(wait * (0.8 + 0.2 * Math.random()));
    const task = await pollForVcsTask(ctx, agent, jittered, requestSignal(reply, http.shutdown));
    return { task, leaseTtlMs: ctx.settings.leaseTtlMs };
  });
  serve(routes.renewVcsTask, async ({ params, body, caller: agent }) =>
    renewVcsTask(ctx, agent, params.id, body.attempt),
  );
  serve(routes.completeVcsTask, async ({ params, body, caller: agent }) =>
    completeVcsTask(ctx, agent, params.id, body),
  );
  // The delivery in base64, and its JSON around it.
  serve(
    routes.forwardVcsWebhook,
    { bodyLimit: Math.ceil(maxWebhookBytes / 3) * 4 + 64 * 1024 },
    async ({ body, caller: agent }) => {
      const connection = await relayedConnection(ctx, agent, body.connection);
      const raw = Buffer.from(body.body, "base64");
      await storeDelivery(ctx, http.vcsWebhooks, connection, body, raw);
    },
  );

  void app.register(async (upload) => {
    upload.removeAllContentTypeParsers();
    spoolBodies(upload, "*", http.uploadDir);
    // One byte over the limit is let through so that the archive check names the archive's size.
    registrar(upload, agentApi, options)(
      routes.uploadVcsArchive,
      { bodyLimit: http.archiveLimits.maxCompressedBytes + 1 },
      async ({ params, query, caller: agent }, req) => {
        if (!isBodyFile(req.body))
          throw new DroverError(
            "bad_request",
            "upload the archive as a raw tar.gz body with Content-Type: application/gzip",
          );
        await storeVcsArchive(ctx, agent, params.id, query.attempt, req.body, http.archiveLimits);
      },
    );
  });
}
