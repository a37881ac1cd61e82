import { DroverError, newId } from "@drover/protocol";
import { z } from "zod";
import type { HttpContext } from "../http/context.js";
import { createConfigurationVersion } from "../store/configuration-versions.js";
import { getWorkspace } from "../store/workspaces.js";
import { spooledBody } from "../http/bodies.js";
import { capabilityKey, newNonce, requestCapability, signCapability, usingCapability } from "./capability.js";
import type { FastifyRequest } from "fastify";
import { attribute, isoTime, jsonBody, one, requestResource, type ResourceObject } from "./jsonapi.js";
import { created, ok, tfeApi, tfeRoute, type TfeRegistrar } from "./serve.js";

/*
 * Configuration versions as terraform makes them: created empty, then filled by one PUT of the
 * tar.gz to an upload URL that carries no token. The archive becomes a Drover configuration
 * version under the same id, checked exactly like one `drover run start` uploads.
 */

const kind = "configuration-versions";

export const configurationVersionRoutes = {
  createConfigurationVersion: tfeRoute({
    method: "POST",
    path: `${tfeApi}/workspaces/:id/configuration-versions`,
    summary: "Create a configuration version awaiting its upload (speculative: its runs only plan)",
    auth: "user",
  }),
  getConfigurationVersion: tfeRoute({
    method: "GET",
    path: `${tfeApi}/configuration-versions/:id`,
    summary: "Show a configuration version: pending until its archive is uploaded",
    auth: "user",
  }),
  uploadConfigurationVersion: tfeRoute({
    method: "PUT",
    path: `${tfeApi}/configuration-versions/:id/upload/:capability`,
    summary: "Upload the configuration's tar.gz (signed single-use URL, no token)",
    auth: "capability",
  }),
};

/** A TFE configuration version: a Drover one, with the status and speculative flag terraform reads. */
export interface TfeConfigurationVersion {
  id: string;
  workspaceId: string;
  speculative: boolean;
  status: "pending" | "uploaded" | "errored";
  errorMessage: string | null;
  createdAt: number;
}

/** A configuration version by id, whether made through this API or by Drover's own. */
export async function findConfigurationVersion(http: HttpContext, id: string): Promise<TfeConfigurationVersion> {
  const db = http.store.db;
  const own = await db.selectFrom("tfe_configuration_versions").selectAll().where("id", "=", id).executeTakeFirst();
  if (own)
    return {
      id,
      workspaceId: own.workspace_id,
      speculative: own.speculative === 1,
      status: own.status,
      errorMessage: own.error_message,
      createdAt: Number(own.created_at),
    };
  const drover = await db
    .selectFrom("configuration_versions")
    .select(["workspace_id", "created_at"])
    .where("id", "=", id)
    .executeTakeFirst();
  if (!drover) throw new DroverError("not_found", `no configuration version ${JSON.stringify(id)}`);
  const createdAt = Number(drover.created_at);
  return {
    id,
    workspaceId: drover.workspace_id,
    speculative: false,
    status: "uploaded",
    errorMessage: null,
    createdAt,
  };
}

function resource(cv: TfeConfigurationVersion, uploadUrl?: string): ResourceObject {
  return {
    id: cv.id,
    type: kind,
    attributes: {
      status: cv.status,
      speculative: cv.speculative,
      "auto-queue-runs": false,
      provisional: false,
      source: "tfe-api",
      "created-at": isoTime(cv.createdAt),
      ...(cv.errorMessage === null ? {} : { error: "invalid_archive", "error-message": cv.errorMessage }),
      ...(uploadUrl === undefined ? {} : { "upload-url": uploadUrl }),
    },
    relationships: {},
    links: { self: `${tfeApi}/configuration-versions/${cv.id}` },
  };
}

export function registerConfigurationVersionRoutes(serve: TfeRegistrar, http: HttpContext): void {
  const ctx = http.store;
  const r = configurationVersionRoutes;

  serve(r.createConfigurationVersion, async ({ params, body }) => {
    const ws = await getWorkspace(ctx, params.id ?? "");
    // terraform sends a document; a client that sends none gets the defaults, as with TFE.
    const doc = jsonBody(body) === undefined ? undefined : requestResource(body);
    const speculative = (doc && attribute(doc, "speculative", z.boolean())) ?? false;
    const row = {
      id: newId("cv"),
      workspace_id: ws.id,
      speculative: speculative ? 1 : 0,
      status: "pending" as const,
      error_message: null,
      created_at: ctx.now(),
    };
    await ctx.db.insertInto("tfe_configuration_versions").values(row).execute();
    const key = await capabilityKey(ctx);
    const segment = signCapability(key, {
      method: "PUT",
      kind,
      id: row.id,
      expiresAt: ctx.now() + http.capabilityUrlMs,
      nonce: newNonce(),
    });
    const uploadUrl = `${http.publicUrl()}${tfeApi}/configuration-versions/${row.id}/upload/${segment}`;
    return created(one(resource(await findConfigurationVersion(http, row.id), uploadUrl)));
  });

  serve(r.getConfigurationVersion, async ({ params }) =>
    ok(one(resource(await findConfigurationVersion(http, params.id ?? "")))),
  );

  // One byte over the limit is let through so that the archive check names the archive's size.
  const upload = { ...r.uploadConfigurationVersion, bodyLimit: http.archiveLimits.maxCompressedBytes + 1 };
  const uploadCapability = (req: FastifyRequest) =>
    requestCapability(ctx, req, kind, (req.params as { id?: string }).id ?? "");
  serve(
    upload,
    async ({ params, req }) => {
      const id = params.id ?? "";
      await usingCapability(ctx, await uploadCapability(req), async () => {
        const cv = await findConfigurationVersion(http, id);
        if (cv.status !== "pending")
          throw new DroverError("conflict", `configuration version ${id} is ${cv.status}: it takes one upload`);
        try {
          // The same check and storage as an upload through Drover's own API.
          await createConfigurationVersion(ctx, cv.workspaceId, spooledBody(req), http.archiveLimits, { id });
        } catch (err) {
          if (err instanceof DroverError && (err.code === "invalid_archive" || err.code === "payload_too_large"))
            await ctx.db
              .updateTable("tfe_configuration_versions")
              .set({ status: "errored", error_message: err.message })
              .where("id", "=", id)
              .execute();
          throw err;
        }
      });
      return { status: 200 };
    },
    { beforeBody: async (req) => void (await uploadCapability(req)), upload: "spooled" },
  );
}
