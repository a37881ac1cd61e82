import { DroverError, hasControlChars, terraformVariableNamePattern, type JobVariable } from "@drover/protocol";
import type { StoreContext } from "./context.js";
import { variablesForJob } from "./variables.js";

/*
 * Variables sent with one run by terraform's CLI (`-var`, `-var-file`, `TF_VAR_*` through the
 * TFE API): HCL expressions, as terraform writes them. They reach the agent as HCL variables,
 * each written as the one line of a tfvars file of its own (decision 0063), and win over the
 * workspace's variable of the same name, as they do in terraform itself.
 */

export interface RunVariable {
  key: string;
  value: string;
}

/**
 * terraform formats a map or an object value on several lines (`{\n  a = "b"\n}`), never with
 * a raw line break inside a string (those are escaped): joining its lines, with a comma between
 * two elements, gives the same value on one line.
 */
export function oneLine(value: string): string {
  const lines = value
    .split(/\r?\n/)
    .map((l) => l.trim())
    .filter((l) => l !== "");
  let out = lines[0] ?? "";
  for (const line of lines.slice(1)) {
    const opens = /[[{(]$/.test(out);
    const closes = /^[\]})]/.test(line);
    const continues = /[,=:]$/.test(out);
    out += opens || closes || continues ? ` ${line}` : `, ${line}`;
  }
  return out;
}

/** The column's value for a run's variables (null: none), each checked and on one line. */
export function storedRunVariables(variables: readonly RunVariable[]): string | null {
  if (variables.length === 0) return null;
  const seen = new Set<string>();
  const stored = variables.map(({ key, value }) => {
    if (!terraformVariableNamePattern.test(key))
      throw new DroverError("bad_request", `the run variable ${JSON.stringify(key)} is not a valid name`);
    if (seen.has(key)) throw new DroverError("bad_request", `the run variable ${key} is given twice`);
    seen.add(key);
    const line = oneLine(value);
    if (line === "") throw new DroverError("bad_request", `the run variable ${key} has no value`);
    if (hasControlChars(line.replace(/\t/g, "")))
      throw new DroverError("bad_request", `the run variable ${key} holds a control character`);
    return { key, value: line };
  });
  return JSON.stringify(stored);
}

export function runVariablesOf(stored: string | null): RunVariable[] {
  return stored === null ? [] : (JSON.parse(stored) as RunVariable[]);
}

/**
 * The variables a job of `runId` gets: the workspace's, with the run's own in place of the
 * terraform variables they name. A replaced sensitive one keeps its sensitivity, so its new
 * value is masked in the log as the old one was.
 */
export async function variablesForRunJob(
  ctx: StoreContext,
  workspaceId: string,
  runId: string,
): Promise<JobVariable[]> {
  const [workspace, run] = await Promise.all([
    variablesForJob(ctx, workspaceId),
    ctx.db.selectFrom("runs").select("run_variables").where("id", "=", runId).executeTakeFirst(),
  ]);
  const own = runVariablesOf(run?.run_variables ?? null);
  if (own.length === 0) return workspace;
  const byKey = new Map(own.map((v) => [v.key, v]));
  const replaced = workspace.filter((v) => v.kind === "terraform" && byKey.has(v.key));
  const sensitive = new Set(replaced.filter((v) => v.sensitive).map((v) => v.key));
  return [
    ...workspace.filter((v) => !(v.kind === "terraform" && byKey.has(v.key))),
    ...own.map((v) => ({
      key: v.key,
      kind: "terraform" as const,
      sensitive: sensitive.has(v.key),
      hcl: true,
      value: v.value,
    })),
  ];
}
