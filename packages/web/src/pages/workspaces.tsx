import type { Pool } from "@drover/protocol";
import { useEffect, useState } from "preact/hooks";
import { api } from "../api.js";
import { ErrorNote, Link, Loading, PageTitle, Status, Time } from "../components.js";
import { useResource } from "../resource.js";
import { navigate, paths, useLocation } from "../router.js";

const pageSize = 50;

/** Workspaces by name, searchable, a page at a time; the search and page live in the address. */
export function WorkspacesPage() {
  const { search } = useLocation();
  const q = search.get("q") ?? "";
  const after = search.get("after") ?? undefined;
  const [typed, setTyped] = useState(q);
  useEffect(() => setTyped(q), [q]);

  const list = useResource(
    () => api.workspaces({ search: q, ...(after ? { after } : {}), limit: pageSize }),
    [q, after],
    (event) => event === "run",
  );
  const pools = useResource(() => api.pools(), []);
  const poolName = (id: string) => pools.data?.items.find((p: Pool) => p.id === id)?.name ?? id;

  const go = (params: Record<string, string | undefined>) => {
    const next = new URLSearchParams();
    for (const [k, v] of Object.entries(params)) if (v) next.set(k, v);
    const text = next.toString();
    navigate(`${paths.workspaces()}${text ? `?${text}` : ""}`);
  };

  return (
    <>
      <PageTitle>Workspaces</PageTitle>
      <form
        role="search"
        class="inline-form"
        onSubmit={(e) => {
          e.preventDefault();
          go({ q: typed });
        }}
      >
        <label for="ws-search">Search by name</label>
        <input id="ws-search" type="search" value={typed} onInput={(e) => setTyped(e.currentTarget.value)} />
        <button type="submit">Search</button>
      </form>
      <ErrorNote error={list.error} />
      {list.data === undefined ? (
        <Loading />
      ) : list.data.items.length === 0 ? (
        <p class="muted">{q ? `No workspace name holds “${q}”.` : "No workspace yet: drover workspace create NAME."}</p>
      ) : (
        <div class="table-wrap">
          <table>
            <caption class="visually-hidden">Workspaces</caption>
            <thead>
              <tr>
                <th scope="col">Name</th>
                <th scope="col">Latest run</th>
                <th scope="col">Engine</th>
                <th scope="col">Pool</th>
                <th scope="col">Auto-apply</th>
              </tr>
            </thead>
            <tbody>
              {list.data.items.map((ws) => (
                <tr key={ws.id}>
                  <td>
                    <Link href={paths.workspace(ws.name)}>{ws.name}</Link>
                  </td>
                  <td>
                    {ws.latestRun ? (
                      <>
                        <Link href={paths.run(ws.name, ws.latestRun.id)}>
                          <Status value={ws.latestRun.status} />
                        </Link>{" "}
                        <Time at={ws.latestRun.createdAt} />
                      </>
                    ) : (
                      <span class="muted">no run yet</span>
                    )}
                  </td>
                  <td>
                    {ws.engine}
                    {ws.engineVersion ? ` ${ws.engineVersion}` : ""}
                  </td>
                  <td>{poolName(ws.poolId)}</td>
                  <td>{ws.autoApply ? "yes" : "no"}</td>
                </tr>
              ))}
            </tbody>
          </table>
        </div>
      )}
      <nav class="pager" aria-label="Pages">
        {after ? (
          <button type="button" onClick={() => go({ q })}>
            First page
          </button>
        ) : null}
        {list.data?.next ? (
          <button type="button" onClick={() => go({ q, after: list.data?.next ?? undefined })}>
            Next page
          </button>
        ) : null}
      </nav>
    </>
  );
}
