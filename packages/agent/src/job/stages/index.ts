import type { Phase } from "@drover/protocol";
import type { Stage } from "../pipeline.js";
import { caches, engine, extract, fetch } from "./prepare.js";
import { apply, hook, init, outputs, plan, uploads } from "./terraform.js";

/**
 * The stages of a job of `phase`, in order. A stage whose `when` is false is passed over: the
 * hooks without a file, and extract and init when this agent kept the plan's directory.
 */
export function stagesOf(phase: Phase): readonly Stage[] {
  const prepare = [fetch, engine, extract, caches, hook("pre-init", init), init];
  return phase === "plan"
    ? [...prepare, hook("pre-plan"), plan, hook("post-plan"), uploads]
    : [...prepare, hook("pre-apply"), apply, hook("post-apply"), outputs, uploads];
}
