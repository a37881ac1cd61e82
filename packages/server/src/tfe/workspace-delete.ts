import type { HttpContext } from "../http/context.js";
import { WorkspaceDeleteRefused } from "../store/delete-safety.js";
import { deleteWorkspace } from "../store/workspaces.js";
import { JsonApiError } from "./jsonapi.js";
import { noContent, tfeApi, tfeRoute, type TfeAnswer, type TfeRegistrar } from "./serve.js";
import { namedWorkspace } from "./workspace-routes.js";
import { describeHolder, tfeWorkspace, type TfeWorkspace } from "./workspace-store.js";

/*
 * Workspace delete as terraform's `workspace delete` asks for it (cloud block, tags): without
 * `-force` a `safe-delete`, since the workspace resource has `can-force-delete`; with it a
 * DELETE. Both go through the store's delete and its rules; a refusal is a 409. go-tfe turns any
 * 409 of `safe-delete` into one of its own messages, chosen by words in the detail: "locked"
 * selects "Workspace is currently locked", anything else "still managing resources". So each
 * detail here says "locked" exactly when the workspace is held. A 404 reads to terraform as
 * "already gone", so it is only for a workspace that is not there.
 */

const byName = `${tfeApi}/organizations/:org/workspaces/:name`;
const byId = `${tfeApi}/workspaces/:id`;

export const workspaceDeleteRoutes = {
  deleteWorkspaceByName: tfeRoute({
    method: "DELETE",
    path: byName,
    summary: "Delete a workspace with its state, even one managing resources (refused while a run is active)",
    auth: "user",
  }),
  deleteWorkspace: tfeRoute({
    method: "DELETE",
    path: byId,
    summary: "Delete a workspace by id, even one managing resources (refused while a run is active)",
    auth: "user",
  }),
  safeDeleteWorkspaceByName: tfeRoute({
    method: "POST",
    path: `${byName}/actions/safe-delete`,
    summary: "Delete a workspace unless its state manages resources, it is locked or a run is active (409)",
    auth: "user",
  }),
  safeDeleteWorkspace: tfeRoute({
    method: "POST",
    path: `${byId}/actions/safe-delete`,
    summary: "Delete a workspace by id unless its state manages resources, it is locked or a run is active (409)",
    auth: "user",
  }),
};

/** The 409 detail of a refusal, in the words go-tfe and a reader need. */
function refusalDetail(w: TfeWorkspace, err: WorkspaceDeleteRefused): string {
  const name = w.ws.name;
  switch (err.reason) {
    case "active_run":
      return (
        `workspace ${name} is locked by Run ${err.found.runId ?? ""}, which is in progress: ` +
        `cancel it (drover run cancel ${err.found.runId ?? ""}) or wait for it to end, then delete again`
      );
    case "locked":
      return (
        `workspace ${name} is locked: ${w.lock ? describeHolder(w.lock) : "a lock is held"}; ` +
        "unlock it (terraform force-unlock), or delete it with terraform workspace delete -force"
      );
    case "manages_resources": {
      // Not the name: go-tfe would read a name holding "locked" as a lock.
      const what =
        err.found.instances == null
          ? "the workspace's current state cannot be read (encrypted, or over 64 MB), so it may still be managing resources"
          : `the workspace is still managing ${err.found.instances} resource instance(s) in its current state`;
      return `${what}: destroy them first (terraform destroy), or delete it anyway, forgetting them, with terraform workspace delete -force`;
    }
  }
}

export function registerWorkspaceDeleteRoutes(serve: TfeRegistrar, http: HttpContext): void {
  const ctx = http.store;

  const remove = async (w: TfeWorkspace, safe: boolean): Promise<TfeAnswer> => {
    try {
      await deleteWorkspace(ctx, w.ws.id, { safe });
    } catch (err) {
      if (err instanceof WorkspaceDeleteRefused) {
        // The lock may have been taken since `w` was read: name its holder as it is now.
        const now = err.reason === "locked" ? await tfeWorkspace(ctx, w.ws.id) : w;
        throw new JsonApiError(409, "conflict", refusalDetail(now, err));
      }
      throw err;
    }
    return noContent;
  };
  const named = (org: string | undefined, name: string | undefined) => namedWorkspace(http, org, name);

  serve(workspaceDeleteRoutes.deleteWorkspaceByName, async ({ params }) =>
    remove(await named(params.org, params.name), false),
  );
  serve(workspaceDeleteRoutes.deleteWorkspace, async ({ params }) =>
    remove(await tfeWorkspace(ctx, params.id ?? ""), false),
  );
  serve(workspaceDeleteRoutes.safeDeleteWorkspaceByName, async ({ params }) =>
    remove(await named(params.org, params.name), true),
  );
  serve(workspaceDeleteRoutes.safeDeleteWorkspace, async ({ params }) =>
    remove(await tfeWorkspace(ctx, params.id ?? ""), true),
  );
}
