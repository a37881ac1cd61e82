import { DroverError, type JobVariable, type Variable, type VariableKind } from "@drover/protocol";
import type { StoreContext } from "./context.js";
import { iso } from "./context.js";
import { getWorkspace } from "./workspaces.js";

/** Sets (creates or replaces) a variable. Sensitive values are write-only from here on. */
export async function setVariable(
  ctx: StoreContext,
  workspace: string,
  key: string,
  input: { value: string; kind: VariableKind; sensitive: boolean },
): Promise<Variable> {
  const ws = await getWorkspace(ctx, workspace);
  const now = ctx.now();
  const row = {
    workspace_id: ws.id,
    kind: input.kind,
    key,
    value: input.value,
    sensitive: input.sensitive ? 1 : 0,
    updated_at: now,
  };
  await ctx.db
    .insertInto("variables")
    .values(row)
    .onConflict((oc) =>
      oc
        .columns(["workspace_id", "kind", "key"])
        .doUpdateSet({ value: input.value, sensitive: row.sensitive, updated_at: now }),
    )
    .execute();
  return {
    key,
    kind: input.kind,
    sensitive: input.sensitive,
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
  return rows.map((r) => ({ key: r.key, kind: r.kind, sensitive: r.sensitive === 1, value: r.value }));
}
