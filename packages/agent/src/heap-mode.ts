import { setFlagsFromString } from "node:v8";

/*
 * Heap settings of an idle agent (decision 0031; SPEC §8: an idle agent ≤ 55 MB). Loading the
 * agent's modules allocates enough long-lived objects that V8 doubles its new space twice
 * (1 → 4 MB semi-spaces, ~7 MB of touched pages) and optimizes the hottest start-up functions
 * with TurboFan, which pages ~3.5 MB of the compiler's own code in. Neither is undone until
 * V8's memory reducer runs, if it runs, and an idle agent needs neither: it makes one request
 * every few seconds. So `drover agent run` starts in idle mode (before it loads anything) and
 * the agent leaves it for good when its first job arrives: from then on the heap grows and
 * code is optimized exactly as without this module. Both flags are read by V8 when it decides
 * (at the next new-space growth, at the next tier-up), which is what makes them settable here;
 * flags V8 reads once at start-up are not (`--single-threaded` set this way crashes the GC).
 *
 * Third, undici parses HTTP with llhttp compiled to WebAssembly, and V8 tiers hot WebAssembly
 * functions up with TurboFan on a worker thread, whose allocator arena then keeps ~10 MB (seen
 * in one idle agent of two). `--liftoff-only` keeps llhttp on the baseline WebAssembly compiler;
 * it is set once and kept, since undici compiles llhttp once per process, and the agent's
 * answers are small (its uploads are requests; what llhttp parses is a status line, headers and
 * a JSON body of a few hundred bytes).
 */

const idleFlags = ["--semi-space-growth-factor=1", "--max-opt=1", "--liftoff-only"];
/** V8's defaults of the same flags (Node.js 20). */
const busyFlags = ["--semi-space-growth-factor=2", "--max-opt=999"];

let idle = false;

/** The names (no dashes, `_` as `-`, no `no-`) of the V8 flags idle mode sets or resets. */
const heapFlagNames = new Set(["semi-space-growth-factor", "max-opt", "liftoff-only"]);

/**
 * The operator's own settings of the flags idle mode touches, from Node's command line (and
 * NODE_OPTIONS, which Node 20 refuses them in, should a later Node allow them). Leaving idle mode sets V8's defaults back, which would silently replace them,
 * so with any of them set the agent does not enter idle mode at all.
 */
export function operatorHeapFlags(
  execArgv: readonly string[] = process.execArgv,
  nodeOptions: string | undefined = process.env.NODE_OPTIONS,
): string[] {
  return [...execArgv, ...(nodeOptions ?? "").split(/\s+/)].filter((arg) => {
    const name = arg.replace(/^--?/, "").split("=")[0]!.replace(/_/g, "-").replace(/^no-/, "");
    return arg.startsWith("-") && heapFlagNames.has(name);
  });
}

/**
 * Enters idle mode: the new space keeps its initial size and nothing is optimized past the
 * baseline compiler. Not entered when the operator set one of its flags (operatorHeapFlags).
 */
export function enterIdleHeapMode(): void {
  if (idle || operatorHeapFlags().length > 0) return;
  idle = true;
  for (const flag of idleFlags) setFlagsFromString(flag);
}

/** Leaves idle mode for good (a job arrived); a no-op when idle mode was never entered. */
export function leaveIdleHeapMode(): void {
  if (!idle) return;
  idle = false;
  for (const flag of busyFlags) setFlagsFromString(flag);
}

/** Whether idle mode is on (tests, /metrics). */
export function inIdleHeapMode(): boolean {
  return idle;
}
