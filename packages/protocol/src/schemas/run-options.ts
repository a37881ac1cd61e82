import { z } from "zod";
import { hasControlChars } from "../text.js";

/*
 * What narrows a run's plan: resources to target or replace, and refresh-only. The addresses
 * become terraform arguments (`-target=<address>`), so each must be an address and nothing else:
 * one that starts with '-' or holds a newline must never reach terraform as a flag or a second line.
 */

/** Most addresses a run may target or replace (each list). */
export const maxRunAddresses = 100;
/** Longest address accepted. */
export const maxAddressLength = 500;

const identifier = String.raw`[A-Za-z_][A-Za-z0-9_-]*`;
// An instance key: a number or a quoted string (printable, with backslash escapes).
const instanceKey = String.raw`\[(?:[0-9]+|"(?:[^"\\\u0000-\u001f\u007f]|\\[^\u0000-\u001f\u007f])*")\]`;
const segment = `${identifier}(?:${instanceKey})?`;
const addressShape = new RegExp(`^${segment}(?:\\.${segment})+$`);

/** A resource or module address (`aws_instance.web`, `module.net["a"].aws_subnet.s[0]`). */
export const resourceAddressSchema = z
  .string()
  .min(1)
  .max(maxAddressLength)
  .refine((a) => !a.startsWith("-"), "an address must not start with '-' (it would be read as a flag)")
  .refine((a) => !hasControlChars(a), "an address must not contain control characters (newlines, escapes)")
  .refine(
    (a) => addressShape.test(a),
    "not a resource address: expected TYPE.NAME, MODULE.NAME or module.M.TYPE.NAME, with optional [index]",
  );

export const addressListSchema = z.array(resourceAddressSchema).max(maxRunAddresses);

/** The plan options of a run, as stored and as sent to the agent. */
export const runPlanOptionsSchema = z.object({
  /** `-target=`: plan only these resources (and what they depend on). */
  targets: addressListSchema.default([]),
  /** `-replace=`: plan to destroy and recreate these resources. */
  replaces: addressListSchema.default([]),
  /** `-refresh-only`: update the state to match the real resources, change nothing else. */
  refreshOnly: z.boolean().default(false),
  /** false: `-refresh=false`, plan from the state as stored, without reading the real resources first. */
  refresh: z.boolean().default(true),
});
export type RunPlanOptions = z.infer<typeof runPlanOptionsSchema>;
