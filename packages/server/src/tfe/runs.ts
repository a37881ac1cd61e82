import { DroverError, isTerminalRun, type Run } from "@drover/protocol";
import { z } from "zod";
import type { HttpContext } from "../http/context.js";
import { cancelRun } from "../store/cancels.js";
import { createRun } from "../store/run-create.js";
import { confirmRun, discardRun, getRun, listRuns } from "../store/runs.js";
import { getWorkspace } from "../store/workspaces.js";
import { findConfigurationVersion } from "./configuration-versions.js";
import { workspaceResource } from "./workspace-routes.js";
import { engineOfClient, tfeWorkspace } from "./workspace-store.js";
import {
  attribute,
  includes,
  isoTime,
  JsonApiError,
  many,
  one,
  pageRequest,
  requestResource,
  type ResourceObject,
} from "./jsonapi.js";
import { phaseId, phaseResource, tfeRunStatus } from "./plans-applies.js";
import { created, ok, tfeApi, tfeRoute, type TfeAnswer, type TfeRegistrar } from "./serve.js";

/*
 * Runs as terraform's `cloud` block starts and follows them: Drover runs, created and moved by
 * the same store functions as `drover run start` and the web UI, shown with TFE's statuses.
 */

export const runRoutes = {
  createRun: tfeRoute({
    method: "POST",
    path: `${tfeApi}/runs`,
    summary: "Create a run of an uploaded configuration version (variables, destroy, refresh-only, targets, replaces)",
    auth: "user",
  }),
  getRun: tfeRoute({
    method: "GET",
    path: `${tfeApi}/runs/:id`,
    summary: "Show a run (?include=plan,apply,workspace; other includes are ignored)",
    auth: "user",
  }),
  runEvents: tfeRoute({
    method: "GET",
    path: `${tfeApi}/runs/:id/run-events`,
    summary: "A run's events (none: terraform requires the list)",
    auth: "user",
  }),
  listWorkspaceRuns: tfeRoute({
    method: "GET",
    path: `${tfeApi}/workspaces/:id/runs`,
    summary: "A workspace's runs, newest first",
    auth: "user",
  }),
  applyRun: tfeRoute({ method: "POST", path: `${tfeApi}/runs/:id/actions/apply`, summary: "Apply", auth: "user" }),
  discardRun: tfeRoute({
    method: "POST",
    path: `${tfeApi}/runs/:id/actions/discard`,
    summary: "Discard a planned run",
    auth: "user",
  }),
  cancelRun: tfeRoute({
    method: "POST",
    path: `${tfeApi}/runs/:id/actions/cancel`,
    summary: "Cancel: the agent interrupts terraform",
    auth: "user",
  }),
  forceCancelRun: tfeRoute({
    method: "POST",
    path: `${tfeApi}/runs/:id/actions/force-cancel`,
    summary: "Force-cancel: the job ends on the server, its lock is released",
    auth: "user",
  }),
};

const cancelable = new Set(["pending", "queued", "planning", "confirmed", "applying"]);

/** The run as TFE shows it; `actions` and the plan and apply relationships are never left out (terraform dereferences them). */
export function runResource(run: Run, extra: { variables?: { key: string; value: string }[] } = {}): ResourceObject {
  const planned = run.status === "planned";
  const live = !isTerminalRun(run.status);
  return {
    id: run.id,
    type: "runs",
    attributes: {
      status: tfeRunStatus(run.status),
      message: run.message,
      source: "terraform+cloud",
      "is-destroy": run.isDestroy,
      "refresh-only": run.refreshOnly,
      refresh: run.refresh,
      "target-addrs": run.targets,
      "replace-addrs": run.replaces,
      "auto-apply": run.autoApply,
      "plan-only": run.planOnly,
      "save-plan": run.savedPlan,
      "has-changes": run.planSummary?.hasChanges ?? false,
      "created-at": isoTime(Date.parse(run.createdAt)),
      "status-timestamps": {},
      ...(extra.variables ? { variables: extra.variables } : {}),
      actions: {
        "is-cancelable": cancelable.has(run.status),
        "is-confirmable": planned,
        "is-discardable": planned,
        "is-force-cancelable": live && run.cancelRequested,
      },
      permissions: {
        "can-apply": true,
        "can-cancel": true,
        "can-discard": true,
        "can-force-cancel": true,
        "can-force-execute": false,
      },
    },
    relationships: {
      workspace: { data: { type: "workspaces", id: run.workspaceId } },
      "configuration-version": { data: { type: "configuration-versions", id: run.configurationVersionId } },
      plan: { data: { type: "plans", id: phaseId("plan", run.id) } },
      apply: { data: { type: "applies", id: phaseId("apply", run.id) } },
      "policy-checks": { data: [] },
      "task-stages": { data: [] },
    },
    links: { self: `${tfeApi}/runs/${run.id}` },
  };
}

const addresses = z.array(z.string().min(1).max(1024)).max(1000);
const variablesSchema = z.array(z.object({ key: z.string(), value: z.string() })).max(1000);

function relatedId(relationships: Record<string, unknown>, name: string): string | undefined {
  const parsed = z.object({ data: z.object({ id: z.string() }) }).safeParse(relationships[name]);
  return parsed.success ? parsed.data.data.id : undefined;
}

/** Related resources a run read asks for; names it does not know are ignored (terraform asks for task_stages). */
async function included(http: HttpContext, run: Run, query: Record<string, unknown>): Promise<ResourceObject[]> {
  const asked = includes(query);
  const out: ResourceObject[] = [];
  if (asked.has("plan")) out.push(await phaseResource(http, "plan", run));
  if (asked.has("apply")) out.push(await phaseResource(http, "apply", run));
  if (asked.has("workspace"))
    out.push(workspaceResource(await tfeWorkspace(http.store, run.workspaceId), http.tfe.organization));
  return out;
}

const accepted: TfeAnswer = { status: 202 };

export function registerRunRoutes(serve: TfeRegistrar, http: HttpContext): void {
  const ctx = http.store;
  const r = runRoutes;

  serve(r.createRun, async ({ body, caller, req }) => {
    const doc = requestResource(body);
    const wsId = relatedId(doc.relationships, "workspace");
    if (wsId === undefined)
      throw new JsonApiError(422, "invalid relationship", "a run needs its workspace relationship");
    const ws = await getWorkspace(ctx, wsId);
    const cvId = relatedId(doc.relationships, "configuration-version");
    if (cvId === undefined)
      throw new JsonApiError(422, "invalid relationship", "a run needs its configuration-version relationship");
    const cv = await findConfigurationVersion(http, cvId);
    if (cv.workspaceId !== ws.id)
      throw new JsonApiError(
        422,
        "invalid relationship",
        `configuration version ${cv.id} belongs to another workspace`,
      );
    if (cv.status !== "uploaded")
      throw new JsonApiError(
        422,
        "invalid relationship",
        `configuration version ${cv.id} is ${cv.status}, not uploaded`,
      );
    // `plan -out`: a run that plans and then waits, like one awaiting its confirmation, until
    // `terraform apply <file>` applies it (or someone discards it); it holds its workspace meanwhile.
    const savePlan = attribute(doc, "save-plan", z.boolean()) === true;
    const variables = attribute(doc, "variables", variablesSchema) ?? [];
    const run = await createRun(ctx, {
      workspace: ws.id,
      configurationVersionId: cv.id,
      planOnly: cv.speculative || attribute(doc, "plan-only", z.boolean()) === true,
      isDestroy: attribute(doc, "is-destroy", z.boolean()) ?? false,
      autoApply: savePlan ? false : attribute(doc, "auto-apply", z.boolean()),
      // -auto-approve never posts an apply: a held run that waited would keep terraform waiting for ever.
      whenGuarded: "fail",
      message: attribute(doc, "message", z.string().max(4000)) ?? "Queued by terraform",
      createdByTokenId: caller.tokenId,
      targets: attribute(doc, "target-addrs", addresses) ?? [],
      replaces: attribute(doc, "replace-addrs", addresses) ?? [],
      refreshOnly: attribute(doc, "refresh-only", z.boolean()) ?? false,
      refresh: attribute(doc, "refresh", z.boolean()) ?? true,
      engine: engineOfClient(req.headers["user-agent"]),
      variables,
      savePlan,
    });
    return created(one(runResource(run, { variables })));
  });

  serve(r.getRun, async ({ params, query }) => {
    const run = await getRun(ctx, params.id ?? "");
    return ok(one(runResource(run), await included(http, run, query)));
  });

  serve(r.runEvents, async ({ params }) => {
    await getRun(ctx, params.id ?? "");
    const pagination = { "current-page": 1, "next-page": null, "prev-page": null, "total-pages": 1, "total-count": 0 };
    return ok(many([], pagination));
  });

  serve(r.listWorkspaceRuns, async ({ params, query }) => {
    const ws = await getWorkspace(ctx, params.id ?? "");
    const page = pageRequest(query);
    // Newest first: terraform looks for its own run and counts the unfinished ones before it.
    const { items, next } = await listRuns(ctx, { workspace: ws.id, limit: page.number * page.size });
    const pageItems = items.slice((page.number - 1) * page.size);
    const more = next !== null;
    const pagination = {
      "current-page": page.number,
      "next-page": more ? page.number + 1 : null,
      "prev-page": page.number > 1 ? page.number - 1 : null,
      "total-pages": more ? page.number + 1 : page.number,
      "total-count": (page.number - 1) * page.size + pageItems.length + (more ? 1 : 0),
    };
    return ok(
      many(
        pageItems.map((run) => runResource(run)),
        pagination,
      ),
    );
  });

  // terraform sends `{}` or `{"comment": …}` as plain JSON to these: the body is not read.
  serve(r.applyRun, async ({ params }) => {
    await confirmRun(ctx, params.id ?? "");
    return accepted;
  });
  serve(r.discardRun, async ({ params }) => {
    await discardRun(ctx, params.id ?? "");
    return accepted;
  });
  serve(r.cancelRun, async ({ params }) => {
    await cancelRun(ctx, params.id ?? "");
    return accepted;
  });
  serve(r.forceCancelRun, async ({ params }) => {
    const run = await getRun(ctx, params.id ?? "");
    if (!run.cancelRequested && !isTerminalRun(run.status))
      throw new DroverError("conflict", `run ${run.id} was not canceled first: cancel it, then force-cancel it`);
    await cancelRun(ctx, run.id, { force: true });
    return accepted;
  });
}
