import type { Workspace } from "@drover/protocol";
import { api } from "../api.js";
import { ErrorNote, isNotFound, Link, Loading, NotFound, PageTitle, SourceBrief, Status, Time } from "../components.js";
import { useResource } from "../resource.js";
import { navigate, paths, useLocation, workspaceTabs, type WorkspaceTab } from "../router.js";
import { SettingsTab } from "./workspace-settings.js";
import { VariablesTab } from "./workspace-variables.js";

const tabNames: Record<WorkspaceTab, string> = {
  runs: "Runs",
  variables: "Variables",
  outputs: "Outputs",
  state: "State versions",
  settings: "Settings",
};

/** One workspace: its runs, variables, outputs, state versions and settings, a tab each. */
export function WorkspacePage(props: { name: string; tab: WorkspaceTab }) {
  const ws = useResource(
    () => api.workspace(props.name),
    [props.name],
    (event) => event === "run",
  );
  if (isNotFound(ws.error)) return <NotFound>There is no workspace {props.name}.</NotFound>;
  return (
    <>
      <PageTitle sub={<p class="muted">Workspace</p>}>{props.name}</PageTitle>
      <nav class="tabs" aria-label="Workspace">
        <ul>
          {workspaceTabs.map((tab) => (
            <li key={tab}>
              <Link
                href={paths.workspace(props.name, tab)}
                {...(tab === props.tab ? { "aria-current": "page" as const } : {})}
              >
                {tabNames[tab]}
              </Link>
            </li>
          ))}
        </ul>
      </nav>
      <ErrorNote error={ws.error} />
      {ws.data === undefined ? (
        ws.error ? null : (
          <Loading />
        )
      ) : (
        <section aria-label={tabNames[props.tab]}>
          <h2>{tabNames[props.tab]}</h2>
          <Tab ws={ws.data} tab={props.tab} reload={ws.reload} />
        </section>
      )}
    </>
  );
}

function Tab(props: { ws: Workspace; tab: WorkspaceTab; reload: () => void }) {
  switch (props.tab) {
    case "runs":
      return <RunsTab ws={props.ws} />;
    case "variables":
      return <VariablesTab ws={props.ws} />;
    case "outputs":
      return <OutputsTab ws={props.ws} />;
    case "state":
      return <StateTab ws={props.ws} />;
    case "settings":
      return <SettingsTab ws={props.ws} onSaved={props.reload} />;
  }
}

const runsPerPage = 25;

function RunsTab(props: { ws: Workspace }) {
  const after = useLocation().search.get("after") ?? undefined;
  const runs = useResource(
    () => api.runs({ workspace: props.ws.id, limit: runsPerPage, ...(after ? { after } : {}) }),
    [props.ws.id, after],
    (event) => event === "run",
  );
  const base = paths.workspace(props.ws.name);
  if (runs.error) return <ErrorNote error={runs.error} />;
  if (runs.data === undefined) return <Loading />;
  if (runs.data.items.length === 0)
    return (
      <>
        <RepositoryLink ws={props.ws} />
        <p class="muted">
          No run yet: start one from a configuration directory with{" "}
          <code>drover run start &lt;dir&gt; --workspace {props.ws.name}</code>.
        </p>
      </>
    );
  return (
    <>
      <RepositoryLink ws={props.ws} />
      <div class="table-wrap">
        <table>
          <caption class="visually-hidden">Runs of {props.ws.name}</caption>
          <thead>
            <tr>
              <th scope="col">Run</th>
              <th scope="col">Status</th>
              <th scope="col">Changes</th>
              <th scope="col">Message</th>
              <th scope="col">Created</th>
            </tr>
          </thead>
          <tbody>
            {runs.data.items.map((run) => (
              <tr key={run.id}>
                <td>
                  <Link href={paths.run(props.ws.name, run.id)}>{run.id}</Link>
                </td>
                <td>
                  <Status value={run.status} />
                  {run.isDestroy ? " (destroy)" : ""}
                  {run.planOnly ? " (plan only)" : ""}
                </td>
                <td>
                  {run.planSummary
                    ? `+${run.planSummary.add} ~${run.planSummary.change} −${run.planSummary.destroy}`
                    : "—"}
                </td>
                <td class="message">
                  {run.message}
                  {run.source ? (
                    <>
                      {run.message ? <br /> : null}
                      <SourceBrief source={run.source} />
                    </>
                  ) : null}
                </td>
                <td>
                  <Time at={run.createdAt} />
                </td>
              </tr>
            ))}
          </tbody>
        </table>
      </div>
      <nav class="pager" aria-label="Pages of runs">
        {after ? (
          <button type="button" onClick={() => navigate(base)}>
            Newest runs
          </button>
        ) : null}
        {runs.data.next ? (
          <button type="button" onClick={() => navigate(`${base}?after=${encodeURIComponent(runs.data?.next ?? "")}`)}>
            Older runs
          </button>
        ) : null}
      </nav>
    </>
  );
}

/** Where a workspace linked to a repository takes its runs from, and why the last commit started none. */
function RepositoryLink(props: { ws: Workspace }) {
  const vcs = useResource(
    () => api.workspaceVcs(props.ws.name),
    [props.ws.name],
    (event) => event === "run",
  );
  const v = vcs.data;
  if (!v) return <ErrorNote error={vcs.error} />;
  return (
    <p class="vcs-link">
      Runs start from commits to <code>{v.repository}</code> on <code>{v.branch}</code> (connection {v.connection})
      {v.triggerPaths.length > 0 ? ` that change ${v.triggerPaths.join(", ")}` : ""}, and plans from its pull requests.
      {v.lastError ? <span class="error"> The last commit started no run: {v.lastError}</span> : null}
    </p>
  );
}

function OutputsTab(props: { ws: Workspace }) {
  const outputs = useResource(
    () => api.outputs(props.ws.id),
    [props.ws.id],
    (event) => event === "run",
  );
  if (outputs.error) return <ErrorNote error={outputs.error} />;
  if (outputs.data === undefined) return <Loading />;
  if (outputs.data.items.length === 0) return <p class="muted">No outputs: no apply has recorded any yet.</p>;
  return (
    <dl class="outputs">
      {outputs.data.items.map((o) => (
        <div key={o.name}>
          <dt>{o.name}</dt>
          <dd>
            {o.sensitive ? (
              <span class="muted">sensitive — hidden</span>
            ) : (
              <pre>{typeof o.value === "string" ? o.value : JSON.stringify(o.value, null, 2)}</pre>
            )}
          </dd>
        </div>
      ))}
    </dl>
  );
}

function StateTab(props: { ws: Workspace }) {
  const versions = useResource(
    () => api.stateVersions(props.ws.id),
    [props.ws.id],
    (event) => event === "run",
  );
  if (versions.error) return <ErrorNote error={versions.error} />;
  if (versions.data === undefined) return <Loading />;
  if (versions.data.items.length === 0) return <p class="muted">No state yet.</p>;
  return (
    <div class="table-wrap">
      <table>
        <caption class="visually-hidden">State versions of {props.ws.name}</caption>
        <thead>
          <tr>
            <th scope="col">Serial</th>
            <th scope="col">Written</th>
            <th scope="col">By run</th>
            <th scope="col">Size</th>
            <th scope="col">Download</th>
          </tr>
        </thead>
        <tbody>
          {versions.data.items.map((v) => (
            <tr key={v.id}>
              <td>
                {v.serial ?? "—"}
                {v.deletedAt ? " (deleted)" : ""}
              </td>
              <td>
                <Time at={v.createdAt} />
              </td>
              <td>{v.runId ? <Link href={paths.run(props.ws.name, v.runId)}>{v.runId}</Link> : "outside a run"}</td>
              <td>{formatBytes(v.size)}</td>
              <td>
                <a href={api.stateVersionUrl(v.id)} download={`${props.ws.name}-${v.serial ?? v.id}.tfstate`}>
                  Download <span class="visually-hidden">state version {v.serial ?? v.id}</span>
                </a>
              </td>
            </tr>
          ))}
        </tbody>
      </table>
    </div>
  );
}

/** A byte count for people. */
export function formatBytes(n: number): string {
  if (n < 1024) return `${n} B`;
  if (n < 1024 * 1024) return `${(n / 1024).toFixed(1)} KiB`;
  return `${(n / 1024 / 1024).toFixed(1)} MiB`;
}
