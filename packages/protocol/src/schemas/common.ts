import { z } from "zod";
import { looksLikeId } from "../ids.js";

/** The names of pools, workspaces and agents. */
export const nameSchema = z
  .string()
  .min(1)
  .max(90)
  .regex(
    /^[A-Za-z0-9][A-Za-z0-9_.-]*$/,
    "use ASCII letters (a-z, A-Z), digits, '-', '_' and '.', starting with a letter or digit",
  )
  .refine(
    (n) => !looksLikeId(n),
    "must not look like an id (<kind>-<16 characters>): lookups by id or name would be ambiguous",
  );

// ---------- lifecycle unions ----------

/** Run states; see docs/decisions/0002-run-lifecycle.md for the transitions. */
export const runStatuses = [
  "pending",
  "queued",
  "planning",
  "planned",
  "confirmed",
  "applying",
  "applied",
  "planned_and_finished",
  "errored",
  "canceled",
  "discarded",
] as const;
export const runStatusSchema = z.enum(runStatuses);
export type RunStatus = z.infer<typeof runStatusSchema>;
// Which status may follow which, and which are terminal: lifecycle.ts.

/** Job states: queued → assigned (leased) → running → one of the finished states. */
export const jobStatuses = ["queued", "assigned", "running", "succeeded", "failed", "canceled", "errored"] as const;
export const jobStatusSchema = z.enum(jobStatuses);
export type JobStatus = z.infer<typeof jobStatusSchema>;

export const phaseSchema = z.enum(["plan", "apply"]);
export type Phase = z.infer<typeof phaseSchema>;

export const engineSchema = z.enum(["terraform", "tofu"]);
export type Engine = z.infer<typeof engineSchema>;

export const agentStatusSchema = z.enum(["idle", "busy", "offline"]);
export type AgentStatus = z.infer<typeof agentStatusSchema>;

export const driverSchema = z.enum(["local", "kubernetes", "docker"]);
export type Driver = z.infer<typeof driverSchema>;

export const listOf = <T extends z.ZodType>(item: T) => z.object({ items: z.array(item) });
/** One page of a long list: `next` is the cursor of the following page (pass it as `?after=`), null on the last. */
export const pageOf = <T extends z.ZodType>(item: T) => z.object({ items: z.array(item), next: z.string().nullable() });
/** Most items one page may hold. */
export const maxPageSize = 1000;

/** One part of a refused request: its dotted path (`engineVersion`, `remoteStateConsumers.0`) and what is wrong. */
export const requestIssueSchema = z.object({ path: z.string(), message: z.string() });
export type RequestIssue = z.infer<typeof requestIssueSchema>;
export const errorBodySchema = z
  .object({
    error: z.string(),
    message: z.string(),
    // So a form can show each problem beside its field; the message already says them all.
    issues: z.array(requestIssueSchema).optional().describe("a request refused as bad_request: the parts at fault"),
  })
  .loose();
export type ErrorBody = z.infer<typeof errorBodySchema>;

export const healthSchema = z.object({
  status: z.enum(["ok", "starting", "stopping"]),
  currentTime: z.string(),
  lastActivity: z.string().nullable(),
});
