import type { PlanSummary } from "@drover/protocol";

/** The exit codes of `plan -detailed-exitcode` that are a successful plan: 0 no changes, 2 changes. */
export const planSucceededCodes: readonly number[] = [0, 2];

const counted = /(\d+) to (add|change|destroy)\b/g;

/**
 * The run's change summary from terraform's own verdict: the exit code of
 * `plan -detailed-exitcode` says whether applying would change anything (moves, imports,
 * forgets and output changes included), the last `Plan: …` line of its output gives the counts.
 * terraform and OpenTofu print the same line ("Plan: 1 to import, 2 to add, 0 to change,
 * 1 to destroy, 1 to forget."); a plan of only output changes prints none (all counts 0).
 */
export function summaryOfPlanOutput(exitCode: number, planLine: string | undefined): PlanSummary {
  const summary: PlanSummary = { add: 0, change: 0, destroy: 0, hasChanges: exitCode === 2 };
  if (planLine === undefined || !summary.hasChanges) return summary;
  for (const [, n, what] of planLine.matchAll(counted)) {
    if (what === "add" || what === "change" || what === "destroy") summary[what] = Number(n);
  }
  return summary;
}

/**
 * Keeps the last `Plan: ` line of a step's output as it streams by, without holding the
 * output: a plan's diff can be megabytes, its summary line is short.
 */
export class PlanLineScanner {
  private partial = "";
  /** Inside a line too long to be a summary line: ignored up to its end. */
  private skipping = false;
  /** The last complete line that starts with `Plan: `. */
  line: string | undefined;

  /** Feeds the next chunk of output. */
  push(chunk: Buffer): void {
    const lines = (this.partial + chunk.toString("utf8")).split("\n");
    const rest = lines.pop() ?? "";
    if (lines.length > 0) {
      if (this.skipping) lines.shift();
      this.skipping = false;
      for (const l of lines) if (l.startsWith("Plan: ")) this.line = l.trimEnd();
    }
    // The last piece is an unfinished line; one longer than a summary line can be is dropped.
    this.skipping ||= rest.length > 512;
    this.partial = this.skipping ? "" : rest;
  }

  /** Ends the output: an unfinished last line counts too. */
  end(): string | undefined {
    if (!this.skipping && this.partial.startsWith("Plan: ")) this.line = this.partial.trimEnd();
    this.partial = "";
    return this.line;
  }
}
