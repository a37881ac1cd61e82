import type { PlanSummary } from "./schemas.js";

interface ResourceChange {
  change?: { actions?: unknown };
}

/**
 * Counts adds, changes and destroys in `terraform show -json <planfile>` output, the way
 * terraform's own summary line does (a replace counts as one add and one destroy).
 */
export function summarizePlan(planJson: unknown): PlanSummary {
  let add = 0;
  let change = 0;
  let destroy = 0;
  const changes = (planJson as { resource_changes?: unknown } | null)?.resource_changes;
  if (Array.isArray(changes)) {
    for (const rc of changes as ResourceChange[]) {
      const actions = Array.isArray(rc.change?.actions) ? (rc.change.actions as unknown[]) : [];
      if (actions.includes("create")) add++;
      if (actions.includes("delete")) destroy++;
      if (actions.includes("update")) change++;
    }
  }
  const outputChanges = (planJson as { output_changes?: Record<string, { actions?: unknown }> } | null)?.output_changes ?? {};
  const outputsChange = Object.values(outputChanges).some((c) => Array.isArray(c.actions) && !(c.actions.length === 1 && c.actions[0] === "no-op"));
  return { add, change, destroy, hasChanges: add + change + destroy > 0 || outputsChange };
}
