import type { Job } from "@drover/protocol";
import type { StoreContext } from "./context.js";
import { toJob } from "./queue.js";

/** Jobs of a run, in order of creation, with their agents' names while the registrations are kept. */
export async function listRunJobs(ctx: StoreContext, runId: string): Promise<Job[]> {
  const rows = await ctx.db
    .selectFrom("jobs")
    .leftJoin("agents", "agents.id", "jobs.agent_id")
    .selectAll("jobs")
    .select("agents.name as agent_name")
    .where("run_id", "=", runId)
    .orderBy("jobs.created_at")
    .orderBy("jobs.id")
    .execute();
  return rows.map(({ agent_name, ...job }) => toJob(job, agent_name));
}
