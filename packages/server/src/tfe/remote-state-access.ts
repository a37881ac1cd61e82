import { DroverError, tokenKind } from "@drover/protocol";
import type { FastifyRequest } from "fastify";
import { presentedToken, requireUser, type UserCaller } from "../http/auth.js";
import type { StoreContext } from "../store/context.js";
import { authenticateJobToken, type JobRow } from "../store/queue.js";
import { mayReadState } from "../store/workspaces.js";
import { JsonApiError } from "./jsonapi.js";

/*
 * `terraform_remote_state` from inside a run (decision 0072). The agent hands the run's terraform
 * its job token for the server's hostname; with it, the few read routes that data source calls
 * answer for the run's own workspace and for those that list it as a remote state consumer (or
 * allow every workspace). Anything else answers exactly as a workspace that does not exist, so
 * a run learns nothing about workspaces it may not read. Every other /api/v2 route refuses a job
 * token (requireUser).
 */

/** Who calls a read route: a user token, or a run's job token. */
export type TfeReader = { user: UserCaller; job?: undefined } | { user?: undefined; job: JobRow };

/** Authenticates a read route's caller; a job token must belong to a job still running. */
export async function requireReader(ctx: StoreContext, request: FastifyRequest): Promise<TfeReader> {
  if (request.headers.authorization === undefined || tokenKind(presentedToken(request)) !== "job")
    return { user: await requireUser(ctx, request) };
  try {
    return { job: await authenticateJobToken(ctx, presentedToken(request)) };
  } catch (err) {
    // A finished or superseded job's token is simply no longer a credential here: terraform
    // shows a 401 as an authentication failure, where a 409 would read as a conflict.
    if (err instanceof DroverError && (err.code === "job_finished" || err.code === "stale_attempt"))
      throw new DroverError("unauthorized", "this job token is no longer valid: its job has ended", { cause: err });
    throw err;
  }
}

/**
 * Lets the caller see workspace `workspaceId`, or throws `notFound()`: the 404 the route gives
 * for a workspace (or state version) that does not exist.
 */
export async function checkReadable(
  ctx: StoreContext,
  caller: TfeReader,
  workspaceId: string,
  notFound: () => JsonApiError,
): Promise<void> {
  if (caller.job === undefined) return;
  const target = await ctx.db
    .selectFrom("workspaces")
    .select(["id", "remote_state_consumers"])
    .where("id", "=", workspaceId)
    .executeTakeFirst();
  if (!target || !mayReadState(caller.job.workspace_id, { id: target.id, consumers: target.remote_state_consumers }))
    throw notFound();
}
