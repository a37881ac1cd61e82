import type { Output } from "@drover/protocol";
import { containsSecret, secretForms, sensitiveValues } from "@drover/runtime";
import type { StoreContext } from "./context.js";
import { readStateVersion } from "./state.js";
import { variablesForJob } from "./variables.js";

/*
 * A workspace's outputs are those of its current state, whoever wrote it: an apply, terraform's
 * http backend, the cloud block, `terraform state push`. The user API and the TFE API read them
 * alike. A state the server cannot read (OpenTofu's encrypted state), or none, falls back to the
 * outputs the latest apply recorded.
 */

/** Largest state whose outputs are read (a state is parsed whole for them). */
const maxOutputsStateBytes = 64 * 1024 * 1024;

/** A stored state version, as far as its outputs need. */
export interface OutputsSource {
  id: string;
  workspace_id: string;
  size: number;
}

/**
 * An output whose value holds a sensitive variable's value is sensitive too, whatever the code
 * declares: its value is then never shown without asking.
 */
export async function markSecretOutputs(ctx: StoreContext, workspaceId: string, outputs: Output[]): Promise<Output[]> {
  if (outputs.every((o) => o.sensitive)) return outputs;
  const secrets = secretForms(
    (await variablesForJob(ctx, workspaceId)).filter((v) => v.sensitive).flatMap(sensitiveValues),
  );
  return outputs.map((o) => (!o.sensitive && containsSecret(o.value, secrets) ? { ...o, sensitive: true } : o));
}

/** The outputs a state version holds, or null when it is not JSON the server reads (encrypted, or too large). */
export async function stateVersionOutputs(ctx: StoreContext, version: OutputsSource): Promise<Output[] | null> {
  if (version.size > maxOutputsStateBytes) return null;
  const chunks: Buffer[] = [];
  for await (const chunk of (await readStateVersion(ctx, version.id)).open()) chunks.push(chunk as Buffer);
  let state: unknown;
  try {
    state = JSON.parse(Buffer.concat(chunks).toString("utf8"));
  } catch {
    return null;
  }
  const outputs = (state as { outputs?: unknown }).outputs;
  if (typeof outputs !== "object" || outputs === null) return null;
  const read = Object.entries(outputs as Record<string, unknown>).map(([name, entry]) => {
    // The state is stored as terraform wrote it, unchecked below its top level: an entry that
    // is not an output object reads as an output without a value.
    const o = (typeof entry === "object" && entry !== null ? entry : {}) as {
      value?: unknown;
      type?: unknown;
      sensitive?: unknown;
    };
    return { name, value: o.value ?? null, type: o.type ?? "dynamic", sensitive: o.sensitive === true };
  });
  return markSecretOutputs(ctx, version.workspace_id, read);
}

/** Masks sensitive output values for display. */
export function maskOutputs(outputs: Output[]): Output[] {
  return outputs.map((o) => (o.sensitive ? { ...o, value: null } : o));
}

/**
 * The workspace's outputs: its current state's, or, when it has none the server can read, its
 * latest apply's. Sensitive values are masked unless the caller asked to see them (any user token
 * can download the state, which holds them).
 */
export async function workspaceOutputs(
  ctx: StoreContext,
  workspaceId: string,
  opts: { reveal?: boolean } = {},
): Promise<Output[]> {
  const current = await ctx.db
    .selectFrom("state_versions")
    .select(["id", "workspace_id", "size"])
    .where("workspace_id", "=", workspaceId)
    .where("deleted_at", "is", null)
    .orderBy("seq", "desc")
    .limit(1)
    .executeTakeFirst();
  const outputs =
    (current ? await stateVersionOutputs(ctx, current) : null) ?? (await lastAppliedOutputs(ctx, workspaceId));
  return opts.reveal === true ? outputs : maskOutputs(outputs);
}

async function lastAppliedOutputs(ctx: StoreContext, workspaceId: string): Promise<Output[]> {
  const row = await ctx.db
    .selectFrom("runs")
    .select("outputs_json")
    .where("workspace_id", "=", workspaceId)
    .where("outputs_json", "is not", null)
    .orderBy("updated_at", "desc")
    .limit(1)
    .executeTakeFirst();
  return row?.outputs_json ? (JSON.parse(row.outputs_json) as Output[]) : [];
}
