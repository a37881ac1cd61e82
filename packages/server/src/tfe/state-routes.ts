import { constants } from "node:buffer";
import { createHash } from "node:crypto";
import type { Output } from "@drover/protocol";
import { z } from "zod";
import type { HttpContext } from "../http/context.js";
import { maxStateBytes } from "../http/state-routes.js";
import { iso, type StoreContext } from "../store/context.js";
import { readStateVersion, writeState } from "../store/state.js";
import { stateVersionOutputs } from "../store/outputs.js";
import { attribute, JsonApiError, many, one, paginate, requestResource, type ResourceObject } from "./jsonapi.js";
import { created, ok, tfeApi, tfeRoute, type TfeRegistrar } from "./serve.js";
import { createPendingStateVersion } from "./state-uploads.js";
import { checkReadable } from "./remote-state-access.js";
import { noWorkspace, tfeWorkspace, writerLockId } from "./workspace-store.js";

/*
 * State versions over Drover's own state: a version posted here is written by the http
 * backend's writeState (lineage, serial and lock checks), and every version the http backend
 * or a run wrote is a state version here, so both protocols see one history.
 */

export const stateRoutes = {
  createStateVersion: tfeRoute({
    method: "POST",
    path: `${tfeApi}/workspaces/:id/state-versions`,
    summary: "Create a state version: inline `state` (base64), or without it to be given upload URLs",
    auth: "user",
    // base64 of the largest state the http backend takes, plus the JSON state beside it; but no
    // more than one string holds, since the document is parsed as one (past it: 413, not a 500).
    bodyLimit: Math.min(Math.ceil((maxStateBytes * 4) / 3) * 2 + 1024 * 1024, constants.MAX_STRING_LENGTH),
  }),
  currentStateVersion: tfeRoute({
    method: "GET",
    path: `${tfeApi}/workspaces/:id/current-state-version`,
    summary: "The workspace's current state version (404: no state yet)",
    auth: "reader",
  }),
  readStateVersion: tfeRoute({
    method: "GET",
    path: `${tfeApi}/state-versions/:id`,
    summary: "Show a state version",
    auth: "user",
  }),
  downloadStateVersion: tfeRoute({
    method: "GET",
    path: `${tfeApi}/state-versions/:id/download`,
    summary: "A state version's raw state",
    auth: "reader",
  }),
  stateVersionOutputs: tfeRoute({
    method: "GET",
    path: `${tfeApi}/state-versions/:id/outputs`,
    summary: "A state version's outputs (sensitive values hidden)",
    auth: "user",
  }),
  currentStateVersionOutputs: tfeRoute({
    method: "GET",
    path: `${tfeApi}/workspaces/:id/current-state-version-outputs`,
    summary: "The current state's outputs, sensitive values hidden ([] without state)",
    auth: "user",
  }),
  readStateVersionOutput: tfeRoute({
    method: "GET",
    path: `${tfeApi}/state-version-outputs/:id`,
    summary: "One output, its value shown even when sensitive",
    auth: "user",
  }),
};

interface VersionRow {
  id: string;
  workspace_id: string;
  serial: number | null;
  lineage: string | null;
  md5: string;
  size: number;
  run_id: string | null;
  created_at: number;
}

const versionColumns = ["id", "workspace_id", "serial", "lineage", "md5", "size", "run_id", "created_at"] as const;

const noVersion = (id: string | undefined) =>
  new JsonApiError(404, "not found", `no state version ${JSON.stringify(id)}`);

async function versionById(ctx: StoreContext, id: string): Promise<VersionRow> {
  const row = await ctx.db.selectFrom("state_versions").select(versionColumns).where("id", "=", id).executeTakeFirst();
  if (!row) throw noVersion(id);
  return row;
}

async function currentVersion(ctx: StoreContext, workspaceId: string): Promise<VersionRow | undefined> {
  return ctx.db
    .selectFrom("state_versions")
    .select(versionColumns)
    .where("workspace_id", "=", workspaceId)
    .where("deleted_at", "is", null)
    .orderBy("seq", "desc")
    .limit(1)
    .executeTakeFirst();
}

/** The outputs of a state version; none when the server cannot read it (an encrypted OpenTofu state). */
async function outputsOf(ctx: StoreContext, version: VersionRow): Promise<Output[]> {
  return (await stateVersionOutputs(ctx, version)) ?? [];
}

/** go-tfe's coarse output type, from the cty type JSON. */
function coarseType(type: unknown, value: unknown): string {
  const kind = Array.isArray(type) ? type[0] : type;
  if (kind === "string" || kind === "number") return kind;
  if (kind === "bool") return "boolean";
  if (kind === "list" || kind === "tuple" || kind === "set") return "array";
  if (kind === "map" || kind === "object") return "object";
  if (Array.isArray(value)) return "array";
  return value === null ? "string" : typeof value === "boolean" ? "boolean" : typeof value;
}

/**
 * An output's id: its state version and a digest of its name, short whatever the name's length
 * (an id is a URL path segment, and the router refuses long ones).
 */
const outputId = (versionId: string, name: string) => `svo.${versionId}.${nameDigest(name)}`;
const nameDigest = (name: string) => createHash("sha256").update(name).digest("base64url").slice(0, 22);

function outputResource(versionId: string, o: Output, reveal: boolean): ResourceObject {
  return {
    id: outputId(versionId, o.name),
    type: "state-version-outputs",
    attributes: {
      name: o.name,
      sensitive: o.sensitive,
      type: coarseType(o.type, o.value),
      value: o.sensitive && !reveal ? null : o.value,
      "detailed-type": o.type,
    },
  };
}

async function versionResource(http: HttpContext, v: VersionRow): Promise<ResourceObject> {
  const ctx = http.store;
  const outputs = await outputsOf(ctx, v);
  return {
    id: v.id,
    type: "state-versions",
    attributes: {
      serial: v.serial ?? 0,
      "created-at": iso(v.created_at),
      status: "finalized",
      md5: Buffer.from(v.md5, "base64").toString("hex"),
      size: v.size,
      // Absolute, as every URL handed out: a relative one loses a DROVER_PUBLIC_URL path prefix.
      "hosted-state-download-url": `${http.publicUrl()}${tfeApi}/state-versions/${v.id}/download`,
      "resources-processed": true,
    },
    relationships: {
      workspace: { data: { type: "workspaces", id: v.workspace_id } },
      outputs: { data: outputs.map((o) => ({ type: "state-version-outputs", id: outputId(v.id, o.name) })) },
      run: { data: v.run_id === null ? null : { type: "runs", id: v.run_id } },
    },
  };
}

const base64 = z.string().regex(/^[A-Za-z0-9+/=\s]*$/, "must be base64");

export function registerStateRoutes(serve: TfeRegistrar, http: HttpContext): void {
  const ctx = http.store;

  serve(stateRoutes.createStateVersion, async ({ params, body, caller }) => {
    const w = await tfeWorkspace(ctx, params.id ?? "");
    const resource = requestResource(body);
    const state = attribute(resource, "state", base64);
    if (state === undefined || state === "")
      return createPendingStateVersion(http, {
        workspaceId: w.ws.id,
        resource,
        lockId: writerLockId(w, caller.tokenId),
      });
    const md5 = attribute(resource, "md5", z.string().regex(/^[0-9a-fA-F]{32}$/, "must be a hex MD5"));
    const written = await writeState(ctx, {
      workspaceId: w.ws.id,
      body: Buffer.from(state, "base64"),
      contentMd5: md5 === undefined ? undefined : Buffer.from(md5, "hex").toString("base64"),
      lockId: writerLockId(w, caller.tokenId),
      runId: null,
    });
    return created(one(await versionResource(http, await versionById(ctx, written.id))));
  });

  serve(stateRoutes.currentStateVersion, async ({ params, caller }) => {
    const w = await tfeWorkspace(ctx, params.id ?? "");
    await checkReadable(ctx, caller, w.ws.id, () => noWorkspace(params.id));
    const v = await currentVersion(ctx, w.ws.id);
    if (!v) throw new JsonApiError(404, "not found", `workspace ${w.ws.name} has no state yet`);
    return ok(one(await versionResource(http, v)));
  });

  serve(stateRoutes.readStateVersion, async ({ params }) =>
    ok(one(await versionResource(http, await versionById(ctx, params.id ?? "")))),
  );

  serve(stateRoutes.downloadStateVersion, async ({ params, caller }) => {
    const v = await versionById(ctx, params.id ?? "");
    await checkReadable(ctx, caller, v.workspace_id, () => noVersion(params.id));
    return { status: 200, bytes: await readStateVersion(ctx, v.id), contentType: "application/json" };
  });

  const outputsDocument = (versionId: string, outputs: Output[]) => {
    const items = outputs.map((o) => outputResource(versionId, o, false));
    const page = paginate(items, { number: 1, size: Math.max(1, items.length) });
    return ok(many(page.items, page.pagination));
  };
  serve(stateRoutes.stateVersionOutputs, async ({ params }) => {
    const v = await versionById(ctx, params.id ?? "");
    return outputsDocument(v.id, await outputsOf(ctx, v));
  });
  serve(stateRoutes.currentStateVersionOutputs, async ({ params }) => {
    const w = await tfeWorkspace(ctx, params.id ?? "");
    const v = await currentVersion(ctx, w.ws.id);
    // No state is an empty list: a 404 makes `terraform output` fail.
    return v ? outputsDocument(v.id, await outputsOf(ctx, v)) : outputsDocument("", []);
  });

  serve(stateRoutes.readStateVersionOutput, async ({ params }) => {
    const [prefix, versionId, digest] = (params.id ?? "").split(".");
    const missing = () => new JsonApiError(404, "not found", `no state version output ${JSON.stringify(params.id)}`);
    if (prefix !== "svo" || !versionId || digest === undefined) throw missing();
    const output = (await outputsOf(ctx, await versionById(ctx, versionId))).find((o) => nameDigest(o.name) === digest);
    if (!output) throw missing();
    return ok(one(outputResource(versionId, output, true)));
  });
}
