import type { Output } from "@drover/protocol";

interface StateOutput {
  value?: unknown;
  type?: unknown;
  sensitive?: boolean;
}

/**
 * The root outputs a plain (version 4) state records — what `terraform output -json` would
 * print, without starting terraform. Undefined when the state is empty or not plain JSON
 * (OpenTofu can encrypt state): the caller then asks the engine.
 */
export function outputsOfState(state: Buffer): Output[] | undefined {
  let parsed: unknown;
  try {
    parsed = JSON.parse(state.toString("utf8"));
  } catch {
    return undefined;
  }
  if (typeof parsed !== "object" || parsed === null) return undefined;
  const { version, outputs } = parsed as { version?: unknown; outputs?: unknown };
  if (version !== 4 || typeof outputs !== "object" || outputs === null || Array.isArray(outputs)) return undefined;
  const entries = Object.entries(outputs as Record<string, unknown>);
  // Not what terraform writes: the engine, which reads the state itself, says what it makes of it.
  if (entries.some(([, o]) => typeof o !== "object" || o === null)) return undefined;
  return (entries as [string, StateOutput][]).map(([name, o]) => ({
    name,
    sensitive: o.sensitive === true,
    type: o.type ?? null,
    value: o.value ?? null,
  }));
}
