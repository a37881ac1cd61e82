import type { Run } from "@drover/protocol";
import { api } from "../api.js";
import { ErrorNote, Link, Loading, PageTitle, Status, Time } from "../components.js";
import { useResource } from "../resource.js";
import { paths } from "../router.js";

/** What needs a person now: plans to confirm, recent failures, queues and agents per pool. */
export function HomePage() {
  const attention = useResource(
    async () => {
      const [waiting, failed] = await Promise.all([
        api.runs({ status: "planned", limit: 50 }),
        api.runs({ status: "errored", limit: 10 }),
      ]);
      // Runs name their workspace by id; the few workspaces shown are read for their names.
      const ids = [...new Set([...waiting.items, ...failed.items].map((r) => r.workspaceId))];
      const workspaces = await Promise.all(ids.map((id) => api.workspace(id)));
      const names = new Map(workspaces.map((w) => [w.id, w.name]));
      return { waiting: waiting.items, failed: failed.items, names };
    },
    [],
    (event) => event === "run",
  );
  const pools = useResource(
    async () => {
      const { items } = await api.pools();
      return Promise.all(items.map(async (pool) => ({ pool, demand: await api.poolDemand(pool.id) })));
    },
    [],
    (event) => event === "run" || event === "agents",
  );

  return (
    <>
      <PageTitle>Overview</PageTitle>
      <section aria-labelledby="attention">
        <h2 id="attention">Needs attention</h2>
        <ErrorNote error={attention.error} />
        {attention.data === undefined ? (
          <Loading />
        ) : (
          <>
            <RunList
              label="Waiting for confirmation"
              empty="No plan waits for confirmation."
              runs={attention.data.waiting}
              names={attention.data.names}
            />
            <RunList
              label="Failed recently"
              empty="No run failed recently."
              runs={attention.data.failed}
              names={attention.data.names}
            />
          </>
        )}
      </section>
      <section aria-labelledby="queues">
        <h2 id="queues">Pools</h2>
        <ErrorNote error={pools.error} />
        {pools.data === undefined ? (
          <Loading />
        ) : pools.data.length === 0 ? (
          <p class="muted">No pool yet.</p>
        ) : (
          <div class="table-wrap">
            <table>
              <thead>
                <tr>
                  <th scope="col">Pool</th>
                  <th scope="col">Agents online</th>
                  <th scope="col">Queued jobs</th>
                  <th scope="col">Running jobs</th>
                  <th scope="col">Awaiting confirmation</th>
                </tr>
              </thead>
              <tbody>
                {pools.data.map(({ pool, demand }) => (
                  <tr key={pool.id}>
                    <td>
                      <Link href={paths.pool(pool.name)}>{pool.name}</Link>
                    </td>
                    <td>{demand.agents.online}</td>
                    <td>{demand.queued}</td>
                    <td>{demand.running}</td>
                    <td>{demand.awaitingConfirmation}</td>
                  </tr>
                ))}
              </tbody>
            </table>
          </div>
        )}
      </section>
    </>
  );
}

function RunList(props: { label: string; empty: string; runs: Run[]; names: Map<string, string> }) {
  return (
    <>
      <h3>{props.label}</h3>
      {props.runs.length === 0 ? (
        <p class="muted">{props.empty}</p>
      ) : (
        <ul class="run-list" aria-label={props.label}>
          {props.runs.map((run) => {
            const ws = props.names.get(run.workspaceId) ?? run.workspaceId;
            return (
              <li key={run.id}>
                <Link href={paths.run(ws, run.id)}>
                  {ws} · {run.id}
                </Link>{" "}
                <Status value={run.status} /> <Time at={run.updatedAt} />
                {run.errorMessage ? <span class="muted"> — {run.errorMessage}</span> : null}
              </li>
            );
          })}
        </ul>
      )}
    </>
  );
}
