import { DroverError, tokenKind } from "@drover/protocol";
import type { FastifyRequest } from "fastify";
import { presentedToken, requireUser, type UserCaller } from "../http/auth.js";
import type { StoreContext } from "../store/context.js";
import { authenticateJobToken, type JobRow } from "../store/queue.js";
import { mayReadState } from "../store/workspaces.js";
import type { JsonApiError } from "./jsonapi.js";

/*
 * `terraform_remote_state` from inside a run (decision 0072). The agent hands the run's terraform
 * its job token for the server's hostname; with it, the few read routes that data source calls
 * answer for the run's own workspace and for those that list it as a remote state consumer (or
 * allow every workspace). Anything else answers exactly as a workspace that does not exist, so
 * a run learns nothing about workspaces it may not read. Every other /api/v2 route refuses a job
 * token (requireTfeUser).
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
      throw new DroverError("unauthorized", "this job token is no longer valid: its job has ended or was reassigned", {
        cause: err,
      });
    throw err;
  }
}

/**
 * Authenticates a user-only route's caller. A run's job token gets a refusal that says what it
 * may do instead: terraform_remote_state's remote backend asks to create a workspace it could
 * not find, so this is the message a run whose read was refused shows — the same whether the
 * workspace exists or not.
 */
export async function requireTfeUser(ctx: StoreContext, request: FastifyRequest): Promise<UserCaller> {
  if (request.headers.authorization !== undefined && tokenKind(presentedToken(request)) === "job")
    throw new DroverError(
      "forbidden",
      "a run's token only reads the state of its own workspace and of workspaces that list it as a remote state " +
        "consumer: check the workspace name, and allow this run's workspace with " +
        "`drover workspace update <workspace> --remote-state-consumers <this workspace>`",
    );
  return requireUser(ctx, request);
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
