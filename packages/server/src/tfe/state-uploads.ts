import { newId } from "@drover/protocol";
import { z } from "zod";
import { spooledBody } from "../http/bodies.js";
import type { HttpContext } from "../http/context.js";
import { maxStateBytes } from "../http/state-routes.js";
import { iso } from "../store/context.js";
import { writeState } from "../store/state.js";
import {
  capabilityKey,
  newNonce,
  requestCapability,
  signCapability,
  spendCapability,
  usingCapability,
} from "./capability.js";
import type { FastifyRequest } from "fastify";
import { attribute, JsonApiError, one, type RequestResource, type ResourceObject } from "./jsonapi.js";
import { created, tfeApi, tfeRoute, type TfeAnswer, type TfeRegistrar } from "./serve.js";

/*
 * The state upload flow terraform uses first: it posts a state version's serial, lineage and
 * MD5 without the state, is given two upload URLs, and PUTs the raw state and the JSON state
 * to them without its token. The raw-state URL carries what its write needs (workspace, MD5,
 * the lock the poster held) inside what is signed, so the PUT is checked by the same
 * writeState as every other state write, under the lock of the client that asked, and nothing
 * is kept between the two requests. Each URL is signed for PUT of that one version and works
 * once.
 */

const rawKind = "state-versions";
const jsonKind = "state-versions-json";

export const stateUploadRoutes = {
  uploadState: tfeRoute({
    method: "PUT",
    path: `${tfeApi}/state-versions/:id/upload/:capability`,
    summary: "Upload a state version's raw state (signed single-use URL, no token)",
    auth: "capability",
    bodyLimit: maxStateBytes,
  }),
  uploadJsonState: tfeRoute({
    method: "PUT",
    path: `${tfeApi}/state-versions/:id/json-upload/:capability`,
    summary: "Upload a state version's JSON state, which is not kept (signed single-use URL, no token)",
    auth: "capability",
    // The JSON state is larger than the raw one it describes.
    bodyLimit: maxStateBytes * 2,
  }),
};

/** What the raw-state PUT writes with, fixed when the URL is issued. */
const ticketSchema = z.object({
  workspaceId: z.string(),
  md5: z.string().optional(),
  lockId: z.string().optional(),
});
type Ticket = z.infer<typeof ticketSchema>;

const encodeTicket = (t: Ticket): string => Buffer.from(JSON.stringify(t)).toString("base64url");

function decodeTicket(raw: string): Ticket {
  try {
    return ticketSchema.parse(JSON.parse(Buffer.from(raw, "base64url").toString("utf8")));
  } catch {
    // Unreachable with a verified signature; a forged ticket fails the signature first.
    throw new JsonApiError(403, "forbidden", "this URL is refused: its ticket is malformed");
  }
}

export interface PendingVersionInput {
  workspaceId: string;
  resource: RequestResource;
  /** The lock the poster holds, which the upload writes under. */
  lockId: string | undefined;
}

/** A state version awaiting its upload, with the two URLs terraform PUTs to. */
export async function createPendingStateVersion(http: HttpContext, input: PendingVersionInput): Promise<TfeAnswer> {
  const ctx = http.store;
  const doc = input.resource;
  const md5 = attribute(doc, "md5", z.string().regex(/^[0-9a-fA-F]{32}$/, "must be a hex MD5"));
  const serial = attribute(doc, "serial", z.number().int().nonnegative());
  const lineage = attribute(doc, "lineage", z.string());
  const id = newId("sv");
  const ticket = encodeTicket({
    workspaceId: input.workspaceId,
    ...(md5 === undefined ? {} : { md5: Buffer.from(md5, "hex").toString("base64") }),
    ...(input.lockId === undefined ? {} : { lockId: input.lockId }),
  });
  const key = await capabilityKey(ctx);
  const expiresAt = ctx.now() + http.capabilityUrlMs;
  const raw = signCapability(key, {
    method: "PUT",
    kind: rawKind,
    id: `${id}.${ticket}`,
    expiresAt,
    nonce: newNonce(),
  });
  const json = signCapability(key, { method: "PUT", kind: jsonKind, id, expiresAt, nonce: newNonce() });
  const base = `${http.publicUrl()}${tfeApi}/state-versions/${id}`;
  const resource: ResourceObject = {
    id,
    type: rawKind,
    attributes: {
      serial: serial ?? 0,
      ...(lineage === undefined ? {} : { lineage }),
      ...(md5 === undefined ? {} : { md5: md5.toLowerCase() }),
      status: "pending",
      "created-at": iso(ctx.now()),
      // The ticket rides in the query: a path segment that long is refused by the router (414).
      "hosted-state-upload-url": `${base}/upload/${raw}?ticket=${ticket}`,
      "hosted-json-state-upload-url": `${base}/json-upload/${json}`,
      "resources-processed": false,
    },
    relationships: { workspace: { data: { type: "workspaces", id: input.workspaceId } } },
  };
  return created(one(resource));
}

export function registerStateUploadRoutes(serve: TfeRegistrar, http: HttpContext): void {
  const ctx = http.store;

  /** The raw state upload's capability covers the state version and its ticket. */
  const rawCapability = (req: FastifyRequest) => {
    const { id = "" } = req.params as { id?: string };
    const { ticket } = req.query as { ticket?: unknown };
    return requestCapability(ctx, req, rawKind, `${id}.${typeof ticket === "string" ? ticket : ""}`);
  };
  const jsonCapability = (req: FastifyRequest) =>
    requestCapability(ctx, req, jsonKind, (req.params as { id?: string }).id ?? "");

  serve(
    stateUploadRoutes.uploadState,
    async ({ params, query, req }) => {
      const id = params.id ?? "";
      const c = await rawCapability(req);
      const ticket = decodeTicket(typeof query.ticket === "string" ? query.ticket : "");
      await usingCapability(ctx, c, () =>
        writeState(ctx, {
          id,
          workspaceId: ticket.workspaceId,
          body: spooledBody(req),
          contentMd5: ticket.md5,
          lockId: ticket.lockId,
          runId: null,
        }),
      );
      return { status: 200 };
    },
    { beforeBody: async (req) => void (await rawCapability(req)), upload: "spooled" },
  );

  serve(
    stateUploadRoutes.uploadJsonState,
    async ({ req }) => {
      await spendCapability(ctx, await jsonCapability(req));
      // Drover reads outputs from the raw state; the JSON state (provider-schema view) is read and dropped.
      return { status: 200 };
    },
    { beforeBody: async (req) => void (await jsonCapability(req)), upload: "dropped" },
  );
}
