import type { Agent } from "@drover/protocol";
import { useState } from "preact/hooks";
import { api } from "../api.js";
import {
  ErrorNote,
  isNotFound,
  later,
  Link,
  Loading,
  NotFound,
  PageTitle,
  RevokeCell,
  ShownOnce,
  Status,
  Time,
} from "../components.js";
import { useResource } from "../resource.js";
import { navigate, paths } from "../router.js";

/** The agent pools, their agents online, and a form to make one. */
export function PoolsPage() {
  const pools = useResource(() => api.pools(), []);
  const agents = useResource(
    () => api.agents(),
    [],
    (event) => event === "agents",
  );
  const [name, setName] = useState("");
  const [error, setError] = useState<Error | null>(null);
  const online = (poolId: string) =>
    (agents.data?.items ?? []).filter((a) => a.poolId === poolId && a.status !== "offline").length;
  return (
    <>
      <PageTitle>Agent pools</PageTitle>
      <ErrorNote error={pools.error ?? agents.error} />
      {pools.data === undefined ? (
        <Loading />
      ) : pools.data.items.length === 0 ? (
        <p class="muted">No pool yet.</p>
      ) : (
        <ul class="cards">
          {pools.data.items.map((p) => (
            <li key={p.id}>
              <Link href={paths.pool(p.name)}>{p.name}</Link>
              <span class="muted">
                {" "}
                · {online(p.id)} agent{online(p.id) === 1 ? "" : "s"} online
              </span>
            </li>
          ))}
        </ul>
      )}
      <h2>Create a pool</h2>
      <form
        class="inline-form"
        onSubmit={later(async (e) => {
          e.preventDefault();
          setError(null);
          try {
            const pool = await api.createPool(name.trim());
            navigate(paths.pool(pool.name));
          } catch (err) {
            setError(err instanceof Error ? err : new Error(String(err)));
          }
        })}
      >
        <label for="pool-name">Name</label>
        <input id="pool-name" required value={name} onInput={(e) => setName(e.currentTarget.value)} />
        <button type="submit" class="primary">
          Create pool
        </button>
      </form>
      <ErrorNote error={error} />
    </>
  );
}

/** One pool: its agents, its tokens (made here and shown once, revoked here), its workspaces. */
export function PoolPage(props: { name: string }) {
  const pool = useResource(() => api.pool(props.name), [props.name]);
  const id = pool.data?.id;
  const agents = useResource(
    async () => (id ? (await api.agents()).items.filter((a) => a.poolId === id) : []),
    [id],
    // Running job counts change as runs move on.
    (event) => event === "agents" || event === "run",
  );
  const tokens = useResource(() => (id ? api.poolTokens(id) : Promise.resolve({ items: [] })), [id]);
  const workspaces = useResource(
    () => (id ? api.workspaces({ pool: id, limit: 100 }) : Promise.resolve({ items: [], next: null })),
    [id],
  );
  const [description, setDescription] = useState("");
  const [created, setCreated] = useState<string | null>(null);
  const [error, setError] = useState<Error | null>(null);

  if (isNotFound(pool.error))
    return <NotFound back={{ href: paths.pools(), label: "All pools" }}>There is no pool {props.name}.</NotFound>;
  if (pool.error) return <ErrorNote error={pool.error} />;
  if (pool.data === undefined) return <Loading />;
  const p = pool.data;
  return (
    <>
      <PageTitle sub={<p class="muted">Agent pool</p>}>{p.name}</PageTitle>
      <section aria-labelledby="pool-agents">
        <h2 id="pool-agents">Agents</h2>
        <ErrorNote error={agents.error} />
        {agents.data === undefined ? <Loading /> : <AgentTable agents={agents.data} />}
      </section>
      <section aria-labelledby="pool-tokens">
        <h2 id="pool-tokens">Pool tokens</h2>
        <p class="muted">Agents register with a pool token (their DROVER_TOKEN).</p>
        <ErrorNote error={tokens.error ?? error} />
        {created ? <ShownOnce label="New pool token" secret={created} onDone={() => setCreated(null)} /> : null}
        {tokens.data && tokens.data.items.length > 0 ? (
          <div class="table-wrap">
            <table>
              <caption class="visually-hidden">Tokens of pool {p.name}</caption>
              <thead>
                <tr>
                  <th scope="col">Description</th>
                  <th scope="col">Created</th>
                  <th scope="col">Last used</th>
                  <th scope="col">State</th>
                </tr>
              </thead>
              <tbody>
                {tokens.data.items.map((t) => (
                  <tr key={t.id}>
                    <td>{t.description || <span class="muted">(none)</span>}</td>
                    <td>
                      <Time at={t.createdAt} />
                    </td>
                    <td>
                      <Time at={t.lastUsedAt} />
                    </td>
                    <td>
                      <RevokeCell
                        revokedAt={t.revokedAt}
                        title={`Revoke the pool token “${t.description || t.id}”?`}
                        description="Agents using it are refused from now on, and the jobs they hold end."
                        onRevoke={async () => {
                          await api.revokePoolToken(t.id);
                          tokens.reload();
                        }}
                      />
                    </td>
                  </tr>
                ))}
              </tbody>
            </table>
          </div>
        ) : tokens.data ? (
          <p class="muted">No token yet.</p>
        ) : null}
        <form
          class="inline-form"
          onSubmit={later(async (e) => {
            e.preventDefault();
            setError(null);
            try {
              const made = await api.createPoolToken(p.id, description.trim());
              setCreated(made.token);
              setDescription("");
              tokens.reload();
            } catch (err) {
              setError(err instanceof Error ? err : new Error(String(err)));
            }
          })}
        >
          <label for="pool-token-description">Description</label>
          <input
            id="pool-token-description"
            value={description}
            placeholder="where its agents run"
            onInput={(e) => setDescription(e.currentTarget.value)}
          />
          <button type="submit" class="primary">
            Create pool token
          </button>
        </form>
      </section>
      <section aria-labelledby="pool-workspaces">
        <h2 id="pool-workspaces">Workspaces using this pool</h2>
        <ErrorNote error={workspaces.error} />
        {workspaces.data === undefined ? (
          <Loading />
        ) : workspaces.data.items.length === 0 ? (
          <p class="muted">None.</p>
        ) : (
          <ul class="cards">
            {workspaces.data.items.map((w) => (
              <li key={w.id}>
                <Link href={paths.workspace(w.name)}>{w.name}</Link>
              </li>
            ))}
            {workspaces.data.next ? <li class="muted">and more</li> : null}
          </ul>
        )}
      </section>
    </>
  );
}

function AgentTable(props: { agents: Agent[] }) {
  if (props.agents.length === 0) return <p class="muted">No agent has registered.</p>;
  return (
    <div class="table-wrap">
      <table>
        <caption class="visually-hidden">Agents</caption>
        <thead>
          <tr>
            <th scope="col">Name</th>
            <th scope="col">Status</th>
            <th scope="col">Driver</th>
            <th scope="col">Version</th>
            <th scope="col">Running / concurrency</th>
            <th scope="col">Last seen</th>
          </tr>
        </thead>
        <tbody>
          {props.agents.map((a) => (
            <tr key={a.id}>
              <td>{a.name}</td>
              <td>
                <Status value={a.status} />
              </td>
              <td>{a.driver}</td>
              <td>{a.version}</td>
              <td>
                {a.runningJobs} / {a.capacity}
              </td>
              <td>
                <Time at={a.lastSeenAt} />
              </td>
            </tr>
          ))}
        </tbody>
      </table>
    </div>
  );
}
