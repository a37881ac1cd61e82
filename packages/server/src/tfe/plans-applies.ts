import { DroverError, isTerminalRun, type Phase, type Run, type RunStatus } from "@drover/protocol";
import type { HttpContext } from "../http/context.js";
import { readPlanJson, readRedactedPlan } from "../store/plans.js";
import { getRun } from "../store/runs.js";
import { capabilityKey, signCapability } from "./capability.js";
import { isoTime, one, type ResourceObject } from "./jsonapi.js";
import { ok, tfeApi, tfeRoute, type TfeRegistrar } from "./serve.js";

/*
 * A run's plan and apply as TFE shows them: views of Drover's one run lifecycle (its status and
 * its two jobs), never a second lifecycle. Each status here is derived from the run's row, which
 * moves in the same transaction that finishes a job: a phase reads `finished` only once the run
 * already carries what follows it (`planned`, `has-changes`, the apply queued by auto-apply),
 * which terraform relies on.
 */

export type PhaseStatus = "pending" | "queued" | "running" | "finished" | "errored" | "canceled" | "unreachable";

export const terminalPhaseStatuses: readonly PhaseStatus[] = ["finished", "errored", "canceled", "unreachable"];

const runStatusNames: Record<RunStatus, string> = {
  pending: "pending",
  queued: "plan_queued",
  planning: "planning",
  planned: "planned",
  // The apply job is queued from the moment a run is confirmed.
  confirmed: "apply_queued",
  applying: "applying",
  applied: "applied",
  planned_and_finished: "planned_and_finished",
  errored: "errored",
  canceled: "canceled",
  discarded: "discarded",
};

/** The TFE name of a Drover run status. */
export const tfeRunStatus = (status: RunStatus): string => runStatusNames[status];

export function planStatus(run: Pick<Run, "status" | "applyJobId" | "planSummary">): PhaseStatus {
  switch (run.status) {
    case "pending":
      return "pending";
    case "queued":
      return "queued";
    case "planning":
      return "running";
    case "errored":
    case "canceled":
      // Ended in its apply, or after a plan that finished (the destroy-all guard ends such a run
      // errored): the plan itself had finished.
      return run.applyJobId === null && run.planSummary === null ? run.status : "finished";
    default:
      return "finished";
  }
}

export function applyStatus(run: Pick<Run, "status" | "applyJobId">): PhaseStatus {
  if (run.applyJobId === null) return isTerminalRun(run.status) ? "unreachable" : "pending";
  switch (run.status) {
    case "confirmed":
      return "queued";
    case "applying":
      return "running";
    case "applied":
      return "finished";
    case "errored":
    case "canceled":
      return run.status;
    default:
      return "pending";
  }
}

const prefixes: Record<Phase, string> = { plan: "plan", apply: "apply" };
const kinds: Record<Phase, string> = { plan: "plans", apply: "applies" };

/** The id of a run's plan or apply: the run's id under another prefix, so either leads to the other. */
export const phaseId = (phase: Phase, runId: string): string => `${prefixes[phase]}-${runId.replace(/^run-/, "")}`;

/** The run a plan or apply id belongs to; not_found for an id of another shape. */
export function runIdOf(phase: Phase, id: string): string {
  const prefix = `${prefixes[phase]}-`;
  if (!id.startsWith(prefix) || id.length === prefix.length)
    throw new DroverError("not_found", `no ${phase} ${JSON.stringify(id)}`);
  return `run-${id.slice(prefix.length)}`;
}

export const phaseKind = (phase: Phase): string => kinds[phase];

/** The signed URL terraform reads a phase's log from, without its token. */
export async function logReadUrl(http: HttpContext, phase: Phase, runId: string): Promise<string> {
  const id = phaseId(phase, runId);
  const key = await capabilityKey(http.store);
  const segment = signCapability(key, {
    method: "GET",
    kind: kinds[phase],
    id,
    expiresAt: http.store.now() + http.capabilityUrlMs,
  });
  return `${http.publicUrl()}${tfeApi}/${kinds[phase]}/${id}/logs/${segment}`;
}

/** A run's plan or apply resource, with a fresh log URL. */
export async function phaseResource(http: HttpContext, phase: Phase, run: Run): Promise<ResourceObject> {
  const summary = run.planSummary;
  const counts = {
    "resource-additions": summary?.add ?? 0,
    "resource-changes": summary?.change ?? 0,
    "resource-destructions": summary?.destroy ?? 0,
    "resource-imports": 0,
  };
  return {
    id: phaseId(phase, run.id),
    type: kinds[phase],
    attributes: {
      status: phase === "plan" ? planStatus(run) : applyStatus(run),
      "log-read-url": await logReadUrl(http, phase, run.id),
      ...counts,
      ...(phase === "plan" ? { "has-changes": summary?.hasChanges ?? false, "generated-configuration": false } : {}),
      "status-timestamps": {},
      "created-at": isoTime(Date.parse(run.createdAt)),
    },
    relationships: {},
    links: { self: `${tfeApi}/${kinds[phase]}/${phaseId(phase, run.id)}` },
  };
}

export const phaseRoutes = {
  getPlan: tfeRoute({
    method: "GET",
    path: `${tfeApi}/plans/:id`,
    summary: "Show a run's plan: its status and a signed log URL",
    auth: "user",
  }),
  planJsonOutput: tfeRoute({
    method: "GET",
    path: `${tfeApi}/plans/:id/json-output`,
    summary:
      "A run's plan as `terraform show -json` renders it (sensitive values masked), for `show -json` of a saved plan",
    auth: "user",
  }),
  planJsonOutputRedacted: tfeRoute({
    method: "GET",
    path: `${tfeApi}/plans/:id/json-output-redacted`,
    summary:
      "A saved cloud plan with its providers' schemas (sensitive values masked), which the human `terraform show` renders",
    auth: "user",
  }),
  getApply: tfeRoute({
    method: "GET",
    path: `${tfeApi}/applies/:id`,
    summary: "Show a run's apply: its status and a signed log URL",
    auth: "user",
  }),
};

export function registerPhaseRoutes(serve: TfeRegistrar, http: HttpContext): void {
  for (const [route, phase] of [
    [phaseRoutes.getPlan, "plan"],
    [phaseRoutes.getApply, "apply"],
  ] as const) {
    serve(route, async ({ params }) => {
      const run = await getRun(http.store, runIdOf(phase, params.id ?? ""));
      return ok(one(await phaseResource(http, phase, run)));
    });
  }
  // HCP Terraform keeps an unmasked copy for its admins; Drover keeps only the one it stores,
  // with the workspace's sensitive values masked, which is what every reader gets.
  serve(phaseRoutes.planJsonOutput, async ({ params }) => {
    const run = await getRun(http.store, runIdOf("plan", params.id ?? ""));
    return { status: 200, bytes: await readPlanJson(http.store, run.id), contentType: "application/json" };
  });
  // terraform renders the plan itself from the plan JSON and the providers' schemas, which only
  // a saved plan's job uploads (`terraform providers schema -json`).
  serve(phaseRoutes.planJsonOutputRedacted, async ({ params }) => {
    const run = await getRun(http.store, runIdOf("plan", params.id ?? ""));
    return { status: 200, bytes: await readRedactedPlan(http.store, run.id), contentType: "application/json" };
  });
}
