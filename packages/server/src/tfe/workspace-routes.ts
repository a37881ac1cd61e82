import { DroverError, nameSchema, workingDirectorySchema } from "@drover/protocol";
import { z } from "zod";
import type { HttpContext } from "../http/context.js";
import { listVariables } from "../store/variables.js";
import { changeRemoteStateConsumers, createWorkspace, updateWorkspace } from "../store/workspaces.js";
import {
  attribute,
  isoTime,
  jsonBody,
  JsonApiError,
  many,
  one,
  pageRequest,
  paginate,
  requestResource,
  type ResourceObject,
} from "./jsonapi.js";
import { checkOrganization } from "./organization-routes.js";
import { checkReadable } from "./remote-state-access.js";
import { created, noContent, ok, tfeApi, tfeRoute, type TfeRegistrar } from "./serve.js";
import {
  addTags,
  engineOfClient,
  forceUnlockWorkspace,
  listTfeWorkspaces,
  lockWorkspace,
  noWorkspace,
  removeTags,
  setExecutionMode,
  tfeWorkspace,
  unlockWorkspace,
  type TfeWorkspace,
} from "./workspace-store.js";

const byName = `${tfeApi}/organizations/:org/workspaces`;
const byId = `${tfeApi}/workspaces/:id`;

export const workspaceRoutes = {
  listWorkspaces: tfeRoute({
    method: "GET",
    path: byName,
    summary: "List workspaces (search[name], search[tags], page[number], page[size])",
    auth: "user",
  }),
  createWorkspace: tfeRoute({ method: "POST", path: byName, summary: "Create a workspace", auth: "user" }),
  readWorkspaceByName: tfeRoute({
    method: "GET",
    path: `${byName}/:name`,
    summary: "Show a workspace",
    // terraform_remote_state looks the workspace up with a run's job token (decision 0072).
    auth: "reader",
  }),
  updateWorkspaceByName: tfeRoute({
    method: "PATCH",
    path: `${byName}/:name`,
    summary: "Update a workspace",
    auth: "user",
  }),
  readWorkspace: tfeRoute({ method: "GET", path: byId, summary: "Show a workspace by id", auth: "user" }),
  updateWorkspace: tfeRoute({ method: "PATCH", path: byId, summary: "Update a workspace by id", auth: "user" }),
  listTags: tfeRoute({
    method: "GET",
    path: `${byId}/relationships/tags`,
    summary: "A workspace's tags",
    auth: "user",
  }),
  addTags: tfeRoute({ method: "POST", path: `${byId}/relationships/tags`, summary: "Add tags", auth: "user" }),
  removeTags: tfeRoute({ method: "DELETE", path: `${byId}/relationships/tags`, summary: "Remove tags", auth: "user" }),
  lock: tfeRoute({ method: "POST", path: `${byId}/actions/lock`, summary: "Lock the workspace", auth: "user" }),
  unlock: tfeRoute({ method: "POST", path: `${byId}/actions/unlock`, summary: "Unlock your lock", auth: "user" }),
  forceUnlock: tfeRoute({
    method: "POST",
    path: `${byId}/actions/force-unlock`,
    summary: "Unlock whoever holds the lock",
    auth: "user",
  }),
  listRemoteStateConsumers: tfeRoute({
    method: "GET",
    path: `${byId}/relationships/remote-state-consumers`,
    summary: "The workspaces whose runs may read this one's state",
    auth: "user",
  }),
  addRemoteStateConsumers: tfeRoute({
    method: "POST",
    path: `${byId}/relationships/remote-state-consumers`,
    summary: "Let more workspaces' runs read this one's state",
    auth: "user",
  }),
  replaceRemoteStateConsumers: tfeRoute({
    method: "PATCH",
    path: `${byId}/relationships/remote-state-consumers`,
    summary: "Replace the workspaces whose runs may read this one's state",
    auth: "user",
  }),
  removeRemoteStateConsumers: tfeRoute({
    method: "DELETE",
    path: `${byId}/relationships/remote-state-consumers`,
    summary: "Stop workspaces' runs reading this one's state",
    auth: "user",
  }),
  listVars: tfeRoute({ method: "GET", path: `${byId}/vars`, summary: "The workspace's variables", auth: "user" }),
};

const permissions = Object.fromEntries(
  [
    "can-queue-run",
    "can-queue-apply",
    "can-queue-destroy",
    "can-update",
    "can-lock",
    "can-unlock",
    "can-force-unlock",
    "can-read-settings",
    // User tokens have no roles: any may delete a workspace, here as through Drover's own API.
    // terraform uses safe-delete (without -force) only when `can-force-delete` is present.
    "can-destroy",
    "can-force-delete",
    "can-update-variable",
    "can-read-state-versions",
    "can-create-state-versions",
  ].map((p) => [p, true]),
);

/** A workspace as go-tfe unmarshals it: `permissions` and `actions` must be there (the CLI dereferences them). */
export function workspaceResource(w: TfeWorkspace, organization: string): ResourceObject {
  const { ws } = w;
  return {
    id: ws.id,
    type: "workspaces",
    attributes: {
      name: ws.name,
      "execution-mode": w.executionMode,
      operations: w.executionMode === "remote",
      "terraform-version": ws.engineVersion ?? "latest",
      locked: w.lock !== null,
      "working-directory": ws.workingDirectory,
      "auto-apply": ws.autoApply,
      "structured-run-output-enabled": false,
      "tag-names": w.tags,
      "global-remote-state": ws.globalRemoteState,
      "vcs-repo": null,
      "created-at": ws.createdAt,
      "updated-at": ws.createdAt,
      actions: { "is-destroyable": true },
      permissions,
    },
    relationships: {
      organization: { data: { type: "organizations", id: organization } },
      "current-run": { data: ws.currentRunId === null ? null : { type: "runs", id: ws.currentRunId } },
    },
  };
}

const tagName = z
  .string()
  .min(1)
  .max(255)
  .regex(/^[A-Za-z0-9][A-Za-z0-9:_-]*$/, "use ASCII letters, digits, ':', '-' and '_'");
const tagItem = z.object({ attributes: z.object({ name: tagName }) });

/** Tags of a `tags` relationship or a tags document: `[{type:"tags", attributes:{name}}]`, ids optional. */
function tagsOf(data: unknown): string[] {
  const parsed = z.array(tagItem).safeParse(data ?? []);
  if (!parsed.success)
    throw new JsonApiError(
      422,
      "invalid attribute",
      `tags: ${parsed.error.issues.map((i) => `${i.path.join(".")}: ${i.message}`).join("; ")}`,
    );
  return parsed.data.map((t) => t.attributes.name);
}

const executionModeSchema = z.enum(["remote", "local"]);

/** A workspace named under the organization: by name only, never an id lookalike. */
export async function namedWorkspace(
  http: HttpContext,
  orgName: string | undefined,
  name: string | undefined,
): Promise<TfeWorkspace> {
  checkOrganization(http, orgName);
  const w = await tfeWorkspace(http.store, name ?? "");
  if (w.ws.name !== name) throw noWorkspace(name);
  return w;
}

export function registerWorkspaceRoutes(serve: TfeRegistrar, http: HttpContext): void {
  const ctx = http.store;
  const org = http.tfe.organization;
  const document = async (id: string) => one(workspaceResource(await tfeWorkspace(ctx, id), org));
  const named = (orgName: string | undefined, name: string | undefined) => namedWorkspace(http, orgName, name);

  serve(workspaceRoutes.listWorkspaces, async ({ params, query }) => {
    checkOrganization(http, params.org);
    const search = typeof query["search[name]"] === "string" ? query["search[name]"] : undefined;
    const tagText = typeof query["search[tags]"] === "string" ? query["search[tags]"] : "";
    const tags = tagText
      .split(",")
      .map((t) => t.trim())
      .filter((t) => t !== "");
    const found = await listTfeWorkspaces(ctx, { search, tags });
    const page = paginate(found, pageRequest(query));
    return ok(
      many(
        page.items.map((w) => workspaceResource(w, org)),
        page.pagination,
      ),
    );
  });

  serve(workspaceRoutes.createWorkspace, async ({ params, body, req }) => {
    checkOrganization(http, params.org);
    const resource = requestResource(body);
    const name = attribute(resource, "name", nameSchema);
    if (name === undefined) throw new JsonApiError(422, "invalid attribute", "attribute name is required");
    const mode = attribute(resource, "execution-mode", executionModeSchema);
    const tags = [
      ...tagsOf((resource.relationships.tags as { data?: unknown } | undefined)?.data),
      ...(attribute(resource, "tag-names", z.array(tagName)) ?? []),
    ];
    let ws;
    try {
      ws = await createWorkspace(ctx, {
        name,
        pool: http.tfe.pool,
        // A workspace tofu made is a tofu workspace, so Drover's own runs of it use tofu too.
        engine: engineOfClient(req.headers["user-agent"]),
        engineVersion: null,
        workingDirectory: attribute(resource, "working-directory", workingDirectorySchema) ?? "",
        autoApply: attribute(resource, "auto-apply", z.boolean()) ?? false,
      });
    } catch (err) {
      if (err instanceof DroverError && err.code === "already_exists")
        throw new JsonApiError(422, "invalid attribute", `name ${JSON.stringify(name)} has already been taken`);
      if (err instanceof DroverError && err.code === "not_found")
        throw new JsonApiError(
          422,
          "invalid attribute",
          `new workspaces go to the pool DROVER_TFE_POOL names (${JSON.stringify(http.tfe.pool)}), which does not exist: create it with \`drover pool create ${http.tfe.pool}\``,
        );
      throw err;
    }
    const w = await tfeWorkspace(ctx, ws.id);
    if (tags.length > 0) await addTags(ctx, w, tags);
    if (mode !== undefined) await setExecutionMode(ctx, w, mode);
    // The remote backend's `terraform-version` on create is not kept: the workspace shows `latest`.
    return created(await document(ws.id));
  });

  serve(workspaceRoutes.readWorkspaceByName, async ({ params, caller }) => {
    const w = await named(params.org, params.name);
    await checkReadable(ctx, caller, w.ws.id, () => noWorkspace(params.name));
    return ok(one(workspaceResource(w, org)));
  });
  serve(workspaceRoutes.readWorkspace, async ({ params }) => document(params.id ?? "").then(ok));

  const update = async (w: TfeWorkspace, body: Buffer | undefined) => {
    const resource = requestResource(body);
    const version = attribute(resource, "terraform-version", z.string());
    if (version !== undefined) checkVersion(w, version);
    const mode = attribute(resource, "execution-mode", executionModeSchema);
    if (mode !== undefined) await setExecutionMode(ctx, w, mode);
    const autoApply = attribute(resource, "auto-apply", z.boolean());
    const workingDirectory = attribute(resource, "working-directory", workingDirectorySchema);
    const globalRemoteState = attribute(resource, "global-remote-state", z.boolean());
    if (autoApply !== undefined || workingDirectory !== undefined || globalRemoteState !== undefined)
      await updateWorkspace(ctx, w.ws.id, { autoApply, workingDirectory, globalRemoteState });
    return ok(await document(w.ws.id));
  };
  serve(workspaceRoutes.updateWorkspaceByName, async ({ params, body }) =>
    update(await named(params.org, params.name), body),
  );
  serve(workspaceRoutes.updateWorkspace, async ({ params, body }) =>
    update(await tfeWorkspace(ctx, params.id ?? ""), body),
  );

  const tagDocument = (body: Buffer | undefined) => {
    const doc = jsonBody(body);
    if (typeof doc !== "object" || doc === null || !("data" in doc))
      throw new JsonApiError(422, "invalid document", "send `data`: an array of tags");
    return tagsOf((doc as { data: unknown }).data);
  };
  serve(workspaceRoutes.listTags, async ({ params }) => {
    const w = await tfeWorkspace(ctx, params.id ?? "");
    const items = w.tags.map((t) => ({ id: t, type: "tags", attributes: { name: t } }));
    const page = paginate(items, { number: 1, size: Math.max(1, items.length) });
    return ok(many(page.items, page.pagination));
  });
  serve(workspaceRoutes.addTags, async ({ params, body }) => {
    await addTags(ctx, await tfeWorkspace(ctx, params.id ?? ""), tagDocument(body));
    return noContent;
  });
  serve(workspaceRoutes.removeTags, async ({ params, body }) => {
    await removeTags(ctx, await tfeWorkspace(ctx, params.id ?? ""), tagDocument(body));
    return noContent;
  });

  serve(workspaceRoutes.lock, async ({ params, body, caller }) => {
    const w = await tfeWorkspace(ctx, params.id ?? "");
    // terraform sends `{"data":{"type":"","attributes":{"reason":…}}}`; any body without one locks too.
    const doc = jsonBody(body) as { data?: { attributes?: { reason?: unknown } } } | undefined;
    const reason = doc?.data?.attributes?.reason;
    await lockWorkspace(ctx, w, caller.tokenId, typeof reason === "string" ? reason : "");
    return ok(await document(w.ws.id));
  });
  serve(workspaceRoutes.unlock, async ({ params, caller }) => {
    const w = await tfeWorkspace(ctx, params.id ?? "");
    await unlockWorkspace(ctx, w, caller.tokenId);
    return ok(await document(w.ws.id));
  });
  serve(workspaceRoutes.forceUnlock, async ({ params }) => {
    const w = await tfeWorkspace(ctx, params.id ?? "");
    await forceUnlockWorkspace(ctx, w);
    return ok(await document(w.ws.id));
  });

  registerRemoteStateConsumerRoutes(serve, http);

  serve(workspaceRoutes.listVars, async ({ params, query }) => {
    const w = await tfeWorkspace(ctx, params.id ?? "");
    const vars = (await listVariables(ctx, w.ws.id)).map((v) => ({
      id: `var-${w.ws.id}-${v.kind}-${v.key}`,
      type: "vars",
      attributes: {
        key: v.key,
        value: v.value,
        category: v.kind,
        hcl: v.hcl,
        sensitive: v.sensitive,
        description: "",
        "version-id": isoTime(Date.parse(v.updatedAt)),
      },
      relationships: { configurable: { data: { type: "workspaces", id: w.ws.id } } },
    }));
    const page = paginate(vars, pageRequest(query));
    return ok(many(page.items, page.pagination));
  });
}

/** `data: [{type: "workspaces", id}]`, the body of the remote-state-consumers relationship calls. */
function workspaceIdsOf(body: Buffer | undefined): string[] {
  const parsed = z.object({ data: z.array(z.object({ id: z.string().min(1) })).max(500) }).safeParse(jsonBody(body));
  if (!parsed.success)
    throw new JsonApiError(422, "invalid document", 'send `data`: an array of `{type: "workspaces", id}`');
  return parsed.data.data.map((w) => w.id);
}

/** A consumer that names no workspace is a 404, as TFE answers. */
async function consumersChange<T>(change: () => Promise<T>): Promise<T> {
  try {
    return await change();
  } catch (err) {
    if (err instanceof DroverError && err.code === "not_found") throw new JsonApiError(404, "not found", err.message);
    if (err instanceof DroverError && err.code === "bad_request")
      throw new JsonApiError(422, "invalid attribute", err.message);
    throw err;
  }
}

/** The remote-state-consumers relationship: list, add, replace and remove, by workspace id. */
function registerRemoteStateConsumerRoutes(serve: TfeRegistrar, http: HttpContext): void {
  const ctx = http.store;
  const org = http.tfe.organization;
  serve(workspaceRoutes.listRemoteStateConsumers, async ({ params, query }) => {
    const w = await tfeWorkspace(ctx, params.id ?? "");
    const consumers = await Promise.all(w.ws.remoteStateConsumers.map((name) => tfeWorkspace(ctx, name)));
    const page = paginate(consumers, pageRequest(query));
    return ok(
      many(
        page.items.map((c) => workspaceResource(c, org)),
        page.pagination,
      ),
    );
  });
  serve(workspaceRoutes.addRemoteStateConsumers, async ({ params, body }) => {
    const w = await tfeWorkspace(ctx, params.id ?? "");
    const add = workspaceIdsOf(body);
    await consumersChange(() => changeRemoteStateConsumers(ctx, w.ws.id, { add }));
    return noContent;
  });
  serve(workspaceRoutes.replaceRemoteStateConsumers, async ({ params, body }) => {
    const w = await tfeWorkspace(ctx, params.id ?? "");
    const remoteStateConsumers = workspaceIdsOf(body);
    await consumersChange(() => updateWorkspace(ctx, w.ws.id, { remoteStateConsumers }));
    return noContent;
  });
  serve(workspaceRoutes.removeRemoteStateConsumers, async ({ params, body }) => {
    const w = await tfeWorkspace(ctx, params.id ?? "");
    const remove = workspaceIdsOf(body);
    await consumersChange(() => changeRemoteStateConsumers(ctx, w.ws.id, { remove }));
    return noContent;
  });
}

/**
 * Drover runs the engine version the workspace pins (unpinned: the agents' own). A client's
 * version is accepted when it is what the workspace shows; another is a 422, which terraform
 * reports as a warning and then uses the version shown.
 */
function checkVersion(w: TfeWorkspace, version: string): void {
  const shown = w.ws.engineVersion ?? "latest";
  if (version === shown || version === "latest") return;
  throw new JsonApiError(
    422,
    "invalid attribute",
    `terraform-version: this workspace runs ${shown === "latest" ? `the agents' ${w.ws.engine}` : `${w.ws.engine} ${shown}`}; pin a version with \`drover workspace update ${w.ws.name} --engine-version <v>\``,
  );
}
