import {
  DroverError,
  envVariableNamePattern,
  hasControlChars,
  type JobVariable,
  type Variable,
  type VariableKind,
} from "@drover/protocol";
import type { StoreContext } from "./context.js";
import { iso } from "./context.js";
import { getWorkspace } from "./workspaces.js";

/**
 * An HCL value must be one expression on one line: the agent writes it as the only line of its own
 * tfvars file, and HCL ends an assignment at a line break, so a value that could hold one (or a
 * heredoc, which needs one) might assign other variables.
 */
function checkHcl(key: string, input: { value: string; kind: VariableKind }): void {
  if (input.kind !== "terraform")
    throw new DroverError(
      "bad_request",
      `${key}: an environment variable is always a string; HCL values are for terraform variables only`,
    );
  if (input.value.trim() === "") throw new DroverError("bad_request", `${key}: an HCL value cannot be empty`);
  // Tabs are HCL whitespace; every other control character (line breaks above all) is refused.
  if (hasControlChars(input.value.replace(/\t/g, "")))
    throw new DroverError(
      "bad_request",
      `${key}: an HCL value is one expression on one line, without line breaks, heredocs or control characters; ` +
        'write a map or an object on one line: {a = "b", c = "d"}',
    );
}

/** Sets (creates or replaces) a variable. Sensitive values are write-only from here on. */
export async function setVariable(
  ctx: StoreContext,
  workspace: string,
  key: string,
  input: { value: string; kind: VariableKind; sensitive: boolean; hcl?: boolean | undefined },
): Promise<Variable> {
  const hcl = input.hcl === true;
  if (input.kind === "env" && !envVariableNamePattern.test(key))
    throw new DroverError(
      "bad_request",
      `${JSON.stringify(key)} is not an environment variable name: letters, digits and '_' only`,
    );
  if (input.kind === "env" && input.value.includes("\0"))
    throw new DroverError(
      "bad_request",
      `the environment variable ${key} holds a NUL character, which no process's environment can carry`,
    );
  if (hcl) checkHcl(key, input);
  const ws = await getWorkspace(ctx, workspace);
  const now = ctx.now();
  const row = {
    workspace_id: ws.id,
    kind: input.kind,
    key,
    value: input.value,
    sensitive: input.sensitive ? 1 : 0,
    hcl: hcl ? 1 : 0,
    updated_at: now,
  };
  await ctx.db
    .insertInto("variables")
    .values(row)
    .onConflict((oc) =>
      oc
        .columns(["workspace_id", "kind", "key"])
        .doUpdateSet({ value: input.value, sensitive: row.sensitive, hcl: row.hcl, updated_at: now }),
    )
    .execute();
  return {
    key,
    kind: input.kind,
    sensitive: input.sensitive,
    hcl,
    value: input.sensitive ? null : input.value,
    updatedAt: iso(now),
  };
}

/** Variables as users see them: sensitive values are null. */
export async function listVariables(ctx: StoreContext, workspace: string): Promise<Variable[]> {
  const ws = await getWorkspace(ctx, workspace);
  const rows = await ctx.db
    .selectFrom("variables")
    .selectAll()
    .where("workspace_id", "=", ws.id)
    .orderBy("kind")
    .orderBy("key")
    .execute();
  return rows.map((r) => ({
    key: r.key,
    kind: r.kind,
    sensitive: r.sensitive === 1,
    hcl: r.hcl === 1,
    value: r.sensitive === 1 ? null : r.value,
    updatedAt: iso(r.updated_at),
  }));
}

export async function deleteVariable(
  ctx: StoreContext,
  workspace: string,
  kind: VariableKind,
  key: string,
): Promise<void> {
  const ws = await getWorkspace(ctx, workspace);
  const res = await ctx.db
    .deleteFrom("variables")
    .where("workspace_id", "=", ws.id)
    .where("kind", "=", kind)
    .where("key", "=", key)
    .executeTakeFirst();
  if (Number(res.numDeletedRows) === 0)
    throw new DroverError("not_found", `workspace ${ws.name} has no ${kind} variable ${key}`);
}

/** Variables with their values, for the job that runs in this workspace only. */
export async function variablesForJob(ctx: StoreContext, workspaceId: string): Promise<JobVariable[]> {
  const rows = await ctx.db
    .selectFrom("variables")
    .selectAll()
    .where("workspace_id", "=", workspaceId)
    .orderBy("kind")
    .orderBy("key")
    .execute();
  return rows.map((r) => ({
    key: r.key,
    kind: r.kind,
    sensitive: r.sensitive === 1,
    hcl: r.hcl === 1,
    value: r.value,
  }));
}
