import { DroverError, runPlanOptionsSchema, type RunPlanOptions } from "@drover/protocol";

/*
 * A run's plan options (targets, replacements, refresh-only, no refresh) live in one JSON column: null for a
 * full plan, which every run before them was.
 */

/** The options a stored column holds; null is a full plan. */
export function planOptionsOf(stored: string | null): RunPlanOptions {
  return runPlanOptionsSchema.parse(stored === null ? {} : JSON.parse(stored));
}

/** The column's value for `options`: null when they ask for a full plan. */
export function storedPlanOptions(options: Partial<RunPlanOptions>): string | null {
  const o = runPlanOptionsSchema.parse(options);
  return o.targets.length === 0 && o.replaces.length === 0 && !o.refreshOnly && o.refresh ? null : JSON.stringify(o);
}

/** Refuses option combinations terraform would refuse only once an agent runs the plan. */
export function checkPlanOptions(options: Partial<RunPlanOptions> & { isDestroy: boolean; planOnly?: boolean }): void {
  if (options.refreshOnly && options.isDestroy)
    throw new DroverError(
      "bad_request",
      "a run is refresh-only or a destroy, not both: refresh-only changes only the state, a destroy removes resources",
    );
  if (options.refreshOnly && options.refresh === false)
    throw new DroverError(
      "bad_request",
      "a refresh-only run is nothing but a refresh: it cannot also skip the refresh (drop one of the two)",
    );
  if (options.refreshOnly && (options.replaces?.length ?? 0) > 0)
    throw new DroverError(
      "bad_request",
      "refresh-only runs replace nothing: drop --replace, or --refresh-only to replace",
    );
}
