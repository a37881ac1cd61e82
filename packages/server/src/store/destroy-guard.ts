import type { Selectable } from "kysely";
import type { GuardOutcome, RunsTable } from "../db/schema.js";
import type { Queryable } from "./context.js";
import { appendAtEnd } from "./logs.js";

/*
 * The destroy-all guard (migration 0061, decisions 0063 and 0073): an auto-applied plan that
 * would leave the workspace managing nothing is not applied without an explicit allow. What the
 * held run becomes depends on who started it: a client that can confirm later (`drover run start`,
 * the web UI, a linked repository) finds it `planned`; terraform's `cloud` block with
 * `-auto-approve` never confirms and would wait for ever, so its run ends `errored`, which makes
 * terraform exit non-zero.
 */

export type { GuardOutcome };

type GuardedRun = Pick<
  RunsTable,
  "auto_apply" | "destroys_all" | "is_destroy" | "allow_destroy_all" | "plan_add" | "plan_destroy"
>;

/**
 * Whether the plan may destroy everything while no plan JSON says otherwise: without it (over
 * DROVER_MAX_PLAN_JSON_MB, or not uploaded) the guard fails closed on a plan that only destroys.
 */
function mayDestroyAllUnseen(run: GuardedRun): boolean {
  return run.destroys_all === null && (run.plan_destroy ?? 0) > 0 && (run.plan_add ?? 0) === 0;
}

/** Whether the guard holds this run's finished plan instead of applying it on its own. */
export function heldByDestroyGuard(run: GuardedRun): boolean {
  // A -destroy run says what it does: only a plan that destroys everything by surprise is held.
  if (run.auto_apply !== 1 || run.is_destroy !== 0 || run.allow_destroy_all !== 0) return false;
  return run.destroys_all === 1 || mayDestroyAllUnseen(run);
}

/** The error of a run the guard ended: what happened and the two ways on. */
export function destroyGuardError(ws: string): string {
  return (
    "this plan destroys every resource the workspace manages, so Drover's destroy-all guard did not apply it " +
    "automatically and ended the run; nothing was destroyed. To go on, run terraform apply without " +
    `-auto-approve and answer yes, or allow it for the workspace: drover workspace update ${ws} --allow-destroy-all true`
  );
}

/**
 * Holds a run whose plan job `jobId` just finished: tells why at the end of the plan log (where
 * terraform, the web UI and `drover run logs` show it) and returns the run's error when it is to
 * end errored, null when it waits as planned.
 */
export async function holdForDestroyGuard(
  db: Queryable,
  run: Pick<Selectable<RunsTable>, "workspace_id" | "guard_outcome"> & GuardedRun,
  jobId: string,
): Promise<string | null> {
  const ws = await db.selectFrom("workspaces").select("name").where("id", "=", run.workspace_id).executeTakeFirst();
  const name = ws?.name ?? run.workspace_id;
  const error = run.guard_outcome === "fail" ? destroyGuardError(name) : null;
  const unseen = mayDestroyAllUnseen(run)
    ? "[drover] this plan only destroys, and its plan JSON was not stored (DROVER_MAX_PLAN_JSON_MB), so Drover " +
      "cannot tell whether it leaves anything: the destroy-all guard treats it as destroying everything\n"
    : "";
  const notice =
    error ??
    "this plan destroys every resource the workspace manages, so it is not applied automatically: " +
      "confirm it (drover run confirm), or start the run with --allow-destroy-all " +
      "(a workspace allows it for all its runs with: drover workspace update <ws> --allow-destroy-all true)";
  await appendAtEnd(db, jobId, Buffer.from(`\n${unseen}[drover] ${notice}\n`, "utf8"));
  return error;
}
