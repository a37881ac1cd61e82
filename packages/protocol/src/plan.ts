import type { PlanSummary } from "./schemas.js";

interface ResourceChange {
  address?: unknown;
  previous_address?: unknown;
  change?: { actions?: unknown; importing?: unknown };
}

/**
 * What makes a document unreadable as `terraform show -json` output, or undefined: its
 * resource changes must be a list of objects and its output changes an object of objects,
 * which every reader of a plan (the summary, the guard, the web UI) walks.
 */
export function planShapeProblem(planJson: object): string | undefined {
  const { resource_changes: changes, output_changes: outputs } = planJson as {
    resource_changes?: unknown;
    output_changes?: unknown;
  };
  const isObject = (v: unknown) => typeof v === "object" && v !== null && !Array.isArray(v);
  if (changes !== undefined) {
    if (!Array.isArray(changes)) return "resource_changes is not a list";
    const at = changes.findIndex((c) => !isObject(c));
    if (at >= 0) return `resource_changes[${at}] is not an object`;
  }
  if (outputs !== undefined) {
    if (!isObject(outputs)) return "output_changes is not an object";
    const name = Object.keys(outputs as object).find((k) => !isObject((outputs as Record<string, unknown>)[k]));
    if (name !== undefined) return `output_changes[${JSON.stringify(name)}] is not an object`;
  }
  return undefined;
}

/**
 * Whether applying the plan leaves the workspace managing nothing: it deletes resources and
 * every managed resource it knows of is deleted, none kept, changed or created. Such a plan
 * comes from an emptied or wrong configuration as often as from intent.
 */
export function destroysEverything(planJson: unknown): boolean {
  const changes = (planJson as { resource_changes?: unknown } | null)?.resource_changes;
  if (!Array.isArray(changes)) return false;
  const managed = (changes as (ResourceChange & { mode?: unknown })[]).filter((rc) => rc.mode !== "data");
  return (
    managed.length > 0 &&
    managed.every((rc) => {
      const actions = Array.isArray(rc.change?.actions) ? (rc.change.actions as unknown[]) : [];
      return actions.length === 1 && actions[0] === "delete";
    })
  );
}

/**
 * Counts adds, changes and destroys in `terraform show -json <planfile>` output, the way
 * terraform's own summary line does (a replace counts as one add and one destroy), and says
 * whether applying the plan would change anything.
 */
export function summarizePlan(planJson: unknown): PlanSummary {
  let add = 0;
  let change = 0;
  let destroy = 0;
  // Moves, imports and forgets change the state without an add, change or destroy: a plan of only
  // those must still be applied.
  let stateOnly = false;
  const plan = planJson as {
    resource_changes?: unknown;
    output_changes?: Record<string, { actions?: unknown }>;
    applyable?: unknown;
  } | null;
  const changes = plan?.resource_changes;
  if (Array.isArray(changes)) {
    for (const rc of changes as ResourceChange[]) {
      const actions = Array.isArray(rc.change?.actions) ? (rc.change.actions as unknown[]) : [];
      if (actions.includes("create")) add++;
      if (actions.includes("delete")) destroy++;
      if (actions.includes("update")) change++;
      if (
        actions.includes("forget") ||
        rc.change?.importing != null ||
        (typeof rc.previous_address === "string" && rc.previous_address !== rc.address)
      )
        stateOnly = true;
    }
  }
  const outputChanges = plan?.output_changes ?? {};
  // Output changes alone in a plan terraform calls not applyable (a refresh-only plan that only
  // drops an output) cannot be applied: terraform refuses it.
  const outputsChange =
    plan?.applyable !== false &&
    Object.values(outputChanges).some(
      (c) => Array.isArray(c.actions) && !(c.actions.length === 1 && c.actions[0] === "no-op"),
    );
  // Newer terraform says itself whether the plan is worth applying; it is trusted only to add to what
  // the changes show, because a needless apply costs little and a skipped one loses the changes.
  const hasChanges = plan?.applyable === true || add + change + destroy > 0 || outputsChange || stateOnly;
  return { add, change, destroy, hasChanges };
}
