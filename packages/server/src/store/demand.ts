import { leasedJobStatuses, unfinishedJobStatuses, type PoolDemand } from "@drover/protocol";
import type { StoreContext } from "./context.js";
import { getPool } from "./pools.js";

/** Counts behind a pool's demand, before the agents' concurrency turns them into a figure. */
interface DemandCounts {
  queued: number;
  claimed: number;
  running: number;
  awaitingConfirmation: number;
  online: number;
  busy: number;
  largestCapacity: number;
}

const emptyCounts = (): DemandCounts => ({
  queued: 0,
  claimed: 0,
  running: 0,
  awaitingConfirmation: 0,
  online: 0,
  busy: 0,
  largestCapacity: 0,
});

/**
 * Demand counts of every pool (by pool id) in four grouped queries, so /metrics costs the same
 * for one pool or a thousand. Runs waiting behind another run of their workspace are not
 * demand: no agent can take them until the workspace's active run ends.
 */
async function demandCounts(ctx: StoreContext, poolId?: string): Promise<Map<string, DemandCounts>> {
  const counts = new Map<string, DemandCounts>();
  const of = (id: string) => {
    let c = counts.get(id);
    if (!c) counts.set(id, (c = emptyCounts()));
    return c;
  };
  let pools = ctx.db.selectFrom("pools").select("id");
  if (poolId !== undefined) pools = pools.where("id", "=", poolId);
  for (const p of await pools.execute()) of(p.id);

  let jobs = ctx.db
    .selectFrom("jobs")
    .select(["pool_id", "status", (eb) => eb.fn.countAll<number>().as("n")])
    .where("status", "in", unfinishedJobStatuses)
    .groupBy(["pool_id", "status"]);
  if (poolId !== undefined) jobs = jobs.where("pool_id", "=", poolId);
  for (const r of await jobs.execute()) {
    const c = of(r.pool_id);
    const n = Number(r.n);
    if (r.status === "queued") c.queued += n;
    else if (r.status === "assigned") c.claimed += n;
    else c.running += n;
  }

  let awaiting = ctx.db
    .selectFrom("runs")
    .innerJoin("workspaces", "workspaces.id", "runs.workspace_id")
    .select(["workspaces.pool_id", (eb) => eb.fn.countAll<number>().as("n")])
    .where("runs.status", "=", "planned")
    .groupBy("workspaces.pool_id");
  if (poolId !== undefined) awaiting = awaiting.where("workspaces.pool_id", "=", poolId);
  for (const r of await awaiting.execute()) of(r.pool_id).awaitingConfirmation += Number(r.n);

  // Busy means holding a claimed or running job: the jobs table knows at once, where the
  // agents' own job counts reach the database a heartbeat (and a presence flush) later.
  let agents = ctx.db
    .selectFrom("agents")
    .select([
      "pool_id",
      "capacity",
      (eb) =>
        eb
          .exists(
            eb
              .selectFrom("jobs")
              .select("jobs.id")
              .whereRef("jobs.agent_id", "=", "agents.id")
              .where("jobs.status", "in", leasedJobStatuses),
          )
          .as("busy"),
    ])
    .where("state", "=", "online");
  if (poolId !== undefined) agents = agents.where("pool_id", "=", poolId);
  for (const r of await agents.execute()) {
    const c = of(r.pool_id);
    c.online++;
    if (r.busy === true || Number(r.busy) === 1) c.busy++;
    c.largestCapacity = Math.max(c.largestCapacity, r.capacity);
  }
  return counts;
}

function toDemand(pool: { id: string; name: string }, c: DemandCounts, jobsPerAgent: number | undefined): PoolDemand {
  const perAgent = jobsPerAgent ?? Math.max(1, c.largestCapacity);
  const pending = c.queued + c.claimed;
  return {
    pool,
    pending,
    queued: c.queued,
    claimed: c.claimed,
    running: c.running,
    awaitingConfirmation: c.awaitingConfirmation,
    agents: { online: c.online, idle: c.online - c.busy, busy: c.busy },
    jobsPerAgent: perAgent,
    desiredAgents: Math.ceil((pending + c.running) / perAgent),
  };
}

/**
 * A pool's demand for agents (by id or name). `jobsPerAgent` is the agents' concurrency; without
 * it the largest capacity among the pool's online agents is used, or 1 when none is online.
 */
export async function poolDemand(ctx: StoreContext, poolIdOrName: string, jobsPerAgent?: number): Promise<PoolDemand> {
  const pool = await getPool(ctx, poolIdOrName);
  const counts = (await demandCounts(ctx, pool.id)).get(pool.id) ?? emptyCounts();
  return toDemand({ id: pool.id, name: pool.name }, counts, jobsPerAgent);
}

/** The demand of every pool, for /metrics. */
export async function allPoolDemands(ctx: StoreContext): Promise<PoolDemand[]> {
  const [pools, counts] = await Promise.all([
    ctx.db.selectFrom("pools").select(["id", "name"]).execute(),
    demandCounts(ctx),
  ]);
  return pools.map((p) => toDemand(p, counts.get(p.id) ?? emptyCounts(), undefined));
}
